"""A small synthetic published run in the export contract (``retrieval.export``), for serving tests and benchmarks.

Users belong to one of a few taste clusters and interact with popular items of their cluster, so candidates have a
checkable right answer. The user tower is written here by hand, not by ``retrieval.export``, on purpose: it exercises
the *contract* (a SavedModel whose ``serving_default(user_id: string [B], history: string [B, H])`` returns
``{"embedding": float32 [B, d]}``, with the vocabulary lookup inside), so serving is tested against any model that
follows it, not against one exporter. It is the masked mean of the history's item vectors (as Item2Vec exports), plus
the ``max_history``/``dimension``/``metric`` attributes that ``retrieval.export.load_user_encoder`` reads.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import tensorflow as tf

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is used)
from retrieval.artifacts import PathLike, RunPaths, write_json
from retrieval.data.vocab import NUM_RESERVED, OOV_INDEX, Vocabulary
from retrieval.export import write_item_embeddings


class _MeanOfHistory(tf.Module):
    """``serving_default``: user vector = mean of the known history items' vectors (zeros without any)."""

    def __init__(self, item_ids: np.ndarray, vectors: np.ndarray, max_history: int, metric: str):
        super().__init__(name="demo_user_tower")
        keys = tf.constant(np.asarray(item_ids, dtype=object).astype(str), tf.string)
        values = tf.range(NUM_RESERVED, NUM_RESERVED + len(item_ids), dtype=tf.int64)
        self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), OOV_INDEX)
        padded = np.concatenate([np.zeros([NUM_RESERVED, vectors.shape[1]], np.float32), vectors])
        self.item_vectors = tf.Variable(padded, trainable=False, name="item_vectors")
        self.max_history = tf.Variable(max_history, trainable=False, name="max_history")
        self.dimension = tf.Variable(vectors.shape[1], trainable=False, name="dimension")
        self.metric = tf.Variable(metric, trainable=False, name="metric")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="user_id"),
                                  tf.TensorSpec([None, None], tf.string, name="history")])
    def serve(self, user_id: tf.Tensor, history: tf.Tensor) -> dict:
        del user_id  # a mean-of-history tower has no user embedding
        indices = self.table.lookup(history)
        mask = tf.cast(indices >= NUM_RESERVED, tf.float32)[..., None]
        total = tf.reduce_sum(tf.gather(self.item_vectors, indices) * mask, axis=1)
        return {"embedding": total / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)}


def write_user_tower(path: PathLike, item_ids: np.ndarray, vectors: np.ndarray, max_history: int, metric: str) -> None:
    """Saves a mean-of-history user tower over ``vectors`` [N, d] (``serving_default`` as in the module docstring)."""
    module = _MeanOfHistory(item_ids, vectors, max_history, metric)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def demo_interactions(num_items: int, num_users: int, dimension: int, clusters: int, history_length: int,
                      seed: int) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """(training interactions ``user_id, item_id, timestamp``, item id -> vector) with planted taste clusters."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal([clusters, dimension]).astype(np.float32)
    item_cluster = np.arange(num_items) % clusters
    vectors = centers[item_cluster] + 0.3 * rng.standard_normal([num_items, dimension]).astype(np.float32)
    user_cluster = rng.integers(0, clusters, num_users)
    per_cluster = num_items // clusters
    rank = np.minimum(rng.zipf(1.5, [num_users, history_length]) - 1, per_cluster - 1)  # popular items of the cluster
    items = user_cluster[:, None] + clusters * rank
    frame = pd.DataFrame({"user_id": np.repeat([f"u{u}" for u in range(num_users)], history_length),
                          "item_id": [f"i{i}" for i in items.reshape(-1)],
                          "timestamp": np.tile(np.arange(history_length, dtype=np.int64), num_users)})
    return frame, {f"i{i}": vectors[i] for i in range(num_items)}


def write_demo_run(run_dir: PathLike, *, version: str = "1", num_items: int = 400, num_users: int = 80,
                   dimension: int = 16, clusters: int = 8, history_length: int = 12, max_history: int = 20,
                   metric: str = "ip", seed: int = 0) -> RunPaths:
    """Writes manifest.json, vocab/, data/train.parquet, item_embeddings.parquet and user_tower/ (no index/)."""
    paths = RunPaths(run_dir)
    frame, vector_of = demo_interactions(num_items, num_users, dimension, clusters, history_length, seed)
    item_vocab, user_vocab = Vocabulary.from_ids(frame["item_id"]), Vocabulary.from_ids(frame["user_id"])
    item_ids = item_vocab.ids[NUM_RESERVED:]
    vectors = np.stack([vector_of[i] for i in item_ids])
    paths.train_data.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(paths.train_data, index=False)
    item_vocab.save(paths.item_vocab)
    user_vocab.save(paths.user_vocab)
    write_item_embeddings(paths.item_embeddings, item_ids, vectors)
    write_user_tower(paths.user_tower, item_ids, vectors, max_history, metric)
    write_json(paths.manifest, {"model_type": "item2vec", "run_id": paths.root.name, "version": version,
                                "metric": metric, "max_history": max_history, "seed": seed})
    return paths
