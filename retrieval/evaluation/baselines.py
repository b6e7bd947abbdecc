"""Non-learned baselines, scored through the same ranking code path as the model (see ``ranking.top_k``).

Each baseline is a *scorer*: a callable mapping user rows [b] to a float32 score matrix [b, V] over vocabulary item
indices, so exclusion of training items, padding/OOV handling, top-k and metrics are shared with the model.
:data:`BASELINES` is their registry by name (``eval.baselines``, ``pipelines/evaluate.py --baselines``): how each is
fitted, whether it needs the whole training matrix and what memory it needs. This module loads TensorFlow only when a
scorer is made (and SciPy only when EASE^R is fitted), so the config checks and ``--help`` read the registry at once.

- ``most_popular``: score = number of training interactions of the item (the same list for every user).
- ``random``: i.i.d. uniform scores, seeded (``tf.random.stateless_uniform`` keyed by ``(seed, first row of the
  block)``, so results are reproducible for a given block size).
- ``item_knn``: item-based collaborative filtering (Sarwar et al., WWW 2001; RecBole's ``ItemKNN``): cosine
  similarity on the binary user-item incidence matrix X, ``s(i, j) = c_ij / sqrt(n_i n_j)`` with ``c_ij`` the number
  of users who have both items and ``n_i`` the number of users who have i; every item keeps its ``n_neighbours`` most
  similar items (s(i, i) = 0), and ``score(u, j) = sum_{i in train(u)} s(i, j)`` over those neighbour lists.

- ``ease``: EASE^R (Steck, "Embarrassingly Shallow Autoencoders for Sparse Data", WWW 2019, eq. 8), the closed-form
  item-item linear model ``B = I - P diag(1 / diag(P))`` with ``P = (X^T X + lambda I)^-1`` (zero diagonal), and
  ``score(u, .) = X[u] B``. One hyper-parameter, the L2 weight ``lambda`` (:data:`EASE_LAMBDA` = 500, the paper's
  value for MovieLens-20M; it measures recall@20 0.282 on ``set-splits/ml-1m``). It needs the dense item x item Gram
  matrix and its inverse: :func:`ease_memory_mb` estimates the peak, and :func:`skip_reason` says why it does not
  fit a memory budget (``eval.baseline_memory_mb``), so that the evaluator skips it rather than let it dominate the
  run's memory (it drove a 15k-item evaluation to 9 GB before it was built in place).

ItemKNN never builds the dense item x item matrix (41k items would need 6.7 GB): co-occurrences are counted from
(item, co-item) pairs of each user's training items, in item blocks holding at most ``max_pairs`` pairs (cost
sum_u |train(u)|^2 in time, ``max_pairs`` in memory), and only the top neighbours are kept ([V, n_neighbours]).
Scoring a user block then expands its (user, train item, neighbour) triples and accumulates them with ``bincount``.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import glob
import os
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import numpy as np

from retrieval.evaluation import csr as csr_lib

if TYPE_CHECKING:
    import scipy.sparse

    from retrieval.evaluation.ranking import Scorer

EASE_LAMBDA = 500.0
EASE_BLOCK = 4096  # Gram-matrix columns (and rows mirrored) per block: a [V, 4096] float32 temporary
# Default of eval.baseline_memory_mb: EASE^R up to about 27k items (the Cholesky inverse takes about two minutes on 2
# cores; 41k items: 8.3 GB).
BASELINE_MEMORY_MB = 4096


def most_popular(popularity: np.ndarray) -> Scorer:
    """Scores every item by its training popularity (counts aligned with vocabulary indices)."""
    import tensorflow as tf

    row = tf.constant(np.asarray(popularity, dtype=np.float32)[None, :])
    return lambda rows: tf.tile(row, [len(rows), 1])


def random(n_items: int, seed: int) -> Scorer:
    """Uniform random scores; reproducible for a given seed and block size (stateless, keyed by the first row)."""
    import tensorflow as tf

    return lambda rows: tf.random.stateless_uniform([len(rows), n_items], seed=[seed, int(rows[0]) if len(rows) else 0])


def _expand(csr: csr_lib.Csr, rows: np.ndarray, owners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every ``rows[p]``, pairs (owners[p], column) over that row's columns."""
    sub = csr_lib.take(csr, rows)
    return np.repeat(owners, sub.lengths), sub.indices


