"""A fresh index without retraining: the published run's item tower embeds a new catalogue table.

The item tower of a run with item features is exported (``<run>/item_tower/``, ``retrieval.export``): it embeds any
item from its id (warm ids read their trained row, any other id the unknown-id row) and its coded features. A refresh

1. reads the published run (the model directory's ``latest`` or a lineage's, or a run directory) and the new table:
   the id column and exactly the feature columns the model was trained with (``vocab/item_features.json``); a
   missing id or feature column, a duplicate id, a text cell over ``features.MAX_TEXT_CHARS``, a column the model
   was not trained with, ids that share too little with the items the model was trained on
   (``validate.table_overlap``: another id column or scheme), or a table that removes or adds more than
   :data:`MAX_CHANGE` of the published catalogue without ``allow_large_change`` is bad input (exit 2) and nothing is
   written;
2. codes the table with the run's specs (values the model never saw are "missing") and embeds every row with the
   item tower: new items and changed ones get new vectors, unchanged ones the vectors they had; items gone from the
   table leave the catalogue (the table *is* the catalogue: list every item to serve);
3. writes a new run of the same lineage beside the published one: the user tower, training histories, vocabularies
   and metrics are hard links to the published run's (nothing retrained, so nothing else changes), the new
   ``item_embeddings.parquet`` and ``vocab/items.parquet`` describe the new catalogue, ``vocab/training_items.parquet``
   keeps the vocabulary the id tables are indexed by (for a later warm start), and the manifest names the run it
   was refreshed from;
4. builds the index with its recall self-check, runs the serving canary on the new run, and only then, under the
   publish lock and only if the lineage still publishes the run it started from, points the lineage's ``latest`` at
   it (an atomic rename): a server with hot reload picks it up at its next poll.

A refused self-check or canary is ``GateError`` (exit 3) and ``latest`` stays where it was.

What a refresh does not change: the user tower, whose id vocabulary is the training run's. An item added by a
refresh is a candidate for everyone at once, but in a request's history it is ignored (unknown id) until a retrain
knows it; catalogue items that were cold at training time count in histories through their features.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from absl import logging

from retrieval import artifacts
from retrieval.data import features, readers, validate
from retrieval.data.vocab import NUM_RESERVED, OOV, PAD, Vocabulary
from retrieval.errors import GateError, InputError
from retrieval.jobs.locations import new_run_id, resolve_run_dir
from retrieval.jobs.publish import COMPLETE_MARKER, ModelDirectory

BATCH = 8192  # items per call of the item tower
# Share of the published catalogue a refresh may remove, and may add, unless asked (``allow_large_change``): a
# table that drops half the catalogue is more often a truncated export than a decision.
MAX_CHANGE = 0.25
LINKED_FILES = ("config.json", "metrics.json", "id_tables.npz", "data/train.parquet", "data/test.parquet",
                "vocab/users.parquet", "vocab/item_features.json")
LINKED_DIRS = ("user_tower", "item_tower")


@dataclasses.dataclass
class RefreshOutcome:
    """What a refresh published: the new run and its catalogue counts."""

    run_dir: str
    refreshed_from: str
    items: int
    new: int
    removed: int
    warm: int
    latest_moved: bool
    seconds: float


def read_table(path: str, id_column: str, specs: list[features.FeatureSpec]) -> pd.DataFrame:
    """The new catalogue table with the trained feature columns, checked (module docstring, step 1)."""
    kinds = {spec.name: spec.kind for spec in specs}
    table = readers.read_features(path, id_column, kinds=kinds)
    extra = [column for column in table.columns if column != id_column and column not in kinds]
    if extra:
        raise InputError(f"column(s) {extra} were not features of the trained model (it was trained with "
                         f"{sorted(kinds)}); drop them or retrain with them", path=path, column=extra[0])
    if table.empty:
        raise InputError("the catalogue table has no rows", path=path)
    return table


def check_change(previous: np.ndarray, item_ids: np.ndarray, path: str, allow_large_change: bool) -> tuple[int, int]:
    """(new, removed): the items of ``item_ids`` not in the published catalogue ``previous`` and those of it gone;
    ``InputError`` naming the counts when either is more than :data:`MAX_CHANGE` of ``previous``, unless
    ``allow_large_change``."""
    new = int((~pd.Index(item_ids).isin(previous)).sum())
    removed = int((~pd.Index(previous).isin(item_ids)).sum())
    for count, what in ((removed, f"removes {removed:,} of the"), (new, f"adds {new:,} items to the")):
        if count > MAX_CHANGE * len(previous) and not allow_large_change:
            raise InputError(f"the table {what} {len(previous):,} items of the published catalogue "
                             f"({count / len(previous):.0%}; a refresh changes at most {MAX_CHANGE:.0%} unless "
                             "asked): check the table, or pass --allow_large_change to publish it", path=path)
    return new, removed


def embed(item_tower: Path, item_ids: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Item vectors [N, d] from the exported item tower (ids and coded values by row, in ``feature_names`` order)."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(item_tower))
    serve = loaded.signatures["serving_default"]
    names = [name.decode() for name in loaded.feature_names.numpy()]
    blocks = [np.zeros((0, 0), np.float32)]
    for start in range(0, len(item_ids), BATCH):
        stop = start + BATCH
        inputs = {f"feature_{i}": tf.constant(arrays[name][start:stop]) for i, name in enumerate(names)}
        blocks.append(serve(item_id=tf.constant(item_ids[start:stop].astype(str)), **inputs)["embedding"].numpy())
    return np.concatenate([b for b in blocks if b.size] or [np.zeros((0, 1), np.float32)])


def _link(source: Path, target: Path) -> None:
    """Hard links ``source`` (a file or a directory tree) at ``target``: the run's files, shared, never copied."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, copy_function=os.link)
    elif source.is_file():
        os.link(source, target)


