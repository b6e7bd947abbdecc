"""Baselines: ItemKNN against a dense cosine reference, popularity and random through the shared ranking path."""

import subprocess
import sys

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
    ease = baselines.Ease(train, dense.shape[1], l2=l2, block=7)
    rows = np.array([3, 0, 59, 21])
    np.testing.assert_allclose(ease(rows), dense[rows] @ reference, rtol=1e-4, atol=1e-5)


def test_openblas_threads_are_restored():
    """EASE^R's Cholesky runs on one OpenBLAS thread (its multithreaded one crashes on large orders); the count the
    process had comes back afterwards, also when the block raises."""
    openblas = baselines.bundled_openblas()
    if openblas is None:
        pytest.skip("SciPy does not bundle OpenBLAS here")
    before = openblas.scipy_openblas_get_num_threads()
    with pytest.raises(RuntimeError), baselines._openblas_threads(1):
        assert openblas.scipy_openblas_get_num_threads() == 1
        raise RuntimeError
    assert openblas.scipy_openblas_get_num_threads() == before


def test_ease_memory_estimate_bounds_its_peak():
    """The estimate that the budget compares is an upper bound of what fitting EASE^R takes (measured in a fresh
    process: the peak RSS of the fit, over the process's peak before it, SciPy already loaded)."""
    script = ("import numpy as np, scipy.linalg.lapack, scipy.sparse; from retrieval.evaluation import baselines, csr; "
              "from retrieval.memory import "
              "peak_rss_mb; rng = np.random.default_rng(0); x = csr.from_pairs(rng.integers(0, 500, 20000), "
              "rng.integers(2, 3000, 20000), 500); before = peak_rss_mb(); baselines.Ease(x, 3000); "
              "print(peak_rss_mb() - before)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    measured = float(out.stdout.split()[-1])
    estimate = baselines.ease_memory_mb(3000)
    assert measured <= estimate < 3 * measured + 20


def test_skip_reason_names_the_budget():
    assert baselines.skip_reason("ease", 1000, 100) is None
    reason = baselines.skip_reason("ease", 30_000, 4096)
    assert "30000 items need about 4839 MB" in reason and "eval.baseline_memory_mb = 4096" in reason
    assert baselines.skip_reason("item_knn", 30_000, 1) is None
