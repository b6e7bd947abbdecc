"""Original item ids <-> the int64 ids stored in a FAISS index.

The FAISS index (an ``IndexIDMap2``) returns vocabulary indices, not row numbers: item ``i`` of
``item_embeddings.parquet`` is vocabulary index ``i + 2`` (0 = padding and 1 = out-of-vocabulary are never in the
index, contracts.md "Ids and indices"). This map turns those indices back into the original string ids at the
boundary, and original ids (history, exclusions) into indices, both vectorized. It is saved beside the index as
``ids.parquet`` (columns ``index`` int64, ``item_id`` string).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval.artifacts import PathLike
from retrieval.errors import InputError

FIRST_ITEM_INDEX = 2  # vocabulary indices 0 (padding) and 1 (out-of-vocabulary) are never items


class IdMap:
    """A one-to-one map between original item ids (str) and non-negative int64 indices."""

    def __init__(self, item_ids: Sequence[str], indices: Optional[np.ndarray] = None):
        item_ids = np.asarray(item_ids, dtype=object).astype(str).astype(object)
        if indices is None:
            indices = np.arange(len(item_ids), dtype=np.int64) + FIRST_ITEM_INDEX
        indices = np.asarray(indices, dtype=np.int64)
        if indices.shape != item_ids.shape or indices.ndim != 1:
            raise InputError(f"need one index per item id, got {indices.shape} indices for {item_ids.shape} ids")
        if len(indices) and indices.min() < 0:
            raise InputError("item indices must be non-negative")
        if len(np.unique(indices)) != len(indices):
            raise InputError("item indices must be unique")
        self._positions = pd.Index(item_ids)
        if not self._positions.is_unique:
            dup = self._positions[self._positions.duplicated()][0]
            raise InputError(f"item ids must be unique, {dup!r} appears more than once", column="item_id")
        self.item_ids = item_ids
        self.indices = indices
        # ids_of() gathers from this table; its last entry "" answers index -1 (FAISS's "no result").
        size = int(indices.max()) + 2 if len(indices) else 1
        self._id_table = np.full(size, "", dtype=object)
        self._id_table[indices] = item_ids

    def __len__(self) -> int:
        return len(self.item_ids)

    def ids_of(self, indices: np.ndarray) -> np.ndarray:
        """Original ids of ``indices`` (any shape); -1 and indices of no item give ""."""
        indices = np.asarray(indices, dtype=np.int64)
        inside = (indices >= 0) & (indices < len(self._id_table) - 1)
        return self._id_table[np.where(inside, indices, -1)]

    def positions_of(self, item_ids: Sequence[str]) -> np.ndarray:
        """Rows of ``item_ids`` (1-D) in this map (= rows of the embeddings file), -1 for ids not in it."""
        item_ids = np.asarray(item_ids, dtype=object).reshape(-1)
        if not len(item_ids):
            return np.zeros(0, np.int64)
        return self._positions.get_indexer(item_ids.astype(str)).astype(np.int64)

    def indices_of(self, item_ids: Sequence[str]) -> np.ndarray:
        """Indices of ``item_ids`` (1-D), -1 for ids not in the map (unknown items, "" padding)."""
        positions = self.positions_of(item_ids)
        return np.where(positions >= 0, self.indices[positions], -1)

    def save(self, path: PathLike) -> None:
        """Writes ``index`` (int64) and ``item_id`` (string) columns to a Parquet file (not atomic: the caller writes
        the whole index directory atomically)."""
        pq.write_table(pa.table({"index": pa.array(self.indices, pa.int64()),
                                 "item_id": pa.array(self.item_ids.astype(str), pa.string())}), path)

    @classmethod
    def load(cls, path: PathLike) -> IdMap:
        try:
            table = pq.read_table(path, columns=["index", "item_id"])
        except (OSError, pa.ArrowInvalid, KeyError) as e:
            raise InputError(f"cannot read the index id map: {e}", path=str(path)) from None
        return cls(table.column("item_id").to_numpy(zero_copy_only=False),
                   table.column("index").to_numpy(zero_copy_only=False))
