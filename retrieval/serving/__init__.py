"""Candidate serving from a published run: ``CandidateGenerator`` (library), the HTTP API with hot reload of
``latest`` (``app``, ``reload``, ``server``; ``python -m pipelines.serve``), and indexing a run (``run_index``)."""

from retrieval.serving.generator import CandidateGenerator, Candidates, UnknownItemError, resolve_run_dir
from retrieval.serving.run_index import build_run_index

__all__ = ["CandidateGenerator", "Candidates", "UnknownItemError", "build_run_index", "resolve_run_dir"]
