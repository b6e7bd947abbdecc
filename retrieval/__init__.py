"""Candidate retrieval for recommender systems: two-tower and Item2Vec models, honest evaluation, FAISS serving.

TensorFlow Recommenders 0.7.7 needs Keras 2, so ``TF_USE_LEGACY_KERAS=1`` is set here, before anything imports
TensorFlow. Import ``retrieval`` before ``tensorflow`` (every module of this package does). Start-up is quiet:
TensorFlow's C++ start-up lines (oneDNN, CUDA probing) are hidden unless ``--verbosity=1`` or the environment's
``TF_CPP_MIN_LOG_LEVEL`` asks for them (``retrieval.quiet``).
"""

import os

from retrieval import quiet

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
quiet.install()

__version__ = "0.1.0"
