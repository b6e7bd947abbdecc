"""Non-learned baselines, scored through the same ranking code path as the model (see ``ranking.top_k``).

Each baseline is a *scorer*: a callable mapping user rows [b] to a float32 score matrix [b, V] over vocabulary item
indices, so exclusion of training items, padding/OOV handling, top-k and metrics are shared with the model.
:data:`BASELINES` is their registry by name (``eval.baselines``, ``pipelines/evaluate.py --baselines``): how each is
fitted from its parameters (several parameter points at once where they share work), the parameters' defaults and
tuning grid (``baseline_tuning`` tunes them on a holdout, as the model is tuned), whether it needs the whole training
matrix, the memory it needs and an estimate of its fitting time. This module loads TensorFlow only when a popularity
or random scorer is made (and SciPy only when an item-item baseline is fitted), so the config checks and ``--help``
read the registry at once.

- ``most_popular``: score = number of training interactions of the item (the same list for every user).
- ``random``: i.i.d. uniform scores, seeded (``tf.random.stateless_uniform`` keyed by ``(seed, first row of the
  block)``, so results are reproducible for a given block size).
- ``item_knn``: item-based collaborative filtering (Sarwar et al., WWW 2001; RecBole's ``ItemKNN``) with shrinkage
  and the asymmetric cosine (Aiolli, "Efficient top-N recommendation for very large scale binary rated datasets",
  RecSys 2013): ``s(i, j) = c_ij / (n_i^alpha n_j^(1 - alpha) + shrink)`` on the binary user-item incidence X, with
  ``c_ij`` the number of users who have both items and ``n_i`` the number of users who have i (alpha 0.5 and shrink
  0: the cosine); every item keeps its ``k`` most similar items (s(i, i) = 0), and ``score(u, j) = sum_{i in
  train(u)} s(i, j)`` over those neighbour lists. Parameters ``k`` (100), ``shrink`` (0), ``alpha`` (0.5).
- ``rp3beta``: RP3beta (Paudel et al., "Updatable, accurate, diverse, and scalable recommendations for interactive
  applications", ACM TiiS 2017; the tuned baseline of Dacrema et al., RecSys 2019): ``P_ui`` = X row-normalised
  (each user's row sums to 1), ``P_iu`` = X^T row-normalised, ``W = P_iu^a P_ui^a`` (elementwise powers of the
  nonzeros: a random walk item -> user -> item with sharpened steps), column j divided by ``pop_j^b`` (pop_j: the
  users who have j; b > 0 lowers popular items), diagonal zeroed, every row's ``k`` largest entries kept;
  ``score(u, .) = X[u] W``. Parameters ``a``, ``b``, ``k``.
- ``ease``: EASE^R (Steck, "Embarrassingly Shallow Autoencoders for Sparse Data", WWW 2019, eq. 8), the closed-form
  item-item linear model ``B = I - P diag(1 / diag(P))`` with ``P = (X^T X + lambda I)^-1`` (zero diagonal), and
  ``score(u, .) = X[u] B``. Its parameter is the L2 weight ``lambda`` (:data:`EASE_LAMBDA` = 500, the paper's value
  for MovieLens-20M, and ``eval.ease_lambda``; it measures recall@20 0.282 on ``set-splits/ml-1m``); ``items`` (not
  tuned: :data:`EASE_MAX_ITEMS`, ``eval.ease_max_items``) caps the most clicked items it models. It needs the
  dense item x item Gram matrix and its inverse in one float32 buffer: :func:`ease_memory_mb` estimates the peak
  (7.4 GB at Gowalla's 41k items), and :func:`skip_reason` says why it does not fit a memory budget
  (``eval.baseline_memory_mb``, default :data:`BASELINE_MEMORY_MB`), so that the evaluator skips it rather than let
  it dominate the run's memory.

Tuning grids (:attr:`Baseline.grid`; ``baseline_tuning`` tries the defaults' fit first, then the rest, within a time
budget). Dacrema et al. searched RP3beta's a and b in [0, 2] and k in [5, 1000], and item-kNN's k in [5, 1000] and
shrink in [0, 1000], by Bayesian search over 35 points or more; a run gets a compact grid instead, around the values
that win, of points that share work:

- ``rp3beta``: a in {0.5, 0.75, 1}, b in {0.2, 0.35, 0.5}, k in {100, 200, 400} (27 points, 3 products). The product
  ``P_iu^a P_ui^a`` is computed once per a and reused for every b (b only rescales its columns) and k (the top-100
  list is the head of the top-400 one). On a Gowalla holdout (41k items; recall@20 of 5,000 validation users) b
  matters most: at a = 0.6 and k = 200, b = 0, 0.2, 0.35, 0.5, 0.65 read 0.171, 0.188, 0.189, 0.168, 0.132; the best
  per a is 0.191 (a 0.5), 0.194 (0.6), 0.189 (0.75) and 0.179 (1), and k = 400 gains up to 0.008 over 200 at
  b >= 0.35. The defaults (a 0.75, b 0.35, k 200) are the grid's middle.
- ``item_knn``: k in {100, 200}, shrink in {0, 10, 50}, alpha in {0.5, 0.75, 0.9} (18 points, one product, 9
  sorts; every k a prefix). On the same holdout the cosine of the defaults (k 100, shrink 0, alpha 0.5, today's
  item-kNN) reads 0.130; shrink 10-50 lifts it to 0.16, the asymmetric alpha 0.75 (shrink 0-10, k 200) to 0.171;
  alpha 0.9 reads 0.169 and alpha 1 (the conditional probability) 0.163.
- ``ease``: lambda in {100, 300, 500, 1000, 3000} (Steck's values: 200 for the Million Song Dataset, 500 for
  MovieLens-20M, 1000 for Netflix); every lambda is a fit of its own (a Cholesky of V^3 / 3 flops: 35 s at the
  default cap of 15,000 items, about 11 minutes at 41k, where it keeps ``eval.ease_lambda``).

Construction of item-kNN and RP3beta never builds the dense item x item matrix (41k items would need 6.7 GB): the
rows of the item x item product (X^T X, or ``P_iu^a P_ui^a``) are computed by SciPy's sparse product in item blocks
of at most ``max_pairs`` stored entries (a row has at most ``sum_{u has i} |train(u)|`` of them; the whole costs
``sum_u |train(u)|^2``, 33M multiply-adds at Gowalla), weighted for every parameter point, and each row's best
entries are kept by one ``argsort`` of int64 keys; only the neighbour lists are kept ([V, k]). Scoring a user block
multiplies its sparse rows of X by the sparse matrix of those lists.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import glob
import itertools
import os
import types
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from retrieval.data.vocab import NUM_RESERVED
from retrieval.evaluation import csr as csr_lib

if TYPE_CHECKING:
    import scipy.sparse

    from retrieval.evaluation.ranking import Scorer

EASE_LAMBDA = 500.0
# Gram-matrix columns (and rows mirrored) per block: a [V, 2048] float32 temporary (0.3 GB at 41k items; at 4096
# it was twice that for the same speed).
EASE_BLOCK = 2048
# Default of eval.ease_max_items: EASE^R models the 15,000 most clicked items at most. Its fit is cubic in them: 35 s
# at 15k on 2 cores (its refit; its lambda is tuned on fewer, EASE_TUNING_ITEMS), where all of Gowalla's 41k take
# 11 minutes a fit. The price on Gowalla (a 10% holdout of split 0's 80%, 5,000 users, lambda 500): recall@20 0.1533
# at 15k items (69% of the pairs), 0.1616 at 20k (77%), 0.1748 with all; tuned RP3beta reads above all three there.
EASE_MAX_ITEMS = 15_000
# EASE^R's lambda is tuned on at most this many of the most clicked items and refitted at the chosen lambda on its
# eval.ease_max_items: its five fits cost (6k / 15k)^3 = 6% of theirs (20 s against 149 s on Gowalla's holdout on a
# slow 2-core box, time the towers get under train.time_budget_s). The lambda chosen is the same on the validation
# holdouts of four real sets, 6k items against all the cap holds: Gowalla 300 and 300, Yelp2018 500 and 500, Amazon
# Beauty 100 and 100, lastfm 100 and 100
# (benchmarks/JOURNAL.md, "Issue 47: EASE^R's lambda tuned on fewer items, and the first validation").
EASE_TUNING_ITEMS = 6_000
# Default of eval.baseline_memory_mb: EASE^R up to about 43k items (Gowalla's 41k need 7.4 GB; the Cholesky and the
# inverse take about five minutes there on 2 cores).
BASELINE_MEMORY_MB = 8192
TUNING_BUDGET_S = 300.0  # default of eval.baseline_budget_s: seconds per tuned baseline (baseline_tuning)
TUNING_USERS = 5000  # default of eval.baseline_tuning_users: validation users scoring each grid point
MAX_PAIRS = 1 << 23  # stored entries of one block of the item x item product (about 0.6 GB of temporaries)
Params = Mapping[str, float]


def most_popular(popularity: np.ndarray) -> Scorer:
    """Scores every item by its training popularity (counts aligned with vocabulary indices)."""
    import tensorflow as tf

    row = tf.constant(np.asarray(popularity, dtype=np.float32)[None, :])
    return lambda rows: tf.tile(row, [len(rows), 1])


def random(n_items: int, seed: int) -> Scorer:
    """Uniform random scores; reproducible for a given seed and block size (stateless, keyed by the first row)."""
    import tensorflow as tf

    return lambda rows: tf.random.stateless_uniform([len(rows), n_items], seed=[seed, int(rows[0]) if len(rows) else 0])


def _neighbour_order(i: np.ndarray, j: np.ndarray, weight: np.ndarray, n_items: int) -> np.ndarray:
    """One unique int64 key per pair sorting by item i, then decreasing weight (positive), then neighbour j.

    ``np.argsort`` of it is 20x faster than ``np.lexsort((j, -weight, i))``. A positive float32's bit pattern orders
    like its value; it takes the bits left after i and j (31 of them, exact, below 65,536 items; for larger
    catalogues its last mantissa bits are dropped, and pairs that close are ordered by j).
    """
    bits = max(int(n_items - 1).bit_length(), 1)
    weight_bits = 63 - 2 * bits
    if weight_bits < 16:
        raise ValueError(f"neighbour lists support up to 2^23 items, got {n_items}")
    pattern = np.asarray(weight, np.float32).view(np.int32).astype(np.int64)
    rank = (np.int64(0x7FFFFFFF) - pattern) >> max(31 - weight_bits, 0)
    return (np.asarray(i, np.int64) << (weight_bits + bits)) | (rank << bits) | np.asarray(j, np.int64)


def _item_blocks(train: csr_lib.Csr, n_items: int, max_pairs: int) -> list[tuple[int, int]]:
    """Item ranges whose rows of the item x item product hold at most ``max_pairs`` entries together (an item's row
    at most ``sum_{u has i} |train(u)|``; an item over the bound is a block of its own)."""
    users, items = csr_lib.to_pairs(train)
    work = np.bincount(items, weights=train.lengths[users], minlength=n_items)
    ends = np.searchsorted(np.cumsum(work), np.arange(max_pairs, work.sum() + max_pairs, max_pairs), side="right")
    bounds = np.unique(np.concatenate([[0], np.maximum(ends, 1), [n_items]]).clip(0, n_items))
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))


Weighting = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _neighbour_lists(left: scipy.sparse.csr_matrix, right: scipy.sparse.csr_matrix, weightings: Sequence[Weighting],
                     widths: Sequence[int], blocks: Sequence[tuple[int, int]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """For every weighting, each item's ``width`` best neighbours ([V, width] items and float32 weights, best first,
    ties to the lower item; zero-weight padding): row i of ``left @ right`` (an item x item product) with entry
    (i, j) weighted by ``weighting(i, j, value)``, the diagonal and non-positive weights left out."""
    n_items = left.shape[0]
    lists = [(np.zeros((n_items, width), np.int32), np.zeros((n_items, width), np.float32)) for width in widths]
    for lo, hi in blocks:
        product = left[lo:hi] @ right
        i = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(product.indptr))
        j, value = product.indices.astype(np.int64), product.data
        del product
        off = i != j
        i, j, value = i[off], j[off], value[off]
        for weighting, width, (neighbours, weights) in zip(weightings, widths, lists, strict=True):
            weight = weighting(i, j, value)
            keep = weight > 0
            wi, wj, ww = i[keep], j[keep], weight[keep]
            order = np.argsort(_neighbour_order(wi, wj, ww, n_items))
            wi, wj, ww = wi[order], wj[order], ww[order]
            starts = np.concatenate([[0], np.flatnonzero(np.diff(wi)) + 1])
            rank = np.arange(len(wi)) - np.repeat(starts, np.diff(np.append(starts, len(wi))))
            top = rank < width
            neighbours[wi[top], rank[top]] = wj[top]
            weights[wi[top], rank[top]] = ww[top]
    return lists


class Neighbours:
    """Scorer ``score(u, j) = sum_{i in train(u)} w(i, j)`` over every item's neighbour list (``neighbours`` and
    ``weights``: [V, k], best first, zero weights pad): the sparse product of the users' rows of X with the sparse
    [V, V] matrix of the lists (SciPy, float32), made at the first call."""

    def __init__(self, train: csr_lib.Csr, n_items: int, neighbours: np.ndarray, weights: np.ndarray):
        self.train, self.n_items = train, n_items
        self.neighbours, self.weights = neighbours, weights
        self._incidence = self._matrix = None

    def first(self, k: int) -> Neighbours:
        """The scorer of every list's first ``k`` neighbours (views, no copy)."""
        if k >= self.neighbours.shape[1]:
            return self
        return Neighbours(self.train, self.n_items, self.neighbours[:, :k], self.weights[:, :k])

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        import scipy.sparse

        if self._matrix is None:
            width = self.neighbours.shape[1]
            self._matrix = scipy.sparse.csr_matrix(
                (self.weights.reshape(-1), self.neighbours.reshape(-1), np.arange(self.n_items + 1) * width),
                shape=(self.n_items, self.n_items))
            self._matrix.eliminate_zeros()
            self._incidence = _sparse(self.train, self.n_items)
        scores = np.zeros((len(rows), self.n_items), np.float32)
        (self._incidence[np.asarray(rows, dtype=np.int64)] @ self._matrix).toarray(out=scores)
        return scores


