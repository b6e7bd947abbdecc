"""Baselines: item-kNN (cosine, shrinkage, asymmetric cosine) and RP3beta against dense NumPy references of their
formulas, EASE^R against its closed form, popularity and random through the shared ranking path, the registry."""

import subprocess
import sys

import numpy as np
import pytest

from retrieval.data.vocab import NUM_RESERVED
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


def _keep_top(weights, k):
    """Each row's k largest positive entries (ties: lower index), the rest zero; asserts no near-tie straddles the
    cut, so that the reference's choice is the only right one."""
    kept = np.zeros_like(weights)
    for i, row in enumerate(weights):
        order = np.lexsort((np.arange(len(row)), -row))
        positive = order[row[order] > 0]
        if len(positive) > k:
            below, above = row[positive[k]], row[positive[k - 1]]
            assert above == below or above - below > 1e-6 * above, "near-tie at the cut: pick another seed"
        kept[i, positive[:k]] = row[positive[:k]]
    return kept


def _dense_item_knn_shrunk(x, k, shrink, alpha):
    """Reference: s(i, j) = c_ij / (n_i^alpha n_j^(1 - alpha) + shrink), zero diagonal, each row's k best."""
    n = x.sum(axis=0)
    denominator = np.outer(n ** alpha, n ** (1 - alpha)) + shrink
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.nan_to_num((x.T @ x) / denominator)
    np.fill_diagonal(sim, 0.0)
    return x @ _keep_top(sim, k)


@pytest.mark.parametrize("k,shrink,alpha", [(100, 0.0, 0.5), (100, 10.0, 0.5), (100, 3.0, 0.8), (4, 2.0, 0.3),
                                            (6, 0.0, 1.0)])
def test_item_knn_with_shrinkage_and_asymmetric_cosine_matches_dense(incidence, k, shrink, alpha):
    dense, train = incidence
    knn = baselines.ItemKNN(train, dense.shape[1], n_neighbours=k, shrink=shrink, alpha=alpha, max_pairs=40)
    rows = np.arange(len(dense))
    np.testing.assert_allclose(knn(rows), _dense_item_knn_shrunk(dense, k, shrink, alpha)[rows], rtol=1e-5,
                               atol=1e-6)


def _dense_rp3beta(x, a, b, k):
    """Reference (Paudel et al. 2017): P_ui = X with rows summing to 1, P_iu = X^T likewise, W = P_iu^a P_ui^a
    (elementwise powers), column j over pop_j^b, zero diagonal, each row's k largest; scores X W."""
    user_rows = x / np.maximum(x.sum(axis=1, keepdims=True), 1)
    item_rows = x.T / np.maximum(x.T.sum(axis=1, keepdims=True), 1)
    weights = (item_rows ** a) @ (user_rows ** a)
    weights /= np.maximum(x.sum(axis=0), 1)[None, :] ** b
    np.fill_diagonal(weights, 0.0)
    return x @ _keep_top(weights, k)


@pytest.fixture(scope="module")
def varied():
    """Users with 1 to 12 items, items of very different popularity: RP3beta's weights take many values."""
    rng = np.random.default_rng(11)
    n_users, n_items = 80, 40
    dense = np.zeros((n_users, n_items))
    popularity = rng.pareto(1.0, n_items - 2) + 0.1
    for user in range(n_users):
        chosen = rng.choice(n_items - 2, rng.integers(1, 13), replace=False, p=popularity / popularity.sum())
        dense[user, chosen + 2] = 1.0
    rows, cols = np.nonzero(dense)
    return dense, csr.from_pairs(rows, cols, n_users)


@pytest.mark.parametrize("a,b,k", [(1.0, 0.0, 40), (0.6, 0.35, 40), (0.5, 0.5, 5), (0.75, 0.2, 12), (1.3, -0.2, 3)])
def test_rp3beta_matches_dense_reference(varied, a, b, k):
    """k = 40 = V: no top-K cut; the others keep each row's k largest (a block of 30 pair products: several blocks)."""
    dense, train = varied
    scorer = baselines.RP3beta(train, dense.shape[1], a, b, k, max_pairs=30)
    rows = np.arange(len(dense))
    np.testing.assert_allclose(scorer(rows), _dense_rp3beta(dense, a, b, k), rtol=1e-5, atol=1e-7)


