"""TF-IDF content vectors of items from their coded features, and their low-rank projection.

An item's content vector is the TF-IDF vector of its coded features: every categorical value, multi value and text
token a term (code 0, missing, is none), and every numeric feature's quantile bin a term (below); each feature's
block is L2-normalised so that every feature weighs the same, then the row (the classic content-based profile's item
side, Lops et al. 2011, "Content-based recommender systems", section 3.1). Features are laid out in sorted name
order, a coded feature's block one column per code 1.. max code, a numeric one one column per bin.

Numeric features (standardised values, ``retrieval.data.features``) are cut at the quantiles of the catalogue's
values into at most :data:`NUMERIC_BINS` bins, and the bin is the term, with its IDF like any code: an item shares the
term with the tenth of the catalogue nearest in value. Taken as it is, a one-column block normalised to unit length
is the value's sign, which every item on the same side of the mean shares with the weight of a whole feature (with
a mean year of 1950, 1951 would match 1999 fully and 1949 not at all). A value of exactly 0 (missing, or the mean
itself) is no term, like code 0. A numeric feature of k columns is cut column by column, k terms per row. Edges and
comparisons are float32, the values' type, so the model's graph (``ContentProfile.encode``) bins exactly alike.

The cold-item evaluation's content baseline scores these vectors (``retrieval.evaluation.cold_items``); the
two-tower model's content-profile coordinates (``retrieval.models.content_profile``) carry their projection on the
top right singular vectors of the catalogue's matrix, so the exported vectors stay narrow. Written by hand: none of
the dependencies computes TF-IDF over coded feature tables.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds

NUMERIC_BINS = 10  # deciles: a term shared with a tenth of the catalogue, as specific as a common genre


@dataclasses.dataclass(frozen=True)
class Block:
    """One feature's columns: ``width`` columns from ``offset``; ``idf`` [width + 1] per code (entry 0 unused). A
    ``numeric`` feature's codes are its bins (``numeric_codes``): ``edges`` holds each column's inner bin edges."""

    name: str
    numeric: bool
    offset: int
    width: int
    idf: np.ndarray
    edges: Optional[tuple[np.ndarray, ...]] = None


def _codes(table: np.ndarray) -> np.ndarray:
    return np.asarray(table).reshape(len(table), -1)


def bin_edges(values: np.ndarray, bins: int = NUMERIC_BINS) -> tuple[np.ndarray, ...]:
    """Per column of ``values`` ([n] or [n, k], standardised), the distinct inner edges of ``bins`` equal-count bins
    of its non-zero values (the quantiles at 1/bins .. (bins-1)/bins): at most ``bins - 1`` edges, none for a column
    without non-zero values."""
    columns = _codes(values).astype(np.float32).T
    return tuple(np.unique(np.quantile(column[column != 0], np.arange(1, bins) / bins).astype(np.float32))
                 if np.any(column != 0) else np.zeros(0, np.float32) for column in columns)


def numeric_codes(values: np.ndarray, edges: Sequence[np.ndarray]) -> np.ndarray:
    """Codes [n, k] of numeric ``values`` ([n] or [n, k]) binned at ``edges`` (``bin_edges``): column j's bin b
    (0-based, by its place among the edges) is code ``1 + b + sum of the earlier columns' bin counts``; a value of
    exactly 0 is code 0 (no term)."""
    columns = _codes(values).astype(np.float32)
    codes, first = np.zeros(columns.shape, np.int64), 1
    for j, column_edges in enumerate(edges):
        codes[:, j] = np.where(columns[:, j] != 0, first + np.searchsorted(column_edges, columns[:, j], "right"), 0)
        first += len(column_edges) + 1
    return codes


def smoothed_idf(codes: np.ndarray, n_codes: Optional[int] = None) -> np.ndarray:
    """``log((1 + n) / (1 + df)) + 1`` per code (scikit-learn's smoothed IDF) over the rows of ``codes`` [n, M]
    (0 = missing; entry 0 of the result is 0): ``df`` counts the rows holding a code, once per row. ``n_codes``:
    the length of the result (default: the largest code + 1)."""
    codes = _codes(codes)
    n_codes = int(codes.max(initial=0)) + 1 if n_codes is None else int(n_codes)
    rows = np.repeat(np.arange(len(codes)), codes.shape[1])
    flat = codes.ravel()
    present = np.unique(rows[flat > 0] * n_codes + flat[flat > 0]) % n_codes
    documents = np.bincount(present, minlength=n_codes)
    idf = np.log((1.0 + len(codes)) / (1.0 + documents)) + 1.0
    idf[0] = 0.0
    return idf


def layout(arrays: Mapping[str, np.ndarray]) -> list[Block]:
    """The column blocks of ``content_vectors(arrays)``: float arrays are numeric (binned at their quantiles),
    integer arrays coded."""
    blocks, offset = [], 0
    for name in sorted(arrays):
        table = np.asarray(arrays[name])
        if np.issubdtype(table.dtype, np.floating):
            edges = bin_edges(table)
            width = sum(len(column_edges) + 1 for column_edges in edges)
            block = Block(name, True, offset, width, smoothed_idf(numeric_codes(table, edges), width + 1), edges)
        else:
            idf = smoothed_idf(table)
            block = Block(name, False, offset, len(idf) - 1, idf)
        blocks.append(block)
        offset += block.width
    return blocks


def term_count(arrays: Mapping[str, np.ndarray]) -> int:
    """The width of ``content_vectors(arrays)``: its terms, every block's columns."""
    return sum(block.width for block in layout(arrays))


def normalize_rows(matrix: sp.spmatrix) -> sp.csr_matrix:
    """Rows scaled to unit L2 norm (zero rows stay zero)."""
    matrix = sp.csr_matrix(matrix)
    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ matrix)