def _check(name: str, points: Sequence[Params], ranges: Mapping[str, tuple[float, float]]) -> None:
    for point in points:
        for param, (low, high) in ranges.items():
            if not low <= point[param] <= high:
                raise ValueError(f"{name}'s {param} must be in [{low:g}, {high:g}], got {point[param]}")


def item_knn(train: csr_lib.Csr, n_items: int, points: Sequence[Params], max_pairs: int = MAX_PAIRS
             ) -> list[Neighbours]:
    """Item-kNN scorers (see the module docstring), one per point ``{"k", "shrink", "alpha"}``: one pass over the
    co-occurrence counts, one sort per (alpha, shrink), every k a prefix of the longest list."""
    _check("item_knn", points, {"k": (1, np.inf), "shrink": (0, np.inf), "alpha": (0, 1)})
    x = _sparse(train, n_items, np.float64)
    users_of = np.asarray(x.sum(axis=0)).ravel()
    kinds = list(dict.fromkeys((float(p["alpha"]), float(p["shrink"])) for p in points))

    def weighting(alpha: float, shrink: float) -> Weighting:
        row, column = users_of ** alpha, users_of ** (1.0 - alpha)
        return lambda i, j, count: count / (row[i] * column[j] + shrink)

    widths = [max(int(p["k"]) for p in points if (float(p["alpha"]), float(p["shrink"])) == kind) for kind in kinds]
    lists = _neighbour_lists(x.T.tocsr(), x, [weighting(*kind) for kind in kinds], widths,
                             _item_blocks(train, n_items, max_pairs))
    fitted = {kind: Neighbours(train, n_items, *pair) for kind, pair in zip(kinds, lists, strict=True)}
    return [fitted[(float(p["alpha"]), float(p["shrink"]))].first(int(p["k"])) for p in points]