def test_points_fitted_together_equal_points_fitted_alone(varied):
    """One product per a, one sort per (a, b), every k a prefix: the same scorers as separate fits."""
    dense, train = varied
    points = [{"a": a, "b": b, "k": k} for a in (0.5, 1.0) for b in (0.0, 0.4) for k in (3, 8)]
    rows = np.arange(len(dense))
    for point, scorer in zip(points, baselines.rp3beta(train, dense.shape[1], points), strict=True):
        np.testing.assert_array_equal(scorer(rows), baselines.RP3beta(train, dense.shape[1], **point)(rows))
    knn_points = [{"k": k, "shrink": s, "alpha": 0.5} for s in (0.0, 5.0) for k in (2, 7)]
    for point, scorer in zip(knn_points, baselines.item_knn(train, dense.shape[1], knn_points), strict=True):
        reference = baselines.ItemKNN(train, dense.shape[1], point["k"], point["shrink"], point["alpha"])
        np.testing.assert_array_equal(scorer(rows), reference(rows))


def test_registry_declares_defaults_grids_and_makes_scorers_from_params(varied):
    dense, train = varied
    assert baselines.NAMES == ("most_popular", "random", "item_knn", "rp3beta", "ease")
    assert dict(baselines.BASELINES["item_knn"].defaults) == {"k": 100, "shrink": 0.0, "alpha": 0.5}  # today's kNN
    for name in ("item_knn", "rp3beta", "ease"):
        baseline = baselines.BASELINES[name]
        assert baseline.tunable and set(baseline.grid) <= set(baseline.defaults) and baseline.seconds is not None
        assert all(point.keys() == baseline.defaults.keys() for point in baseline.grid_points())
    assert not baselines.BASELINES["most_popular"].tunable
    rows = np.arange(len(dense))
    made = baselines.make("rp3beta", train, dense.shape[1], np.ones(40), params={"b": 0.5, "k": 5})
    np.testing.assert_allclose(made(rows), _dense_rp3beta(dense, baselines.BASELINES["rp3beta"].defaults["a"], 0.5, 5),
                               rtol=1e-5, atol=1e-7)
    configured = baselines.config_defaults(ease_lambda=7.0, ease_max_items=900)
    assert baselines.params_of("ease", {}, configured) == {"lambda": 7.0, "items": 900}
    assert baselines.params_of("ease", {"lambda": 3.0}, configured) == {"lambda": 3.0, "items": 900}
    assert baselines.params_of("ease") == {"lambda": baselines.EASE_LAMBDA, "items": baselines.EASE_MAX_ITEMS}
    with pytest.raises(ValueError, match="has no parameter z"):
        baselines.make("rp3beta", train, 40, np.ones(40), params={"z": 1})


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


def test_ease_on_the_most_clicked_items_is_ease_of_their_columns(incidence):
    """``max_items``: EASE^R fitted on the columns of the most clicked items only (the float64 reference on that
    submatrix), the other items unranked (-inf), ties in popularity to the lower index."""
    dense, train = incidence
    counts = dense.sum(axis=0)
    kept = baselines.ease_items(np.bincount(train.indices, minlength=dense.shape[1]), 12)
    order = sorted(range(NUM_RESERVED, dense.shape[1]), key=lambda item: (-counts[item], item))[:12]
    np.testing.assert_array_equal(kept, sorted(order))
    sub = dense[:, kept]
    precision = np.linalg.inv(sub.T @ sub + 5.0 * np.eye(12))
    reference = np.eye(12) - precision / np.diag(precision)[None, :]
    ease = baselines.Ease(train, dense.shape[1], l2=5.0, block=5, max_items=12)
    rows = np.array([3, 0, 59, 21])
    scores = ease(rows)
    assert len(ease.items) == 12 and scores.shape == (4, dense.shape[1])
    np.testing.assert_allclose(scores[:, kept], sub[rows] @ reference, rtol=1e-4, atol=1e-5)
    assert np.isneginf(np.delete(scores, kept, axis=1)).all()
    assert baselines.ease_items(counts, 0) is None and baselines.ease_items(counts, dense.shape[1]) is None
    uncapped = baselines.Ease(train, dense.shape[1], 5.0, max_items=dense.shape[1])
    assert uncapped.items is None and uncapped.incidence.shape[1] == dense.shape[1]  # every item modelled


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
    reason = baselines.skip_reason("ease", 30_002, 4096, {"lambda": 500.0, "items": 0})
    assert "30000 items need about 4136 MB" in reason and "eval.baseline_memory_mb = 4096" in reason
    assert baselines.skip_reason("ease", 40_983, baselines.BASELINE_MEMORY_MB) is None  # Gowalla: the default fits
    all_items = {"lambda": 500.0, "items": 0}
    assert "40981 items need about" in baselines.skip_reason("ease", 40_983, 4096, all_items)
    assert baselines.skip_reason("ease", 40_983, 4096) is None  # the default cap: 15,000 items need 1.2 GB
    assert baselines.skip_reason("item_knn", 30_000, 1) is None