def _neighbour_order(i: np.ndarray, j: np.ndarray, sim: np.ndarray, n_items: int) -> np.ndarray:
    """One unique int64 key per pair sorting by item i, then decreasing similarity, then neighbour j.

    ``np.argsort`` of it is 20x faster than ``np.lexsort((j, -sim, i))``. The similarity (in [0, 1]) is quantized to
    the bits left after i and j (30 bits for 41k items); pairs closer than that are ordered by j.
    """
    bits = max(int(n_items - 1).bit_length(), 1)
    sim_bits = 62 - 2 * bits
    if sim_bits < 16:
        raise ValueError(f"item_knn supports up to 2^23 items, got {n_items}")
    rank = np.round((1.0 - np.clip(sim, 0.0, 1.0)) * ((1 << sim_bits) - 1)).astype(np.int64)
    return (i << (sim_bits + bits)) | (rank << bits) | j


class ItemKNN:
    """Item-item cosine kNN scorer built from the training incidence (see the module docstring)."""

    def __init__(self, train: csr_lib.Csr, n_items: int, n_neighbours: int = 100, max_pairs: int = 1 << 24):
        self.train = train
        self.n_items = n_items
        users, items = csr_lib.to_pairs(train)
        by_item = csr_lib.from_pairs(items, users, n_items)
        n_users_of = by_item.lengths.astype(np.float64)
        # Work per item: every co-item of every user who has the item.
        work = np.bincount(items, weights=train.lengths[users], minlength=n_items)
        ends = np.searchsorted(np.cumsum(work), np.arange(max_pairs, work.sum() + max_pairs, max_pairs), side="right")
        bounds = np.unique(np.concatenate([[0], np.maximum(ends, 1), [n_items]]).clip(0, n_items))
        self.neighbours = np.zeros((n_items, n_neighbours), dtype=np.int64)
        self.weights = np.zeros((n_items, n_neighbours), dtype=np.float32)
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            item_rows = np.arange(lo, hi)
            owner_item, owner_user = _expand(by_item, item_rows, item_rows)
            pair_i, pair_j = _expand(train, owner_user, owner_item)
            keep = pair_i != pair_j
            keys, counts = np.unique(pair_i[keep] * n_items + pair_j[keep], return_counts=True)
            i, j = np.divmod(keys, n_items)
            sim = counts / np.sqrt(n_users_of[i] * n_users_of[j])
            order = np.argsort(_neighbour_order(i, j, sim, n_items))
            i, j, sim = i[order], j[order], sim[order]
            starts = np.searchsorted(i, i, side="left")
            rank = np.arange(len(i)) - starts
            top = rank < n_neighbours
            self.neighbours[i[top], rank[top]] = j[top]
            self.weights[i[top], rank[top]] = sim[top]

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        local, items = _expand(self.train, np.asarray(rows, dtype=np.int64), np.arange(len(rows)))
        keys = (local[:, None] * self.n_items + self.neighbours[items]).reshape(-1)
        scores = np.bincount(keys, weights=self.weights[items].reshape(-1), minlength=len(rows) * self.n_items)
        return scores.astype(np.float32).reshape(len(rows), self.n_items)