def rp3beta(train: csr_lib.Csr, n_items: int, points: Sequence[Params], max_pairs: int = MAX_PAIRS
            ) -> list[Neighbours]:
    """RP3beta scorers (see the module docstring), one per point ``{"a", "b", "k"}``: one product per a, one sort
    per (a, b), every k a prefix of the longest list."""
    _check("rp3beta", points, {"a": (0, np.inf), "b": (-np.inf, np.inf), "k": (1, np.inf)})
    x = _sparse(train, n_items, np.float64)
    by_item = x.T.tocsr()
    degree = np.maximum(np.asarray(x.sum(axis=0)).ravel(), 1.0)  # an item without users has no entry to divide
    to_item = 1.0 / np.repeat(degree, np.diff(by_item.indptr))  # P_iu's nonzeros, item rows
    to_user = 1.0 / np.repeat(np.maximum(np.diff(x.indptr), 1), np.diff(x.indptr))  # P_ui's nonzeros, user rows
    blocks = _item_blocks(train, n_items, max_pairs)

    def weighting(b: float) -> Weighting:
        scale = degree ** -b
        return lambda i, j, value: value * scale[j]

    fitted = {}
    for a in dict.fromkeys(float(p["a"]) for p in points):
        left, right = by_item.copy(), x.copy()
        left.data, right.data = to_item ** a, to_user ** a
        bs = list(dict.fromkeys(float(p["b"]) for p in points if float(p["a"]) == a))
        widths = [max(int(p["k"]) for p in points if (float(p["a"]), float(p["b"])) == (a, b)) for b in bs]
        lists = _neighbour_lists(left, right, [weighting(b) for b in bs], widths, blocks)
        fitted.update({(a, b): Neighbours(train, n_items, *pair) for b, pair in zip(bs, lists, strict=True)})
    return [fitted[(float(p["a"]), float(p["b"]))].first(int(p["k"])) for p in points]


