"""Candidate serving from a published run: ``CandidateGenerator`` (library), the HTTP API with hot reload of
``latest`` (``app``, ``reload``, ``server``; ``python -m pipelines.serve``). Indexing a run is ``retrieval.index.run_index``.

The generator's names load on first use (PEP 562), so importing a serving module such as ``batcher`` or ``workers``
does not import TensorFlow: ``pipelines.serve`` checks its flags and ``--run_dir`` first."""

import importlib

__all__ = ["CandidateGenerator", "Candidates", "UnknownItemError", "resolve_run_dir"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("retrieval.serving.generator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