class Ease:
    """EASE^R scorer (see the module docstring), built for tens of thousands of items on a small machine.

    One ``V x V`` float32 buffer goes from Gram matrix to weights:
    - the Gram matrix's upper triangle comes from the sparse incidence, ``block`` columns at a time (work
      ``sum_u |train(u)|^2``, where dense user blocks cost ``n_users V^2``: 10^14 flops at Gowalla's 41k items);
    - LAPACK's Cholesky factorises and inverts it in place (``spotrf`` + ``spotri``: the matrix is symmetric positive
      definite for lambda > 0; half the flops of an LU inverse and no second ``V x V`` copy);
    - the upper triangle of the inverse is mirrored ``block`` rows at a time, and the weights overwrite it.
    Scoring multiplies the users' sparse rows by the weights (work ``|train(u)| V`` per user)."""

    def __init__(self, train: csr_lib.Csr, n_items: int, l2: float = EASE_LAMBDA,
                 block: int = EASE_BLOCK):
        import scipy.linalg.lapack

        if l2 <= 0:
            raise ValueError(f"EASE's lambda must be positive, got {l2}")
        self.incidence = _sparse(train, n_items)
        by_item = self.incidence.T.tocsr()
        precision = np.empty((n_items, n_items), np.float32, order="F")  # LAPACK reads the upper triangle only
        for start in range(0, n_items, block):
            stop = min(start + block, n_items)
            precision[:stop, start:stop] = (by_item[:stop] @ by_item[start:stop].T).toarray()
        precision[np.diag_indices(n_items)] += l2
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
        weights[np.diag_indices(n_items)] = 0.0
        self.weights = weights

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.incidence[np.asarray(rows, dtype=np.int64)] @ self.weights, dtype=np.float32)


def _sparse(train: csr_lib.Csr, n_items: int) -> scipy.sparse.csr_matrix:
    """The binary user x item incidence of ``train`` as a SciPy float32 CSR matrix."""
    import scipy.sparse

    return scipy.sparse.csr_matrix((np.ones(len(train.indices), np.float32), train.indices, train.indptr),
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


@dataclasses.dataclass(frozen=True)
class Baseline:
    """One baseline: ``make(train, n_items, popularity, seed, ease_lambda)`` fits its scorer; ``whole_matrix``: it is
    fitted on every user's training items (a user sample cannot fit it); ``memory_mb(n_items)``: the memory it needs
    beyond the evaluation's own (None: none that grows with the catalogue)."""

    make: Callable[[csr_lib.Csr, int, np.ndarray, int, float], Scorer]
    whole_matrix: bool = False
    memory_mb: Optional[Callable[[int], float]] = None


# The baselines, by name (eval.baselines, evaluate --baselines); the config's default lists them in this order.
BASELINES: dict[str, Baseline] = {
    "most_popular": Baseline(lambda train, n_items, popularity, seed, l2: most_popular(popularity)),
    "random": Baseline(lambda train, n_items, popularity, seed, l2: random(n_items, seed)),
    "item_knn": Baseline(lambda train, n_items, popularity, seed, l2: ItemKNN(train, n_items), whole_matrix=True),
    "ease": Baseline(lambda train, n_items, popularity, seed, l2: Ease(train, n_items, l2), whole_matrix=True,
                     memory_mb=ease_memory_mb),
}
NAMES = tuple(BASELINES)


def skip_reason(name: str, n_items: int, memory_budget_mb: float) -> Optional[str]:
    """Why baseline ``name`` does not fit ``memory_budget_mb`` for this catalogue (None: it fits). Only EASE^R's
    memory grows with the square of the catalogue; the other baselines stay within the evaluation's own."""
    memory_mb = BASELINES[name].memory_mb if name in BASELINES else None
    needed = memory_mb(n_items) if memory_mb is not None else 0.0
    if needed <= memory_budget_mb:
        return None
    return (f"{n_items} items need about {needed:.0f} MB for the dense item x item matrix and its inverse, over "
            f"eval.baseline_memory_mb = {memory_budget_mb:g}")


def make(name: str, train: csr_lib.Csr, n_items: int, popularity: np.ndarray, seed: int = 0,
         ease_lambda: float = EASE_LAMBDA) -> Scorer:
    """The scorer of baseline ``name`` (one of :data:`BASELINES`); see :func:`skip_reason` for the memory it needs."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return BASELINES[name].make(train, n_items, popularity, seed, ease_lambda)