class ItemKNN(Neighbours):
    """The item-kNN scorer of one parameter point (see :func:`item_knn`)."""

    def __init__(self, train: csr_lib.Csr, n_items: int, n_neighbours: int = 100, shrink: float = 0.0,
                 alpha: float = 0.5, max_pairs: int = MAX_PAIRS):
        (fitted,) = item_knn(train, n_items, [{"k": n_neighbours, "shrink": shrink, "alpha": alpha}], max_pairs)
        super().__init__(train, n_items, fitted.neighbours, fitted.weights)


class RP3beta(Neighbours):
    """The RP3beta scorer of one parameter point (see :func:`rp3beta`)."""

    def __init__(self, train: csr_lib.Csr, n_items: int, a: float, b: float, k: int, max_pairs: int = MAX_PAIRS):
        (fitted,) = rp3beta(train, n_items, [{"a": a, "b": b, "k": k}], max_pairs)
        super().__init__(train, n_items, fitted.neighbours, fitted.weights)


class Ease:
    """EASE^R scorer (see the module docstring), built for tens of thousands of items on a small machine.

    One ``V x V`` float32 buffer goes from Gram matrix to weights:
    - the Gram matrix's upper triangle comes from the sparse incidence, ``block`` columns at a time (work
      ``sum_u |train(u)|^2``, where dense user blocks cost ``n_users V^2``: 10^14 flops at Gowalla's 41k items);
    - LAPACK's Cholesky factorises and inverts it in place (``spotrf`` + ``spotri``: the matrix is symmetric positive
      definite for lambda > 0; half the flops of an LU inverse and no second ``V x V`` copy);
    - the upper triangle of the inverse is mirrored ``block`` rows at a time, and the weights overwrite it.
    Scoring multiplies the users' sparse rows by the weights (work ``|train(u)| V`` per user).

    ``max_items`` (``eval.ease_max_items``; 0: all) fits it on that many of the most clicked items only (ties: the
    lower index), as EASE^R's own evaluation prunes its catalogues (Steck 2019, sec. 4: the Million Song Dataset's songs
    listened to by at least 200 users, 41k): the fit is cubic in the items, so 20,000 of Gowalla's 41k take an eighth of the time.
    The other items are not ranked (score -inf) and their clicks leave the users' rows; :attr:`items` holds the
    modelled ones (None: all)."""

    def __init__(self, train: csr_lib.Csr, n_items: int, l2: float = EASE_LAMBDA, block: int = EASE_BLOCK,
                 max_items: int = 0):
        import scipy.linalg.lapack

        if l2 <= 0:
            raise ValueError(f"EASE's lambda must be positive, got {l2}")
        self.n_items = n_items
        self.items, self.incidence = self.modelled_incidence(train, n_items, max_items)
        size = self.incidence.shape[1]
        by_item = self.incidence.T.tocsr()
        precision = np.empty((size, size), np.float32, order="F")  # LAPACK reads the upper triangle only
        for start in range(0, size, block):
            stop = min(start + block, size)
            precision[:stop, start:stop] = (by_item[:stop] @ by_item[start:stop].T).toarray()
        precision[np.diag_indices(size)] += l2
        with _openblas_threads(1):
            factor, info = scipy.linalg.lapack.spotrf(precision, lower=False, overwrite_a=True, clean=False)
        if info == 0:
            factor, info = scipy.linalg.lapack.spotri(factor, lower=False, overwrite_c=True)
        if info != 0:
            raise np.linalg.LinAlgError(f"EASE^R: X^T X + {l2:g} I is not positive definite (LAPACK info {info})")
        precision = _mirror_upper(factor, block)
        # B = I - P diag(1 / diag(P)): row i of B is column i of P (P symmetric), contiguous in Fortran order, so
        # the C-ordered transpose holds B's rows as the sparse product reads them.
        weights = precision.T
        weights /= -np.diag(weights)[None, :]
        weights[np.diag_indices(size)] = 0.0
        self.weights = weights

    @staticmethod
    def modelled_incidence(train: csr_lib.Csr, n_items: int,
                           max_items: int) -> tuple[Optional[np.ndarray], scipy.sparse.csr_matrix]:
        """The items modelled under ``max_items`` (:func:`ease_items`; None: all) and the incidence on their
        columns, what the weights multiply."""
        items = ease_items(np.bincount(train.indices, minlength=n_items), max_items)
        incidence = _sparse(train, n_items)
        return items, (incidence[:, items] if items is not None else incidence)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        scores = np.asarray(self.incidence[np.asarray(rows, dtype=np.int64)] @ self.weights, dtype=np.float32)
        if self.items is None:
            return scores
        out = np.full((len(scores), self.n_items), -np.inf, np.float32)
        out[:, self.items] = scores
        return out


