"""Candidate retrieval for recommender systems: two-tower and Item2Vec models, honest evaluation, FAISS serving.

TensorFlow Recommenders 0.7.7 needs Keras 2, so ``TF_USE_LEGACY_KERAS=1`` is set here, before anything imports
TensorFlow. Import ``retrieval`` before ``tensorflow`` (every module of this package does).
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
