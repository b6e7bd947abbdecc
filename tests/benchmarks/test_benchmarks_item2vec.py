"""Smoke run of benchmarks/bench_item2vec.py: rows are complete, ratios are computed, recall is a probability."""

import importlib.util

import numpy as np
import pandas as pd

from benchmarks import bench_item2vec
from retrieval.data import Vocabulary


def test_bench_item2vec_smoke():
    rows = {row["name"]: row for row in bench_item2vec.run(smoke=True)}
    assert set(rows) == {"ours", "gensim"}
    ours = rows["ours"]
    assert ours["train_s"] > 0 and ours["train_cpu_s"] > 0 and ours["peak_rss_mb"] > 0 and ours["users"] > 0
    assert 0.0 <= ours["recall"] <= 1.0
    if importlib.util.find_spec("gensim") is None:
        assert "skipped" in rows["gensim"]
    else:
        assert rows["gensim"]["train_s"] > 0 and 0.0 <= rows["gensim"]["recall"] <= 1.0
        assert ours["time_ratio_vs_gensim"] > 0 and isinstance(ours["meets_target"], bool)


def test_recall_at_k_against_a_loop():
    """The vectorized recall (last-items query, cosine, seen items excluded) equals a per-user loop."""
    rng = np.random.default_rng(0)
    train = pd.DataFrame({"user_id": np.repeat([f"u{i}" for i in range(30)], 6),
                          "item_id": [f"i{j}" for j in rng.integers(0, 25, 180)]})
    test = pd.DataFrame({"user_id": [f"u{i}" for i in range(30)], "item_id": [f"i{j}" for j in rng.integers(0, 26, 30)]})
    vocab = Vocabulary.from_ids(train["item_id"])
    vectors = rng.normal(size=(vocab.size, 4)).astype(np.float32)
    recall, users = bench_item2vec.recall_at_k(vectors, train, test, vocab, k=5, query_items=2)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    hits, counted = 0, 0
    for user, item in zip(test["user_id"], test["item_id"], strict=True):
        if item not in set(vocab.ids[2:]):
            continue
        history = vocab.lookup(train.loc[train["user_id"] == user, "item_id"])
        scores = unit @ vectors[history[-2:]].mean(axis=0)
        scores[:2] = -np.inf
        scores[history] = -np.inf
        hits += int(vocab.lookup([item])[0] in np.argsort(-scores)[:5])
        counted += 1
    assert users == counted and recall == hits / counted