def ease_items(popularity: np.ndarray, max_items: int) -> Optional[np.ndarray]:
    """The sorted indices of the ``max_items`` most clicked catalogue items of ``popularity`` (counts aligned with
    vocabulary indices; the reserved indices never), ties to the lower index; None when ``max_items`` is 0 or keeps
    every item."""
    if not max_items or len(popularity) - NUM_RESERVED <= max_items:
        return None
    counts = np.asarray(popularity[NUM_RESERVED:], np.int64)
    order = np.argsort(-counts, kind="stable")[:max_items]
    return np.sort(order) + NUM_RESERVED


def _sparse(train: csr_lib.Csr, n_items: int, dtype=np.float32) -> scipy.sparse.csr_matrix:
    """The binary user x item incidence of ``train`` as a SciPy CSR matrix (float32 unless ``dtype`` says)."""
    import scipy.sparse

    return scipy.sparse.csr_matrix((np.ones(len(train.indices), dtype), train.indices, train.indptr),
                                   shape=(train.n_rows, n_items))


def bundled_openblas() -> Optional[ctypes.CDLL]:
    """SciPy's bundled OpenBLAS with its thread-count functions, or None where SciPy links another BLAS."""
    import scipy

    library = next(iter(glob.glob(os.path.join(os.path.dirname(scipy.__file__), os.pardir, "scipy.libs",
                                               "libscipy_openblas*.so*"))), None)
    openblas = ctypes.CDLL(library) if library else None
    names = ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads")
    return openblas if all(hasattr(openblas, name) for name in names) else None