def content_vectors(arrays: Mapping[str, np.ndarray], blocks: Optional[list[Block]] = None) -> sp.csr_matrix:
    """[n, terms] content vectors (module docstring) of per-row coded feature arrays (``features.feature_arrays``:
    integer codes, float numeric values); ``blocks`` (default ``layout(arrays)``) fixes the columns, the IDF and the
    numeric bins (so new items are vectors of the catalogue's terms)."""
    blocks = layout(arrays) if blocks is None else blocks
    parts = []
    for block in blocks:
        table = numeric_codes(arrays[block.name], block.edges) if block.numeric else _codes(arrays[block.name])
        rows = np.repeat(np.arange(len(table)), table.shape[1])
        flat = table.ravel()
        kept = (flat > 0) & (flat <= block.width)
        counts = sp.csr_matrix((np.ones(int(kept.sum())), (rows[kept], flat[kept] - 1)), shape=(len(table), block.width))
        parts.append(normalize_rows(counts @ sp.diags(block.idf[1:])))
    return normalize_rows(sp.hstack(parts, format="csr")) if parts else sp.csr_matrix((0, 0))


def projection(vectors: sp.spmatrix, dim: int, seed: int = 0) -> np.ndarray:
    """[terms, k] orthonormal columns: the top ``dim`` right singular vectors of ``vectors`` (a truncated SVD,
    latent semantic indexing), or the identity when there are at most ``dim`` terms (k = terms: dot products are kept
    exactly). Projected vectors ``vectors @ P`` keep their dot products as far as rank ``dim`` allows."""
    n_rows, n_terms = vectors.shape
    if n_terms <= dim:
        return np.eye(n_terms)
    if min(n_rows, n_terms) <= dim + 1:  # ARPACK needs k < min(shape); a dense SVD is cheap at such sizes
        _, _, vt = np.linalg.svd(sp.csr_matrix(vectors).toarray(), full_matrices=False)
        return vt[:dim].T
    v0 = np.random.default_rng(seed).standard_normal(min(n_rows, n_terms))
    _, _, vt = svds(sp.csr_matrix(vectors, dtype=np.float64), k=dim, v0=v0)
    return vt.T
