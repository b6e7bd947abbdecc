"""A tiny fake run directory for the evaluation tests, built without the training code.

Items come in 8 clusters of 6 (``i00``..``i47``, cluster = index // 6); an item's vector is its cluster's one-hot
plus small noise. Each warm user belongs to a cluster, trains on 4 of its items (plus one item of another cluster)
and is tested on the 2 others, so a user vector = mean of the history's vectors ranks the test items high. The
exported user tower is a ``tf.Module`` with the contract signature ``serving_default(user_id: string [B], history:
string [B, H]) -> {"embedding": float32 [B, d]}`` (StaticHashTable lookup, masked mean). It also carries
``max_history``, ``dimension`` and ``metric`` variables, which ``retrieval.export.UserEncoder`` reads.
"""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow as tf

from retrieval.artifacts import RunPaths

N_CLUSTERS, PER_CLUSTER, N_WARM, MAX_HISTORY = 8, 6, 64, 10
ITEMS = np.array([f"i{i:02d}" for i in range(N_CLUSTERS * PER_CLUSTER)])


class MeanEncoder(tf.Module):
    def __init__(self, item_ids, vectors, metric="ip"):
        super().__init__()
        rows = tf.range(1, len(item_ids) + 1, dtype=tf.int64)
        init = tf.lookup.KeyValueTensorInitializer(tf.constant(item_ids), rows)
        self.table = tf.lookup.StaticHashTable(init, default_value=0)  # 0: unknown or "" padding
        self.vectors = tf.Variable(np.concatenate([np.zeros((1, vectors.shape[1])), vectors]).astype(np.float32))
        self.max_history = tf.Variable(MAX_HISTORY)
        self.dimension = tf.Variable(vectors.shape[1])
        self.metric = tf.Variable(metric)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="user_id"),
                                  tf.TensorSpec([None, None], tf.string, name="history")])
    def serve(self, user_id, history):
        rows = self.table.lookup(history)
        mask = tf.cast(rows > 0, tf.float32)[..., None]
        total = tf.reduce_sum(tf.gather(self.vectors, rows) * mask, axis=1)
        return {"embedding": total / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)}


def interactions(seed=0):
    """(train, test) canonical frames with 3 cold-start users, 1 unknown test item and 1 test item seen in training."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for u in range(N_WARM):
        cluster = u % N_CLUSTERS
        own = rng.permutation(np.arange(cluster * PER_CLUSTER, (cluster + 1) * PER_CLUSTER))
        other = rng.integers(0, len(ITEMS) - PER_CLUSTER)
        other += PER_CLUSTER if other >= cluster * PER_CLUSTER else 0
        for t, item in enumerate([*own[:4], other]):
            train.append((f"u{u:02d}", ITEMS[item], t))
        test += [(f"u{u:02d}", ITEMS[item], 10 + t) for t, item in enumerate(own[4:])]
    test += [(f"c{c}", ITEMS[c * PER_CLUSTER], 20) for c in range(3)]  # cold start
    test += [("u00", "zz_unknown", 30), ("u01", train[5][1], 30)]  # unknown item; u01's first training item
    columns = ["user_id", "item_id", "timestamp"]
    return pd.DataFrame(train, columns=columns), pd.DataFrame(test, columns=columns)


def item_vectors(seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    clusters = np.repeat(np.eye(N_CLUSTERS), PER_CLUSTER, axis=0)
    return (clusters + noise * rng.standard_normal(clusters.shape)).astype(np.float32)


def make_run(root, vectors=None, run_id="fake-run", config=None, metric="ip"):
    """Writes a complete fake run into ``root``; returns its RunPaths."""
    paths = RunPaths(root)
    vectors = item_vectors() if vectors is None else vectors
    train, test = interactions()
    paths.train_data.parent.mkdir(parents=True, exist_ok=True)
    train.to_parquet(paths.train_data)
    test.to_parquet(paths.test_data)
    offsets = pa.array(np.arange(len(vectors) + 1, dtype=np.int32) * vectors.shape[1])
    pq.write_table(pa.table({"item_id": pa.array(ITEMS), "embedding": pa.ListArray.from_arrays(
        offsets, pa.array(vectors.reshape(-1), pa.float32()))}), paths.item_embeddings)
    module = MeanEncoder(ITEMS, vectors, metric)
    tf.saved_model.save(module, str(paths.user_tower), signatures={"serving_default": module.serve})
    paths.manifest.write_text(json.dumps({"model_type": "item2vec", "run_id": run_id, "version": 1,
                                          "metric": metric, "max_history": MAX_HISTORY}))
    default = {"seed": 3, "data": {"split": "leave_last_n", "holdout_n": 2},
               "eval": {"ks": [2, 5, 10], "bootstrap": 200}}
    paths.config.write_text(json.dumps(default if config is None else config))
    return paths


def test_fake_user_tower_has_the_contract_signature(tmp_path):
    paths = make_run(tmp_path / "run")
    serve = tf.saved_model.load(str(paths.user_tower)).signatures["serving_default"]
    out = serve(user_id=tf.constant(["u00", "x"]), history=tf.constant([["i00", "i06"], ["", "nope"]]))
    np.testing.assert_allclose(out["embedding"].numpy(), [(item_vectors()[0] + item_vectors()[6]) / 2, np.zeros(8)],
                               rtol=1e-6)