@contextlib.contextmanager
def _openblas_threads(count: int) -> Iterator[None]:
    """Runs the block with SciPy's bundled OpenBLAS on ``count`` threads (no-op where SciPy links another BLAS).

    OpenBLAS's multithreaded Cholesky (``spotrf_U_parallel``) writes past its buffers on large orders: a segfault at
    40,983 items on this 2-core box (SciPy 1.17's OpenBLAS and NumPy's 0.3.31 ILP64 build alike; reported as
    OpenMathLib/OpenBLAS issues 352, 1413 and 2821), while its single-threaded one factorises the same matrix in
    174 s. ``spotri`` after it stays multithreaded. Written by hand with ctypes: SciPy has no thread control and
    ``threadpoolctl`` is not a dependency."""
    openblas = bundled_openblas()
    if openblas is None:
        yield
        return
    before = openblas.scipy_openblas_get_num_threads()
    openblas.scipy_openblas_set_num_threads(count)
    try:
        yield
    finally:
        openblas.scipy_openblas_set_num_threads(before)


def _mirror_upper(matrix: np.ndarray, block: int) -> np.ndarray:
    """Copies the upper triangle of square ``matrix`` onto its lower triangle in place, ``block`` rows at a time
    (at most a ``block x V`` temporary)."""
    n = matrix.shape[0]
    for start in range(0, n, block):
        stop = min(start + block, n)
        matrix[start:stop, :start] = matrix[:start, start:stop].T
        square = matrix[start:stop, start:stop]
        lower = np.tril_indices(stop - start, -1)
        square[lower] = square.T[lower]
    return matrix


def ease_memory_mb(n_items: int, block: int = EASE_BLOCK) -> float:
    """Peak memory of fitting :class:`Ease` in MiB: the V x V float32 buffer (Gram matrix, inverse, weights) and one
    block of ``block`` Gram-matrix columns, dense and, at worst, as a dense-filled sparse matrix (values and
    indices). The sparse incidence is the evaluation's own training data."""
    return 4 * (n_items * n_items + 3 * min(block, n_items) * n_items) / (1 << 20)


class Shape(NamedTuple):
    """The size of a training matrix, as the fitting-time estimates read it."""

    n_users: int
    n_items: int
    n_pairs: int
    pair_work: int  # sum_u |train(u)|^2: the multiply-adds of the item x item product

    @classmethod
    def of(cls, train: csr_lib.Csr, n_items: int) -> Shape:
        lengths = train.lengths.astype(np.int64)
        return cls(train.n_rows, n_items, int(lengths.sum()), int((lengths * lengths).sum()))


class Training(NamedTuple):
    """What a baseline is fitted on: the training incidence [U, V], the catalogue size, the popularity counts [V]
    and the seed."""

    train: csr_lib.Csr
    n_items: int
    popularity: np.ndarray
    seed: int = 0


# Seconds per unit of work on 2 cores, on the safe side (measured at Gowalla's size, 41k items and 33M pair
# products: one RP3beta product and sort in 3 to 7 s); the budget of eval.baseline_budget_s reads them before a
# baseline's first fit, its own measured times after that.
SORT_S_PER_PAIR = 1.2e-7  # one weighting's argsort of the product's entries, per multiply-add of the product
PRODUCT_S_PER_PAIR = 3e-8  # the sparse item x item product
# EASE^R's Gram matrix, Cholesky factorisation and inverse, per V^3 (V: the items it models): 11.4, 34.7 and 74.7 s
# at 10k, 15k and 20k of Gowalla's items on an idle box, 1.0-1.1e-11 per cube. On a box whose cores other jobs keep
# busy, the multithreaded spotri can take several times longer (8k items: 29 s against 5 s on one thread), so this
# is a lower bound there.
EASE_S_PER_CUBE = 1e-11


