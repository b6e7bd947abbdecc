"""Compressed sparse rows for per-user item sets (training items to exclude, relevant test items).

The few operations evaluation needs are written here with NumPy: build from pairs, take rows, expand to pairs, and
a vectorized membership test of a [B, K] matrix of item indices against the rows, which SciPy's sparse matrices do
not offer (EASE^R converts to one for its matrix products: ``baselines.Ease``).
Rows hold sorted, unique column indices; membership encodes each (row, column) pair as one int64 key
``row * width + column`` and uses binary search over the sorted keys, so it costs O(B K log nnz) with no Python loop.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Csr(NamedTuple):
    """Rows of sorted unique int64 column indices: row ``r`` is ``indices[indptr[r]:indptr[r + 1]]``."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.indptr)


def from_pairs(rows: np.ndarray, cols: np.ndarray, n_rows: int) -> Csr:
    """Builds a :class:`Csr` from (row, column) pairs; duplicate pairs are kept once."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    if len(rows) and (rows.min() < 0 or rows.max() >= n_rows):
        raise ValueError(f"row index out of range [0, {n_rows})")
    order = np.lexsort((cols, rows))
    rows, cols = rows[order], cols[order]
    keep = np.ones(len(rows), dtype=bool)
    keep[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    rows, cols = rows[keep], cols[keep]
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    return Csr(indptr, cols)


def empty(n_rows: int) -> Csr:
    """A :class:`Csr` with ``n_rows`` empty rows."""
    return Csr(np.zeros(n_rows + 1, dtype=np.int64), np.zeros(0, dtype=np.int64))


def to_pairs(csr: Csr) -> tuple[np.ndarray, np.ndarray]:
    """The (row, column) pairs of ``csr``, row-major."""
    rows = np.repeat(np.arange(csr.n_rows, dtype=np.int64), csr.lengths)
    return rows, np.asarray(csr.indices, dtype=np.int64)


def take(csr: Csr, rows: np.ndarray) -> Csr:
    """The sub-matrix made of ``rows`` (in that order)."""
    rows = np.asarray(rows, dtype=np.int64)
    starts = csr.indptr[rows]
    lengths = csr.indptr[rows + 1] - starts
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    # Position of every kept entry: its row's start plus its offset inside the row.
    offsets = np.arange(indptr[-1], dtype=np.int64) - np.repeat(indptr[:-1], lengths)
    return Csr(indptr, csr.indices[np.repeat(starts, lengths) + offsets])


def contains(csr: Csr, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``out[b, j]`` is whether ``cols[b, j]`` is in row ``rows[b]`` of ``csr``; negative columns are never in.

    Args:
      csr: rows with sorted unique columns.
      rows: [B] row of ``csr`` for each line of ``cols``.
      cols: [B, K] column indices (-1 marks an empty slot).
    """
    cols = np.asarray(cols, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    if csr.indices.size == 0 or cols.size == 0:
        return np.zeros(cols.shape, dtype=bool)
    width = int(max(csr.indices.max(), cols.max())) + 1
    row_of_entry, entries = to_pairs(csr)
    keys = row_of_entry * width + entries  # sorted: rows ascending, columns sorted within rows
    query = rows[:, None] * width + cols
    pos = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
    return (keys[pos] == query) & (cols >= 0)
