"""Warm start from the published run: a stable vocabulary and the embeddings of the ids both runs know.

A scheduled job retrains every day on a log that mostly overlaps yesterday's. Starting from the published run's
id embeddings (instead of random ones) keeps the retrieval space stable across versions and converges faster:

* ``Vocabulary.stable_against``: ids that the previous run knew and today's training data still holds keep their
  relative order (so their indices move as little as possible); new ids follow, by decreasing count. Both prepare
  paths (in memory and streamed) apply it to the vocabularies they build.
* :func:`save_id_tables` / :func:`load_into`: after training, the id embedding tables (item ids, user ids) are saved
  as ``id_tables.npz`` next to the run's vocabularies; a warm-started model copies the rows of every id found in the
  previous vocabulary and keeps its fresh initialisation for new ids.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import tensorflow as tf
from absl import logging

import retrieval  # noqa: F401
from retrieval.artifacts import RunPaths, atomic_path
from retrieval.data.vocab import NUM_RESERVED, Vocabulary

TABLES_FILE = "id_tables.npz"


def _id_tables(model) -> dict[str, tf.Variable]:
    """The model's id-indexed embedding variables, by the vocabulary they are indexed with."""
    tables = {}
    if model.item_tower is not None:
        tables["item"] = model.item_tower.id_embedding.embeddings
    else:
        tables["item"] = model.output_table.weights_table.embeddings
    if model.user_tower.user_id_embedding is not None:
        tables["user"] = model.user_tower.user_id_embedding.embeddings
    return tables


def save_id_tables(model, paths: RunPaths) -> None:
    with atomic_path(paths.root / TABLES_FILE) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **{name: var.numpy() for name, var in _id_tables(model).items()})


def load_into(model, vocabularies: dict[str, Vocabulary], previous: RunPaths) -> dict[str, int]:
    """Copies the previous run's rows into ``model``'s id tables for ids both know; returns rows copied per table."""
    source = previous.root / TABLES_FILE
    if not source.exists():
        logging.warning("warm start: %s has no %s; starting fresh", previous.root, TABLES_FILE)
        return {}
    old_vocabularies = {"item": Vocabulary.load(previous.model_item_vocab), "user": Vocabulary.load(previous.user_vocab)}
    copied = {}
    with np.load(source) as saved:
        for name, variable in _id_tables(model).items():
            if name not in saved or saved[name].shape[1] != variable.shape[1]:
                continue
            new_ids = vocabularies[name].ids[NUM_RESERVED:]
            old_rows = pd.Index(old_vocabularies[name].ids).get_indexer(new_ids)
            hit = old_rows >= NUM_RESERVED
            values = variable.numpy()
            values[NUM_RESERVED + np.flatnonzero(hit)] = saved[name][old_rows[hit]]
            variable.assign(values)
            copied[name] = int(hit.sum())
    logging.info("warm start from %s: rows copied %s", previous.root.name, copied)
    return copied