def _neighbour_seconds(separate: str) -> Callable[[Shape, Sequence[Params]], float]:
    """Fitting time of item-kNN or RP3beta points: one product per value of ``separate`` (RP3beta's a; item-kNN's
    counts are shared, ``separate`` empty), one sort per weighting."""
    def seconds(shape: Shape, points: Sequence[Params]) -> float:
        products = len({p[separate] for p in points}) if separate else 1
        sorts = len({tuple(p[name] for name in p if name != "k") for p in points})
        return shape.pair_work * (products * PRODUCT_S_PER_PAIR + sorts * SORT_S_PER_PAIR)
    return seconds


def ease_size(n_items: int, point: Params) -> int:
    """The items EASE^R models at ``point`` in a catalogue of ``n_items`` vocabulary rows (its ``items`` cap, 0: all;
    the reserved rows never)."""
    items = int(point.get("items", 0))
    return min(n_items - NUM_RESERVED, items) if items else n_items - NUM_RESERVED


def _ease_seconds(shape: Shape, points: Sequence[Params]) -> float:
    return sum(EASE_S_PER_CUBE * float(ease_size(shape.n_items, point)) ** 3 + PRODUCT_S_PER_PAIR * shape.pair_work
               for point in points)


def _ease_tuning_point(point: Params, n_items: int) -> Params:
    """The point EASE^R's tuning fits for ``point``: at most :data:`EASE_TUNING_ITEMS` items."""
    if ease_size(n_items, point) <= EASE_TUNING_ITEMS:
        return point
    return {**point, "items": EASE_TUNING_ITEMS}


def _fit_ease(training: Training, points: Sequence[Params]) -> list[Scorer]:
    # Ease looked up at call time: benchmarks/bench_quality.py swaps in a version that keeps its weights on disk.
    return [Ease(training.train, training.n_items, float(point["lambda"]), max_items=int(point["items"]))
            for point in points]


@dataclasses.dataclass(frozen=True)
class Baseline:
    """One baseline.

    - ``fit(training, points)``: one scorer per parameter point (a mapping with every parameter), fitted together
      where the points share work;
    - ``defaults``: its parameters and their default values (none: nothing to tune);
    - ``grid``: the values ``baseline_tuning`` tries per parameter (see the module docstring);
    - ``separate``: the parameters every value of which costs a fit of its own; points that differ in the others
      only are fitted together (tuning counts its time budget in such fits);
    - ``whole_matrix``: it is fitted on every user's training items (a user sample cannot fit it);
    - ``memory_mb(n_items, point)``: the memory it needs beyond the evaluation's own at ``point`` (None: none that
      grows with the catalogue);
    - ``seconds(shape, points)``: estimated time of fitting ``points`` together (None: negligible);
    - ``tuning_point(point, n_items)``: the point the tuning fits and scores in place of ``point`` in a catalogue of
      ``n_items`` vocabulary rows, where a cheaper fit chooses the same (EASE^R's lambda on fewer items); the refit
      then fits the chosen point itself (default: the point itself).
    """

    fit: Callable[[Training, Sequence[Params]], list[Scorer]]
    defaults: Params = dataclasses.field(default_factory=lambda: types.MappingProxyType({}))
    grid: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=lambda: types.MappingProxyType({}))
    separate: tuple[str, ...] = ()
    whole_matrix: bool = False
    memory_mb: Optional[Callable[[int, Params], float]] = None
    seconds: Optional[Callable[[Shape, Sequence[Params]], float]] = None
    tuning_point: Callable[[Params, int], Params] = lambda point, n_items: point

    @property
    def tunable(self) -> bool:
        return any(len(values) > 1 for values in self.grid.values())

    def grid_points(self) -> list[dict[str, float]]:
        return grid_points(self.defaults, self.grid)


def grid_points(defaults: Params, grid: Mapping[str, Sequence[float]]) -> list[dict[str, float]]:
    """Every point of ``grid`` (parameters in the order of ``defaults``; one not in the grid: its default)."""
    values = [tuple(grid.get(name, (value,))) for name, value in defaults.items()]
    return [dict(zip(defaults, combination, strict=True)) for combination in itertools.product(*values)]


