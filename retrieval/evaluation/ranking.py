"""Full-corpus top-k ranking with the user's training items excluded, exact by default, in bounded memory.

Users are scored in blocks: a block's score matrix [b, V] (``b * V * 4`` bytes, at most ``max_block_bytes``) comes
from a *scorer* (a callable mapping user rows to scores: the model's dot product, or a baseline), the excluded
entries are set to -inf in place and FAISS's k-selection heaps (``faiss.float_minheap_array_t``: one bounded heap per
user, filled in one C++ pass over the block, parallel over users) keep the best k, ties to the lower item index. On
two cores this takes a twentieth of the time of ``tf.math.top_k`` over the same block (1,638 users x 41k items, k 20:
0.04 s against 0.88 s), which dominated the ranking: RP3beta's recall@20 of 5,000 users over Gowalla's 41k items takes
1 s instead of 3.9 s, half of it the scores (benchmarks/JOURNAL.md, "Issue 47: the exact top-k on FAISS's heaps"). Item
indices are vocabulary indices: 0 (padding) and 1 (OOV) are never recommended. A slot that no rankable item could
fill holds index -1 and score -inf.

Approximate search (:func:`ann_top_k`) asks an index for ``k + (most excluded items in the block) + 2`` neighbours,
drops the excluded ones and keeps the first k, so the result is comparable with :func:`top_k`;
:func:`overlap_at_k` measures how much of the exact top-k the approximate search finds.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import faiss
import numpy as np
import tensorflow as tf
from absl import logging

import retrieval  # noqa: F401  (contract; the package __init__ already set TF_USE_LEGACY_KERAS)
from retrieval.data.vocab import OOV_INDEX, PAD_INDEX
from retrieval.evaluation import csr as csr_lib

NEVER_RECOMMENDED = (PAD_INDEX, OOV_INDEX)
Scorer = Callable[[np.ndarray], Union[np.ndarray, tf.Tensor]]
"""Maps user rows [b] (int64) to a float32 score matrix [b, V] over vocabulary item indices (NumPy or TF): a new
matrix per call, since :func:`top_k` overwrites it (its excluded entries become -inf)."""


def dot_scorer(user_vectors: np.ndarray, item_vectors: np.ndarray,
               unavailable: Optional[np.ndarray] = None) -> Scorer:
    """Scores ``user_vectors[rows] @ item_vectors.T`` (inner product; normalize both first for cosine).

    ``unavailable``: item indices this model cannot score (e.g. absent from its catalogue); they get -inf.
    """
    user_vectors = np.ascontiguousarray(user_vectors, dtype=np.float32)
    items = tf.constant(np.asarray(item_vectors, dtype=np.float32))
    if unavailable is None or not len(unavailable):
        return lambda rows: tf.matmul(user_vectors[rows], items, transpose_b=True)
    bias = np.zeros(len(item_vectors), np.float32)
    bias[np.asarray(unavailable)] = -np.inf
    return lambda rows: tf.matmul(user_vectors[rows], items, transpose_b=True) + bias


def _masked_top_k(scores: np.ndarray, rows: np.ndarray, items: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k values and item indices of every row of ``scores`` (float32 [b, V], C order; overwritten: its (``rows``,
    ``items``) entries become -inf), best first, ties to the lower index; -inf and -1 where fewer than k are finite.

    FAISS's heaps order by value, then by id (of equal values the higher id ranks first), so the items go in as
    ids ``V - 1 - index`` (one id row shared by every user: ``id_stride`` 0) and come out as indices again."""
    scores[rows, items] = -np.inf
    n_items = scores.shape[1]
    values = np.empty((len(scores), k), np.float32)
    ids = np.empty((len(scores), k), np.int64)
    heaps = faiss.float_minheap_array_t()
    heaps.k, heaps.nh = k, len(scores)
    heaps.val, heaps.ids = faiss.swig_ptr(values), faiss.swig_ptr(ids)
    heaps.heapify()  # every slot empty: id -1 and the lowest float
    reversed_ids = np.arange(n_items - 1, -1, -1, dtype=np.int64)
    heaps.addn_with_ids(n_items, faiss.swig_ptr(scores), faiss.swig_ptr(reversed_ids), 0)
    heaps.reorder()
    empty = ids < 0
    values[empty] = -np.inf
    return values, np.where(empty, -1, n_items - 1 - ids)