def _new_run(model_dir: ModelDirectory) -> str:
    """A new run id: the time, with a counter when a run of the same second exists."""
    base = new_run_id()
    run_id, count = base, 1
    while (model_dir.root / run_id).exists():
        run_id, count = f"{base}-{count}", count + 1
    return run_id


def refresh(run_dir: str | os.PathLike, table_path: str, *, recall_floor: Optional[float] = None,
            canary: bool = True, allow_large_change: bool = False) -> RefreshOutcome:
    """Publishes a new catalogue from ``table_path`` for the published run at ``run_dir`` (module docstring);
    ``allow_large_change``: publish a table that removes or adds more than :data:`MAX_CHANGE` of the catalogue."""
    start = time.monotonic()
    parent = artifacts.RunPaths(resolve_run_dir(str(run_dir)))
    if not parent.item_tower.is_dir() or not parent.item_features.is_file():
        raise InputError("the run has no item tower: it was trained without an item feature table, so nothing can "
                         "embed a new item (train with data.item_features_path)", path=str(parent.root))
    manifest = artifacts.read_json(parent.manifest)
    config = artifacts.read_json(parent.config) if parent.config.is_file() else {}
    lineage = (manifest.get("lineage") or {}).get("name")
    model_dir = ModelDirectory(parent.root.parent)
    if lineage and model_dir.published(lineage) != parent:
        raise InputError(f"run {parent.root.name} is not the published run of lineage {lineage}: a refresh renews "
                         "what is served (give the model directory)", field="run_dir")
    id_column, specs = features.load_specs(parent.item_features)
    table = read_table(str(table_path), id_column, specs)
    item_ids = table[id_column].astype(str).to_numpy(dtype=object)
    training = Vocabulary.load(parent.model_item_vocab)
    warm = training.ids[NUM_RESERVED:][training.counts[NUM_RESERVED:] > 0]
    validate.table_overlap(item_ids, warm, str(table_path), id_column, log="the model's training log")
    previous = pq.read_table(parent.item_embeddings, columns=["item_id"]).column("item_id").to_numpy(
        zero_copy_only=False).astype(object)
    new, removed = check_change(previous, item_ids, str(table_path), allow_large_change)
    from retrieval import export  # TensorFlow loads once the input is known to be good
    from retrieval.index.run_index import build_run_index
    from retrieval.serving.canary import Canary, CanaryError
    from retrieval.serving.generator import CandidateGenerator

    catalogue = Vocabulary(np.concatenate([[PAD, OOV], item_ids]), np.zeros(len(item_ids) + NUM_RESERVED, np.int64))
    arrays = features.feature_arrays(table, id_column, catalogue, specs)
    vectors = embed(parent.item_tower, item_ids, {name: array[NUM_RESERVED:] for name, array in arrays.items()})
    counts = training.counts[training.lookup(item_ids)]  # OOV (index 1) has count 0

    run_id = _new_run(model_dir)
    paths = model_dir.run_paths(run_id)
    paths.root.mkdir(parents=True)
    print(f"run directory: {paths.root}", flush=True)
    with model_dir.run_lock(run_id):
        for name in LINKED_FILES:
            _link(parent.root / name, paths.root / name)
        for name in LINKED_DIRS:
            _link(parent.root / name, paths.root / name)
        training.save(paths.training_item_vocab)
        Vocabulary(catalogue.ids, np.concatenate([[0, 0], counts])).save(paths.item_vocab)
        export.write_item_embeddings(paths.item_embeddings, item_ids, vectors, counts > 0)
        outcome = RefreshOutcome(str(paths.root), parent.root.name, len(item_ids), new, removed,
                                 int((counts > 0).sum()), False, 0.0)
        artifacts.write_json(paths.manifest, {**manifest, "run_id": run_id, "version": run_id, "status": "running",
                                              "refreshed_from": parent.root.name,
                                              "trained_run": model_dir.trained_run(parent.root.name),
                                              "catalogue": {"items": outcome.items, "new": outcome.new,
                                                            "removed": outcome.removed, "warm": outcome.warm,
                                                            "table": str(table_path)}})
        index_config = config.get("index", {})
        index = build_run_index(paths, factory=index_config.get("factory", "auto"),
                                recall_floor=recall_floor if recall_floor is not None else
                                index_config.get("recall_floor", 0.95),
                                recall_k=index_config.get("recall_k", 100), seed=config.get("seed", 0))
        checked = None
        if canary:
            try:
                checked = Canary()(CandidateGenerator.from_run(paths.root))
            except CanaryError as e:
                raise GateError(f"the serving canary refused the refreshed run: {e} (run kept at {paths.root}, "
                                "latest untouched)") from None
        decision = {"passed": True, "reasons": [], "refresh": {"index_self_check": index.manifest.get("self_check"),
                                                               "canary": checked}}
        with model_dir.publish_lock():
            if lineage and model_dir.published(lineage) != parent:
                raise GateError(f"lineage {lineage} published another run while refreshing from {parent.root.name}; "
                                f"refresh that one (run kept at {paths.root}, latest untouched)")
            artifacts.write_json(paths.root / COMPLETE_MARKER, {"summary": decision, "seconds": 0.0})
            outcome.latest_moved = model_dir.publish(run_id, lineage or model_dir.lineage_of_run(parent.root.name))
            outcome.seconds = round(time.monotonic() - start, 3)
            updated = artifacts.read_json(paths.manifest)
            updated.update(status="published", gate=decision, stage_seconds={"refresh": outcome.seconds})
            artifacts.write_json(paths.manifest, updated)
            model_dir.retain(int((config.get("publish") or {}).get("keep_last", 5)))
    logging.info("catalogue refresh %s: %d items (%d new, %d removed, %d warm) in %.1f s", run_id, outcome.items,
                 outcome.new, outcome.removed, outcome.warm, outcome.seconds)
    return outcome