def _frozen(mapping: Mapping) -> Mapping:
    return types.MappingProxyType(dict(mapping))


# The baselines, by name (eval.baselines, evaluate --baselines); the config's default lists them in this order.
BASELINES: dict[str, Baseline] = {
    "most_popular": Baseline(lambda training, points: [most_popular(training.popularity) for _ in points]),
    "random": Baseline(lambda training, points: [random(training.n_items, training.seed) for _ in points]),
    "item_knn": Baseline(
        lambda training, points: item_knn(training.train, training.n_items, points),
        defaults=_frozen({"k": 100, "shrink": 0.0, "alpha": 0.5}),
        grid=_frozen({"k": (100, 200), "shrink": (0.0, 10.0, 50.0), "alpha": (0.5, 0.75, 0.9)}),
        separate=("alpha", "shrink"), whole_matrix=True, seconds=_neighbour_seconds("")),
    "rp3beta": Baseline(
        lambda training, points: rp3beta(training.train, training.n_items, points),
        defaults=_frozen({"a": 0.75, "b": 0.35, "k": 200}),
        grid=_frozen({"a": (0.5, 0.75, 1.0), "b": (0.2, 0.35, 0.5), "k": (100, 200, 400)}),
        separate=("a",), whole_matrix=True, seconds=_neighbour_seconds("a")),
    "ease": Baseline(_fit_ease, defaults=_frozen({"lambda": EASE_LAMBDA, "items": EASE_MAX_ITEMS}),
                     grid=_frozen({"lambda": (100.0, 300.0, 500.0, 1000.0, 3000.0)}), separate=("lambda",),
                     whole_matrix=True, memory_mb=lambda n_items, point: ease_memory_mb(ease_size(n_items, point)),
                     seconds=_ease_seconds, tuning_point=_ease_tuning_point),
}
NAMES = tuple(BASELINES)


def skip_reason(name: str, n_items: int, memory_budget_mb: float, point: Optional[Params] = None) -> Optional[str]:
    """Why baseline ``name`` at ``point`` (default: its defaults) does not fit ``memory_budget_mb`` for this
    catalogue (None: it fits). Only EASE^R's memory grows with the square of the items it models; the other baselines
    stay within the evaluation's own."""
    memory_mb = BASELINES[name].memory_mb if name in BASELINES else None
    point = point if point is not None else (BASELINES[name].defaults if name in BASELINES else {})
    needed = memory_mb(n_items, point) if memory_mb is not None else 0.0
    if needed <= memory_budget_mb:
        return None
    size = ease_size(n_items, point) if name == "ease" else n_items
    return (f"{size} items need about {needed:.0f} MB for the dense item x item matrix and its inverse, over "
            f"eval.baseline_memory_mb = {memory_budget_mb:g}")


def _baseline(name: str) -> Baseline:
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return BASELINES[name]


def params_of(name: str, params: Optional[Params] = None,
              defaults: Optional[Mapping[str, Params]] = None) -> dict[str, float]:
    """The full parameter point of baseline ``name``: its registry defaults, overridden by the config's
    (``defaults``: by baseline name, :func:`config_defaults`), overridden by ``params``."""
    point = dict(_baseline(name).defaults)
    for given in ((defaults or {}).get(name), params):
        unknown = sorted(set(given or {}) - set(point))
        if unknown:
            raise ValueError(f"baseline {name} has no parameter {', '.join(unknown)}; its parameters: "
                             f"{', '.join(point) or 'none'}")
        point.update(given or {})
    return point


def config_defaults(ease_lambda: float = EASE_LAMBDA, ease_max_items: int = EASE_MAX_ITEMS) -> dict[str, dict]:
    """The baselines' defaults a run's config sets (``eval.ease_lambda``, ``eval.ease_max_items``), by name, as
    :func:`params_of` and ``baseline_tuning.tune_all`` read them."""
    return {"ease": {"lambda": float(ease_lambda), "items": int(ease_max_items)}}


def fit(name: str, training: Training, points: Sequence[Params]) -> list[Scorer]:
    """The scorers of baseline ``name`` at every (full) parameter point, fitted together where they share work."""
    return _baseline(name).fit(training, [dict(point) for point in points])


def make(name: str, train: csr_lib.Csr, n_items: int, popularity: np.ndarray, seed: int = 0,
         params: Optional[Params] = None, *, defaults: Optional[Mapping[str, Params]] = None) -> Scorer:
    """The scorer of baseline ``name`` (one of :data:`BASELINES`) with ``params`` (missing ones: the defaults, see
    :func:`params_of`); see :func:`skip_reason` for the memory it needs."""
    return fit(name, Training(train, n_items, popularity, seed), [params_of(name, params, defaults)])[0]
