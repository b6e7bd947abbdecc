"""Candidate serving from a published run: ``CandidateGenerator`` (library), the HTTP API with hot reload of
``latest`` (``app``, ``reload``, ``server``; ``python -m pipelines.serve``). Indexing a run is ``retrieval.index.run_index``."""

from retrieval.serving.generator import CandidateGenerator, Candidates, UnknownItemError, resolve_run_dir

__all__ = ["CandidateGenerator", "Candidates", "UnknownItemError", "resolve_run_dir"]
