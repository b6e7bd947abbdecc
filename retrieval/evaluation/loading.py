"""What evaluation and batch inference read from a run directory (``retrieval.artifacts.RunPaths``).

- ``data/train.parquet`` (and ``data/test.parquet``): canonical interaction tables, read with the data layer's reader;
- ``item_embeddings.parquet`` through ``retrieval.export.read_item_embeddings``: the catalogue, rows = vocabulary
  indices 2.. (two zero rows are put in front for padding and OOV, which are never recommended);
- ``user_tower/`` through ``retrieval.export.load_user_encoder``: user vectors from (user id, history), the history
  being the user's training items, most recent first;
- ``manifest.json``: ``metric`` ("ip" or "cosine": with cosine, both sides are L2-normalised before the inner
  product; runs exported before the index's name was adopted say "dot" for "ip") and ``run_id``; ``config.json``
  (optional): the split and evaluation settings of the run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
from absl import logging

from retrieval import artifacts, export
from retrieval.config_keys import Settled
from retrieval.data import order as order_lib
from retrieval.data import readers, splits, validate
from retrieval.data.config import DATA
from retrieval.data.histories import item_ids_recent_first
from retrieval.data.vocab import NUM_RESERVED
from retrieval.errors import InputError
from retrieval.evaluation import protocols
from retrieval.settings import TOP


def _normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def read_json_if_present(path) -> dict:
    return artifacts.read_json(path) if path.exists() else {}


def read_interactions(path, what: str) -> pd.DataFrame:
    """Reads an interaction table (any format the data layer reads), as an ``InputError`` when missing; a problem
    in a run's own ``data/*.parquet`` is reported as a damaged artifact of the run, not as a mistake in user data."""
    if not Path(path).exists():
        raise InputError(f"{what} not found", path=str(path))
    try:
        return readers.read_interactions(path)
    except InputError as e:
        paths = artifacts.RunPaths(Path(path).parent.parent)
        if Path(path) in (paths.train_data, paths.test_data, paths.validation_data):
            raise validate.internal_artifact(e, path, f"the run's {what}") from None
        raise


def read_users_interactions(path, user_ids: Sequence[str], what: str) -> pd.DataFrame:
    """The rows of ``user_ids`` in a run's own interaction table (``data/*.parquet``), by a filtered scan of the
    file (``readers.read_run_interactions``): memory holds those users' rows, not the table (what lets evaluation
    and batch inference run on logs larger than memory)."""
    if not Path(path).exists():
        raise InputError(f"{what} not found", path=str(path))
    try:
        frame = readers.read_run_interactions(path, user_ids)
        validate.require_columns(frame.columns, ["user_id", "item_id"], str(path))
    except InputError as e:
        raise validate.internal_artifact(e, path, f"the run's {what}") from None
    return frame


@dataclasses.dataclass
class RunModel:
    """A trained run as evaluation sees it: item vectors by vocabulary index and a user encoder."""

    run_id: str
    metric: str
    item_ids: np.ndarray  # [N] str, vocabulary indices 2..
    item_vectors: np.ndarray  # [N + 2, d] float32, rows 0 and 1 zero
    encoder: object  # retrieval.export.UserEncoder
    warm: Optional[np.ndarray] = None  # [N] bool: had training interactions (None: all did)

    def user_vectors(self, user_ids: Sequence[str], train: pd.DataFrame) -> np.ndarray:
        """[B, d] vectors of ``user_ids`` from their training histories (normalised for cosine)."""
        histories = item_ids_recent_first(train, user_ids)
        vectors = np.asarray(self.encoder.encode(list(user_ids), histories), dtype=np.float32)
        return _normalize(vectors) if self.metric == "cosine" else vectors

    def aligned_to(self, catalogue: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Item vectors [len(catalogue) + 2, d] for another run's catalogue, and the indices this run lacks."""
        rows = pd.Index(self.item_ids).get_indexer(catalogue)
        vectors = np.zeros((len(catalogue) + NUM_RESERVED, self.item_vectors.shape[1]), np.float32)
        vectors[NUM_RESERVED:][rows >= 0] = self.item_vectors[NUM_RESERVED + rows[rows >= 0]]
        return vectors, np.flatnonzero(rows < 0) + NUM_RESERVED


def load_run_model(run_dir) -> RunModel:
    """Loads the exported model of ``run_dir``."""
    paths = artifacts.RunPaths(run_dir)
    manifest = read_json_if_present(paths.manifest)
    metric = manifest.get("metric", "ip")
    if metric not in ("ip", "dot", "cosine"):
        raise InputError(f"unknown metric {metric!r}; expected ip or cosine", path=str(paths.manifest),
                         field="metric")
    if not paths.item_embeddings.exists():
        raise InputError("item embeddings not found (was the run exported?)", path=str(paths.item_embeddings))
    item_ids, vectors = export.read_item_embeddings(paths.item_embeddings)
    item_vectors = np.concatenate([np.zeros((NUM_RESERVED, vectors.shape[1]), np.float32), vectors])
    if metric == "cosine":
        item_vectors = _normalize(item_vectors)
    encoder = export.load_user_encoder(paths.user_tower)
    logging.info("run %s: %d items, d=%d, metric %s", paths.root, len(item_ids), vectors.shape[1], metric)
    return RunModel(str(manifest.get("run_id", paths.root.name)), metric, np.asarray(item_ids).astype(str),
                    item_vectors, encoder, export.read_warm(paths.item_embeddings))


def _order_note(run_dir) -> str:
    """How each user's training interactions were ordered (the manifest's ``data_order``), for the protocol line."""
    order = (read_json_if_present(artifacts.RunPaths(run_dir).manifest).get("data_order") or {}).get("order")
    if order_lib.is_set(order):
        return "; order: none (sets: every training pair a target, histories random subsets of the other items)"
    if order == "time":
        return "; order: time (next-item examples)"
    return ""


def protocol_of(run_dir, test_path: Optional[str] = None) -> tuple[str, str]:
    """(split name, one-line description) from the run's ``config.json``, with the data order from its manifest; an
    explicit test file wins."""
    if test_path:
        return "files", protocols.describe("files", test_path=test_path) + _order_note(run_dir)
    stored = read_json_if_present(artifacts.RunPaths(run_dir).config)
    if "data" not in stored:
        return "unknown", "the run's data/test.parquet (split not recorded in config.json)"
    config = Settled(stored, (TOP, DATA))
    name = config["data.split"]
    if name in splits.SPLITS:
        fields = {field: config["seed" if field == "seed" else f"data.{field}"] for field in splits.SPLIT_FIELDS}
        holdout = splits.Holdout.of(fields, test_path=config["data.test_path"])
        return name, splits.SPLITS[name].describe(holdout) + _order_note(run_dir)
    return "unknown", "the run's data/test.parquet (split not recorded in config.json)"
