"""Blocked exact top-k against a full sort, exclusion of training/pad/OOV items, the FAISS path and its loss."""

import faiss
import numpy as np
import pytest

from retrieval.evaluation import csr, ranking


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(1)
    n_users, n_items, d = 37, 50, 8
    users = rng.standard_normal((n_users, d)).astype(np.float32)
    items = rng.standard_normal((n_items, d)).astype(np.float32)
    items[:2] *= 100.0  # pad/OOV rows that would win if they were not excluded
    rows = np.repeat(np.arange(n_users), 6)
    cols = rng.integers(2, n_items, size=len(rows))
    return users, items, csr.from_pairs(rows, cols, n_users)


def _brute_force(users, items, exclude, k):
    scores = users @ items.T
    scores[:, :2] = -np.inf
    for u in range(len(users)):
        scores[u, exclude.indices[exclude.indptr[u]:exclude.indptr[u + 1]]] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(scores, order, axis=1)


@pytest.mark.parametrize("max_block_bytes", [1, 7 * 50 * 4, 1 << 20])
def test_exact_top_k_matches_full_sort_for_any_block_size(problem, max_block_bytes):
    users, items, exclude = problem
    got_idx, got_val = ranking.top_k(ranking.dot_scorer(users, items), len(users), len(items), 10, exclude,
                                     max_block_bytes=max_block_bytes)
    want_idx, want_val = _brute_force(users, items, exclude, 10)
    np.testing.assert_array_equal(got_idx, want_idx)
    np.testing.assert_allclose(got_val, want_val, rtol=1e-5)
    assert not csr.contains(exclude, np.arange(len(users)), got_idx).any()
    assert got_idx.min() >= 2


def test_top_k_marks_unfillable_slots_and_ranks_a_subset_of_rows(problem):
    users, items, _ = problem
    exclude = csr.from_pairs(np.zeros(46, int), np.arange(2, 48), len(users))  # user 0 keeps only items 48, 49
    idx, val = ranking.top_k(ranking.dot_scorer(users, items), np.array([0, 3]), len(items), 4, exclude)
    assert sorted(idx[0, :2].tolist()) == [48, 49] and idx[0, 2:].tolist() == [-1, -1]
    assert np.isneginf(val[0, 2:]).all() and (idx[1] >= 2).all()
    longer, _ = ranking.top_k(ranking.dot_scorer(users, items), 2, len(items), 60)  # k above the vocabulary size
    assert (longer[:, :48] >= 2).all() and (longer[:, 48:] == -1).all()


def test_ann_with_exact_faiss_index_equals_exact_ranking(problem):
    users, items, exclude = problem
    index = faiss.IndexFlatIP(items.shape[1])
    index.add(items[2:])  # built like item_embeddings.parquet: row r is item index r + 2
    approx_idx, approx_val = ranking.ann_top_k(index, users, 10, exclude, index_offset=2, block_size=16)
    exact_idx, exact_val = ranking.top_k(ranking.dot_scorer(users, items), len(users), len(items), 10, exclude)
    np.testing.assert_array_equal(approx_idx, exact_idx)
    np.testing.assert_allclose(approx_val, exact_val, rtol=1e-5)
    overlap = ranking.overlap_at_k(approx_idx, exact_idx, [5, 10])
    assert overlap["recall_vs_exact@10"].tolist() == [1.0] * len(users)


def test_ann_filters_excluded_items_and_loss_is_measured():
    class Fake:  # returns ids 0..9 in order for every query (item indices 2..11 with offset 2)
        def search(self, queries, n):
            ids = np.tile(np.arange(n), (len(queries), 1))
            ids[ids >= 10] = -1
            return -np.arange(n, dtype=np.float32)[None].repeat(len(queries), 0), ids

    exclude = csr.from_pairs([0, 0, 1], [2, 4, 11], 2)
    idx, _ = ranking.ann_top_k(Fake(), np.zeros((2, 3), np.float32), 3, exclude, index_offset=2)
    assert idx.tolist() == [[3, 5, 6], [2, 3, 4]]
    exact = np.array([[3, 9, 10], [2, 3, 4]])
    # user 0 finds 1 of its 3 exact items (3), user 1 all three.
    np.testing.assert_allclose(ranking.overlap_at_k(idx, exact, [3])["recall_vs_exact@3"], [1 / 3, 1.0])


def test_csr_take_and_contains():
    m = csr.from_pairs([2, 0, 2, 2, 0], [5, 1, 3, 5, 9], 3)  # duplicate (2, 5) kept once
    assert m.indptr.tolist() == [0, 2, 2, 4] and m.indices.tolist() == [1, 9, 3, 5]
    sub = csr.take(m, np.array([2, 1, 0]))
    assert sub.indptr.tolist() == [0, 2, 2, 4] and sub.indices.tolist() == [3, 5, 1, 9]
    got = csr.contains(m, np.array([0, 2]), np.array([[9, 3, -1], [3, 4, 5]]))
    assert got.tolist() == [[True, False, False], [True, False, True]]


@pytest.mark.parametrize("k", [1, 5, 40, 64])
def test_top_k_equals_tensorflow_top_k_with_ties_and_excluded_items(k):
    """The FAISS heaps against ``tf.math.top_k`` (ties to the lower index) on scores full of ties (small integers,
    rows of zeros as a sparse baseline gives), -inf entries, excluded items and rows with fewer than k rankable
    items."""
    import tensorflow as tf

    rng = np.random.default_rng(7)
    n_users, n_items = 300, 64
    scores = rng.integers(-3, 4, size=(n_users, n_items)).astype(np.float32)
    scores[::5] = 0.0
    scores[rng.random(scores.shape) < 0.1] = -np.inf
    rows = np.repeat(np.arange(n_users), 20)
    cols = rng.integers(0, n_items, size=len(rows))
    exclude = csr.from_pairs(rows, cols, n_users)
    got_idx, got_val = ranking.top_k(lambda r: scores[r], n_users, n_items, k, exclude, max_block_bytes=64 * 4 * 70)

    masked = scores.copy()
    masked[:, list(ranking.NEVER_RECOMMENDED)] = -np.inf
    masked[csr.to_pairs(exclude)] = -np.inf
    want_val, want_idx = (t.numpy() for t in tf.math.top_k(masked, k=k))
    want_idx = want_idx.astype(np.int64)
    want_idx[np.isneginf(want_val)] = -1
    np.testing.assert_array_equal(got_val, want_val)
    np.testing.assert_array_equal(got_idx, want_idx)
    assert (got_idx == -1).any() == (k >= 40)  # the longer lists reach rows with fewer than k rankable items
