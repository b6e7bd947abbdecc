"""Baselines: ItemKNN against a dense cosine reference, popularity and random through the shared ranking path."""

import numpy as np
import pytest

from retrieval.evaluation import baselines, csr, ranking


@pytest.fixture(scope="module")
def incidence():
    rng = np.random.default_rng(3)
    n_users, n_items = 60, 30
    dense = (rng.random((n_users, n_items)) < 0.15).astype(np.float64)
    dense[:, :2] = 0  # pad / OOV never interacted with
    rows, cols = np.nonzero(dense)
    return dense, csr.from_pairs(rows, cols, n_users)


def _dense_item_knn(x, n_neighbours):
    """Reference: S = D^-1/2 X^T X D^-1/2, zero diagonal, keep each row's best neighbours (ties: lower index)."""
    n = x.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.nan_to_num((x.T @ x) / np.sqrt(np.outer(n, n)))
    np.fill_diagonal(sim, 0.0)
    kept = np.zeros_like(sim)
    for i in range(len(sim)):
        best = np.lexsort((np.arange(len(sim)), -sim[i]))[:n_neighbours]
        kept[i, best] = sim[i, best]
    return x @ kept


@pytest.mark.parametrize("n_neighbours,max_pairs", [(100, 1 << 20), (100, 50), (4, 50)])
def test_item_knn_matches_dense_cosine(incidence, n_neighbours, max_pairs):
    dense, train = incidence
    knn = baselines.ItemKNN(train, dense.shape[1], n_neighbours=n_neighbours, max_pairs=max_pairs)
    rows = np.array([5, 0, 59, 17])
    np.testing.assert_allclose(knn(rows), _dense_item_knn(dense, n_neighbours)[rows], rtol=1e-5, atol=1e-6)


def test_most_popular_ranks_by_count_without_training_items():
    popularity = np.array([0, 0, 5, 9, 1, 7])
    train = csr.from_pairs([0], [3], 2)
    idx, val = ranking.top_k(baselines.most_popular(popularity), 2, 6, 3, train)
    assert idx.tolist() == [[5, 2, 4], [3, 5, 2]]
    assert val[1].tolist() == [9.0, 7.0, 5.0]


def test_random_is_seeded():
    a = baselines.random(20, seed=7)(np.arange(3)).numpy()
    assert np.array_equal(a, baselines.random(20, seed=7)(np.arange(3)).numpy())
    assert not np.array_equal(a, baselines.random(20, seed=8)(np.arange(3)).numpy())
    assert a.shape == (3, 20) and a.dtype == np.float32 and 0 <= a.min() and a.max() < 1


def test_make_rejects_unknown_names(incidence):
    with pytest.raises(ValueError, match="unknown baseline"):
        baselines.make("svd", incidence[1], 30, np.ones(30))


def test_ease_matches_closed_form(incidence):
    """EASE^R (Steck 2019, eq. 8) against a float64 reference built from its definition: P = (X^T X + lambda I)^-1,
    B = I - P diag(1/diag(P)); scores X B with a zero diagonal."""
    dense, train = incidence
    l2 = 5.0
    precision = np.linalg.inv(dense.T @ dense + l2 * np.eye(dense.shape[1]))
    reference = np.eye(dense.shape[1]) - precision / np.diag(precision)[None, :]
    assert np.allclose(np.diag(reference), 0.0)
    ease = baselines.Ease(train, dense.shape[1], l2=l2, block_users=7)
    rows = np.array([3, 0, 59, 21])
    np.testing.assert_allclose(ease(rows), dense[rows] @ reference, rtol=1e-4, atol=1e-5)


def test_ease_is_skipped_above_its_size_limit(incidence, monkeypatch):
    dense, train = incidence
    monkeypatch.setattr(baselines, "EASE_MAX_ITEMS", dense.shape[1] - 1)
    assert baselines.make("ease", train, dense.shape[1], dense.sum(axis=0)) is None
