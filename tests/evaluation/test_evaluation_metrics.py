"""Ranking metrics: tiny cases worked by hand, and RecBole's per-user formulas on random cases."""

import numpy as np
import pytest

from retrieval.evaluation import csr, metrics

# Catalogue: vocabulary indices 2..11 (10 items); -1 marks a slot nothing could fill.
TOP = np.array([[5, 3, 9, 2, 7],
                [4, 6, 2, 8, 9],
                [2, 3, 4, -1, -1]])
RELEVANT = csr.from_pairs([0, 0, 0, 1, 2, 2], [3, 7, 8, 4, 9, 10], 3)  # A: {3, 7, 8}, B: {4}, C: {9, 10}


def test_accuracy_by_hand():
    m = metrics.accuracy(TOP, RELEVANT, [3, 5])
    # A: hits at ranks 2 and 5. B: hit at rank 1. C: no hit.
    # recall@3: A 1/3, B 1/1, C 0.  recall@5: A 2/3.
    np.testing.assert_allclose(m["recall@3"], [0.333333, 1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(m["recall@5"], [0.666667, 1.0, 0.0], atol=1e-6)
    # precision@k = hits / k (empty slots count): A 1/3, 2/5; B 1/3, 1/5.
    np.testing.assert_allclose(m["precision@3"], [0.333333, 0.333333, 0.0], atol=1e-6)
    np.testing.assert_allclose(m["precision@5"], [0.4, 0.2, 0.0], atol=1e-6)
    np.testing.assert_allclose(m["hit@3"], [1, 1, 0])
    # NDCG, A: DCG@3 = 1/log2(3) = 0.630930; IDCG@3 over min(3, 3) = 3 items = 1 + 0.630930 + 1/log2(4) = 2.130930
    #   -> 0.630930 / 2.130930 = 0.296082. DCG@5 = 0.630930 + 1/log2(6) = 0.630930 + 0.386853 = 1.017783, IDCG@5 over
    #   min(3, 5) = 3 items = 2.130930 -> 0.477624. B: DCG = 1/log2(2) = 1 = IDCG over min(1, k) = 1 item -> 1.
    np.testing.assert_allclose(m["ndcg@3"], [0.296082, 1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(m["ndcg@5"], [0.477624, 1.0, 0.0], atol=1e-6)
    # MRR: A first hit at rank 2 -> 1/2; B rank 1 -> 1.
    np.testing.assert_allclose(m["mrr@3"], [0.5, 1.0, 0.0])
    # MAP, A: @3 P@2 / min(3, 3) = 0.5 / 3 = 0.166667; @5 (P@2 + P@5) / min(3, 5) = (1/2 + 2/5) / 3 = 0.3. B: 1/1.
    np.testing.assert_allclose(m["map@3"], [0.166667, 1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(m["map@5"], [0.3, 1.0, 0.0], atol=1e-6)
    # Mean over users: recall@5 = (2/3 + 1 + 0) / 3 = 0.555556.
    assert metrics.mean(m)["recall@5"] == pytest.approx(0.555556, abs=1e-6)


def test_map_caps_the_denominator_at_k():
    # 4 relevant, k = 2, both top items relevant: MAP@2 = (1 + 1) / min(4, 2) = 1; recall@2 = 2/4; NDCG@2 = 1.
    m = metrics.accuracy(np.array([[2, 3, 9]]), csr.from_pairs([0, 0, 0, 0], [2, 3, 4, 5], 1), [2])
    assert (m["map@2"][0], m["recall@2"][0], m["ndcg@2"][0]) == (1.0, 0.5, 1.0)


def test_popularity_and_coverage_by_hand():
    popularity = np.array([0, 0, 10, 5, 1, 1, 0, 3, 2, 0, 8, 0])  # total 30
    tail = metrics.tail_mask(popularity, 0.8)
    # Head: most popular until >= 80% of 30 = 24: item 2 (10) + 10 (8) + 3 (5) = 23 < 24, + 7 (3) = 26.
    assert np.flatnonzero(~tail).tolist() == [2, 3, 7, 10]
    m = metrics.popularity_bias(TOP, [3, 5], popularity, tail)
    # @3: A (1 + 5 + 0) / 3 = 2; B (1 + 0 + 10) / 3 = 3.666667; C (10 + 5 + 1) / 3 = 5.333333.
    np.testing.assert_allclose(m["avg_popularity@3"], [2.0, 3.666667, 5.333333], atol=1e-6)
    # @5: A (1 + 5 + 0 + 10 + 3) / 5 = 3.8; B (1 + 0 + 10 + 2 + 0) / 5 = 2.6; C only 3 filled slots: 5.333333.
    np.testing.assert_allclose(m["avg_popularity@5"], [3.8, 2.6, 5.333333], atol=1e-6)
    # Tail @3: A {5, 9} of 3; B {4, 6} of 3; C {4} of 3. @5: A {5, 9} of 5; B {4, 6, 8, 9} of 5; C 1 of 3 filled.
    np.testing.assert_allclose(m["tail_share@3"], [0.666667, 0.666667, 0.333333], atol=1e-6)
    np.testing.assert_allclose(m["tail_share@5"], [0.4, 0.8, 0.333333], atol=1e-6)
    # Coverage of 10 items: @3 {2, 3, 4, 5, 6, 9} = 6/10; @5 adds 7, 8 -> 8/10 (the -1 slots are not items).
    assert metrics.coverage(TOP, [3, 5], 10) == {"coverage@3": 0.6, "coverage@5": 0.8}


def _recbole_reference(top, relevant_sets, k):
    """Per-user loop over RecBole's formulas (recbole/evaluator/metrics.py), written independently."""
    out = {name: [] for name in ("recall", "precision", "hit", "ndcg", "mrr", "map")}
    for items, rel in zip(top, relevant_sets, strict=True):
        hits = [int(i in rel) for i in items[:k]]
        out["recall"].append(sum(hits) / len(rel))
        out["precision"].append(sum(hits) / k)
        out["hit"].append(float(any(hits)))
        idcg = sum(1 / np.log2(i + 2) for i in range(min(len(rel), k)))
        out["ndcg"].append(sum(h / np.log2(i + 2) for i, h in enumerate(hits)) / idcg)
        out["mrr"].append(next((1 / (i + 1) for i, h in enumerate(hits) if h), 0.0))
        ap = sum(h * sum(hits[:i + 1]) / (i + 1) for i, h in enumerate(hits))
        out["map"].append(ap / min(len(rel), k))
    return out


def test_matches_reference_loop_on_random_cases():
    rng = np.random.default_rng(0)
    n_users, n_items, big_k = 200, 40, 15
    top = np.stack([rng.permutation(np.arange(2, n_items))[:big_k] for _ in range(n_users)])
    rows, cols = [], []
    relevant_sets = []
    for u in range(n_users):
        rel = set(rng.choice(np.arange(2, n_items), size=rng.integers(1, 12), replace=False).tolist())
        relevant_sets.append(rel)
        rows += [u] * len(rel)
        cols += sorted(rel)
    got = metrics.accuracy(top, csr.from_pairs(rows, cols, n_users), [1, 5, 15])
    for k in (1, 5, 15):
        want = _recbole_reference(top, relevant_sets, k)
        for name, values in want.items():
            np.testing.assert_allclose(got[f"{name}@{k}"], values, atol=1e-12, err_msg=f"{name}@{k}")


def test_rejects_users_without_relevant_items_and_bad_k():
    with pytest.raises(ValueError, match="at least one relevant"):
        metrics.accuracy(TOP, csr.from_pairs([0], [3], 3), [3])
    with pytest.raises(ValueError, match="every k"):
        metrics.accuracy(TOP, RELEVANT, [6])