def block_size_for(n_items: int, max_block_bytes: int) -> int:
    """Users per block so that one float32 score block [b, n_items] stays within ``max_block_bytes``."""
    return max(1, min(8192, max_block_bytes // (4 * max(n_items, 1))))


def top_k(scorer: Scorer, users: Union[int, np.ndarray], n_items: int, k: int,
          exclude: Optional[csr_lib.Csr] = None, never: Sequence[int] = NEVER_RECOMMENDED,
          max_block_bytes: int = 256 << 20) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k item indices and scores for every user, best first.

    Args:
      scorer: user rows -> float32 scores [b, n_items].
      users: the number of users (rows 0..users-1) or the user rows to rank.
      n_items: vocabulary size V (item indices 0..V-1).
      k: list length.
      exclude: per-user items that must not be recommended (e.g. training items), rows aligned with user rows.
      never: item indices no user may get (padding and OOV).
      max_block_bytes: memory bound of one score block.

    Returns:
      (indices int64 [U, k], scores float32 [U, k]); -1 / -inf where fewer than k items are rankable.
    """
    rows = np.arange(users, dtype=np.int64) if np.isscalar(users) else np.asarray(users, dtype=np.int64)
    block = block_size_for(n_items, max_block_bytes)
    width = min(k, n_items)  # at most V items to rank; the rest stays empty
    out_idx = np.full((len(rows), k), -1, dtype=np.int64)
    out_val = np.full((len(rows), k), -np.inf, dtype=np.float32)
    never = np.asarray(never, dtype=np.int64)
    for start in range(0, len(rows), block):
        block_rows = rows[start:start + block]
        scores = scorer(block_rows)
        if tuple(scores.shape) != (len(block_rows), n_items):
            raise ValueError(f"scorer returned {tuple(scores.shape)}, expected {(len(block_rows), n_items)}")
        excluded = csr_lib.take(exclude, block_rows) if exclude is not None else csr_lib.empty(len(block_rows))
        local, cols = csr_lib.to_pairs(excluded)
        scores = np.array(scores, dtype=np.float32, order="C", copy=None)
        if not scores.flags.writeable:  # a TensorFlow tensor's buffer
            scores = scores.copy()
        scores[:, never] = -np.inf
        values, indices = _masked_top_k(scores, local, cols, width)
        out_idx[start:start + block, :width], out_val[start:start + block, :width] = indices, values
    logging.debug("ranked %d users over %d items in blocks of %d", len(rows), n_items, block)
    return out_idx, out_val


def ann_top_k(index, user_vectors: np.ndarray, k: int, exclude: Optional[csr_lib.Csr] = None,
              never: Sequence[int] = NEVER_RECOMMENDED, index_offset: int = 0,
              block_size: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Top-k through an approximate index (anything with ``.search(queries, n) -> (scores, ids)``, e.g. FAISS).

    The index returns its own ids (``-1`` for an empty slot); item index = id + ``index_offset``: 0 for the run's
    index (``retrieval.index`` stores vocabulary indices in an ``IndexIDMap2``), 2 for a plain index over the rows of
    ``item_embeddings.parquet`` (row r is vocabulary index r + 2). Excluded and never-recommended items are filtered
    out after the search, so each user asks for enough extra neighbours to fill k.
    """
    user_vectors = np.ascontiguousarray(user_vectors, dtype=np.float32)
    n_users = len(user_vectors)
    out_idx = np.full((n_users, k), -1, dtype=np.int64)
    out_val = np.full((n_users, k), -np.inf, dtype=np.float32)
    never = np.asarray(never, dtype=np.int64)
    for start in range(0, n_users, block_size):
        block_rows = np.arange(start, min(start + block_size, n_users))
        excluded = csr_lib.take(exclude, block_rows) if exclude is not None else csr_lib.empty(len(block_rows))
        n_extra = int(excluded.lengths.max(initial=0)) + len(never)
        scores, ids = index.search(user_vectors[block_rows], k + n_extra)
        ids = np.asarray(ids, dtype=np.int64)
        items = np.where(ids >= 0, ids + index_offset, -1)
        bad = (items < 0) | np.isin(items, never) | csr_lib.contains(excluded, np.arange(len(block_rows)), items)
        order = np.argsort(bad, axis=1, kind="stable")[:, :k]  # valid ones first, search order kept
        kept_items = np.take_along_axis(items, order, axis=1)
        kept_bad = np.take_along_axis(bad, order, axis=1)
        width = kept_items.shape[1]
        out_idx[block_rows, :width] = np.where(kept_bad, -1, kept_items)
        out_val[block_rows, :width] = np.where(kept_bad, -np.inf, np.take_along_axis(scores, order, axis=1))
    return out_idx, out_val


def overlap_at_k(approx: np.ndarray, exact: np.ndarray, ks: Sequence[int]) -> dict[str, np.ndarray]:
    """Per-user recall of approximate search against exact search: |approx top-k ∩ exact top-k| / |exact top-k|."""
    out = {}
    for k in ks:
        exact_k = exact[:, :k]
        found = csr_lib.contains(_rows_as_csr(exact_k), np.arange(len(exact_k)), approx[:, :k]).sum(axis=1)
        out[f"recall_vs_exact@{k}"] = found / np.maximum((exact_k >= 0).sum(axis=1), 1)
    return out


def _rows_as_csr(matrix: np.ndarray) -> csr_lib.Csr:
    rows = np.repeat(np.arange(len(matrix)), matrix.shape[1])
    flat = matrix.reshape(-1)
    keep = flat >= 0
    return csr_lib.from_pairs(rows[keep], flat[keep], len(matrix))
