"""Cold catalogue items reported apart, against NumPy references."""

import numpy as np
import pytest

from retrieval.evaluation import cold_items
from retrieval.evaluation import csr as csr_lib

V, D = 9, 4  # indices 2..5 warm, 6..8 cold
WARM = np.array([True] * 6 + [False] * 3)
TRAIN = {0: [2, 3], 1: [4], 2: [], 3: [5, 2]}
TEST = {0: [6, 3], 1: [7, 8, 2], 2: [6], 3: [4]}


def csr(pairs):
    rows = np.concatenate([[u] * len(items) for u, items in pairs.items()]).astype(np.int64)
    cols = np.concatenate([items for items in pairs.values()]).astype(np.int64)
    return csr_lib.from_pairs(rows, cols, len(pairs))


def reference_recall(scores, relevant, candidates, excluded, k):
    """Recall@k of one user ranking ``candidates`` (minus ``excluded``) by ``scores``."""
    ranked = [c for c in sorted(candidates, key=lambda c: -scores[c]) if c not in excluded][:k]
    return len(set(ranked) & set(relevant)) / len(relevant)


def test_cold_items_metrics_match_a_reference():
    rng = np.random.default_rng(0)
    users, items = rng.normal(size=(4, D)).astype(np.float32), rng.normal(size=(V, D)).astype(np.float32)
    out = cold_items.evaluate(users, items, WARM, csr(TRAIN), csr(TEST), None, ks=(1, 2), n_bootstrap=0)
    # users 0 and 1 have cold test items and a history; user 2 has no history, user 3 no cold test item
    assert out["count/cold_items/eval_users"] == 2 and out["count/cold_items/test_pairs"] == 4
    assert out["count/cold_items/items"] == 3
    for k in (1, 2):
        whole, among = [], []
        for user in (0, 1):
            scores = items @ users[user]
            relevant = [i for i in TEST[user] if not WARM[i]]
            whole.append(reference_recall(scores, relevant, range(2, V), TRAIN[user], k))
            among.append(reference_recall(scores, relevant, range(6, V), [], k))
        assert out[f"cold_items/recall@{k}"] == pytest.approx(np.mean(whole))
        assert out[f"cold_items/among_cold/recall@{k}"] == pytest.approx(np.mean(among))


def test_no_cold_test_pair_gives_counts_only():
    rng = np.random.default_rng(0)
    out = cold_items.evaluate(rng.normal(size=(4, D)), rng.normal(size=(V, D)), np.ones(V, bool), csr(TRAIN),
                              csr(TEST), None, ks=(1,))
    assert out == {"count/cold_items/items": 0, "count/cold_items/test_pairs": 0, "count/cold_items/eval_users": 0}


def test_content_scorer_is_the_cosine_of_the_profile():
    rng = np.random.default_rng(1)
    import scipy.sparse as sp

    content = sp.csr_matrix(np.abs(rng.normal(size=(V, 5))) * (rng.random((V, 5)) < 0.6))
    train = csr(TRAIN)
    scores = cold_items.content_scorer(content, train, np.arange(V))(np.array([0, 3]))
    dense = content.toarray()
    unit = dense / np.maximum(np.linalg.norm(dense, axis=1, keepdims=True), 1e-12)
    for row, user in enumerate((0, 3)):
        profile = unit[TRAIN[user]].mean(axis=0)
        expected = unit @ (profile / np.linalg.norm(profile))
        np.testing.assert_allclose(scores[row, 2:], expected[2:], rtol=1e-5)
        assert np.isneginf(scores[row, :2]).all()
