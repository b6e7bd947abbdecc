"""Original item ids <-> the int64 ids stored in a FAISS index.

The FAISS index (an ``IndexIDMap2``) returns vocabulary indices, not row numbers: item ``i`` of
``item_embeddings.parquet`` is vocabulary index ``i + 2`` (0 = padding and 1 = out-of-vocabulary are never in the
index, see ``retrieval.data.vocab``). This map turns those indices back into the original string ids at the
boundary, and original ids (history, exclusions) into indices, both vectorized. It is saved beside the index as
``ids.parquet`` (columns ``index`` int64, ``item_id`` string).

Memory: a catalogue has up to tens of millions of ids, so none of them is held as a Python ``str`` object (~60 bytes
each, plus a pointer, plus a pandas hash table: ~250 MB per 1M ids). The ids are one numpy ``StringDType`` array (16
bytes per id of up to 15 bytes, longer ones add their length), index -> row is an int32 table, and id -> row is a
binary search in the sorted 64-bit hashes of the ids (12 bytes per id); about 45 bytes per id in all. Only chunks of
``CHUNK`` ids become Python strings at a time (to be hashed or read from Arrow).
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.dtypes import StringDType

from retrieval.artifacts import PathLike
from retrieval.errors import InputError

FIRST_ITEM_INDEX = 2  # vocabulary indices 0 (padding) and 1 (out-of-vocabulary) are never items
CHUNK = 65_536  # ids converted to Python strings at a time


def id_array(values: Union[Sequence, np.ndarray, pa.Array, pa.ChunkedArray, Iterable[pa.Array]],
             count: Optional[int] = None) -> np.ndarray:
    """``values`` as a numpy ``StringDType`` array; non-strings become ``str(value)`` (Arrow nulls "None").

    Arrow values (an array, or an iterable of arrays of ``count`` values in all, e.g. the columns of record batches
    read one at a time) are converted ``CHUNK`` values at a time: neither an object array of all ids nor, when read
    in batches, all of the Arrow data is ever held."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values, count = [values], len(values)
    if count is None:
        return values if isinstance(getattr(values, "dtype", None), StringDType) else \
            np.asarray(values, dtype=StringDType())
    out, start = np.empty(count, StringDType()), 0
    for part in values:
        for offset in range(0, len(part), CHUNK):
            piece = part.slice(offset, CHUNK)
            out[start:start + len(piece)] = piece.to_numpy(zero_copy_only=False)
            start += len(piece)
    return out


def _hashes(ids: np.ndarray) -> np.ndarray:
    """64-bit hashes (pandas' SipHash, fixed key) of the 1-D ``StringDType`` array ``ids``, ``CHUNK`` at a time."""
    out = np.empty(len(ids), np.uint64)
    for start in range(0, len(ids), CHUNK):
        out[start:start + CHUNK] = pd.util.hash_array(ids[start:start + CHUNK].astype(object), categorize=False)
    return out


class IdMap:
    """A one-to-one map between original item ids (str) and non-negative int64 indices.

    ``item_ids`` (``StringDType``) and ``indices`` (int64) are the pairs in row order, the rows of the embeddings file.
    """

    def __init__(self, item_ids: Union[Sequence[str], np.ndarray, pa.Array, pa.ChunkedArray],
                 indices: Optional[np.ndarray] = None):
        item_ids = id_array(item_ids)
        if indices is None:
            indices = np.arange(len(item_ids), dtype=np.int64) + FIRST_ITEM_INDEX
        indices = np.asarray(indices, dtype=np.int64)
        if indices.shape != item_ids.shape or indices.ndim != 1:
            raise InputError(f"need one index per item id, got {indices.shape} indices for {item_ids.shape} ids")
        if len(indices) and indices.min() < 0:
            raise InputError("item indices must be non-negative")
        row_type = np.int32 if len(indices) < 2 ** 31 else np.int64
        # ids_of() reads rows from this table; -1 marks indices of no item, and its last entry answers index -1
        # (FAISS's "no result"). Repeated indices leave fewer rows in it (a uniqueness check without a sorted copy).
        self._row_of_index = np.full(int(indices.max()) + 2 if len(indices) else 1, -1, row_type)
        self._row_of_index[indices] = np.arange(len(indices), dtype=row_type)
        if np.count_nonzero(self._row_of_index >= 0) != len(indices):
            raise InputError("item indices must be unique")
        self.item_ids = item_ids
        self.indices = indices
        hashes = _hashes(item_ids)
        order = np.argsort(hashes)
        self._sorted_hashes = hashes[order]
        del hashes
        self._hash_rows = order.astype(row_type)
        del order
        # Ids whose hash another id shares (almost never: ~N^2 / 2^65) are looked up in this dict instead.
        same = np.flatnonzero(self._sorted_hashes[1:] == self._sorted_hashes[:-1])
        self._shared: dict[str, int] = {}
        for row in np.sort(self._hash_rows[np.union1d(same, same + 1)]).tolist():
            item_id = str(item_ids[row])
            if item_id in self._shared:
                raise InputError(f"item ids must be unique, {item_id!r} appears more than once", column="item_id")
            self._shared[item_id] = row

    def __len__(self) -> int:
        return len(self.item_ids)

    def ids_of(self, indices: np.ndarray) -> np.ndarray:
        """Original ids of ``indices`` (any shape; an object array of str); -1 and indices of no item give ""."""
        indices = np.asarray(indices, dtype=np.int64)
        inside = (indices >= 0) & (indices < len(self._row_of_index) - 1)
        rows = self._row_of_index[np.where(inside, indices, -1)]
        found = rows >= 0
        out = np.full(rows.shape, "", dtype=object)
        out[found] = self.item_ids[rows[found]]
        return out

    def positions_of(self, item_ids: Sequence[str]) -> np.ndarray:
        """Rows of ``item_ids`` (1-D) in this map (= rows of the embeddings file), -1 for ids not in it."""
        queries = id_array(item_ids).reshape(-1)
        if not len(queries) or not len(self):
            return np.full(len(queries), -1, np.int64)
        hashes = _hashes(queries)
        slots = np.minimum(np.searchsorted(self._sorted_hashes, hashes), len(self) - 1)
        rows = self._hash_rows[slots].astype(np.int64)
        found = (self._sorted_hashes[slots] == hashes) & (self.item_ids[rows] == queries)
        positions = np.where(found, rows, -1)
        if self._shared:
            for i in np.flatnonzero(~found).tolist():
                positions[i] = self._shared.get(str(queries[i]), -1)
        return positions

    def indices_of(self, item_ids: Sequence[str]) -> np.ndarray:
        """Indices of ``item_ids`` (1-D), -1 for ids not in the map (unknown items, "" padding)."""
        positions = self.positions_of(item_ids)
        return np.where(positions >= 0, self.indices[positions], -1)

    def save(self, path: PathLike) -> None:
        """Writes ``index`` (int64) and ``item_id`` (string) columns to a Parquet file (not atomic: the caller writes
        the whole index directory atomically)."""
        pq.write_table(pa.table({"index": pa.array(self.indices, pa.int64()),
                                 "item_id": pa.array(self.item_ids, pa.string())}), path)

    @classmethod
    def load(cls, path: PathLike) -> IdMap:
        """Reads ``save``'s file, the ids in record batches (``id_array``)."""
        try:
            file = pq.ParquetFile(path)
            indices = file.read(columns=["index"]).column("index").to_numpy()
            item_ids = id_array((batch.column(0) for batch in file.iter_batches(CHUNK, columns=["item_id"])),
                                file.metadata.num_rows)
        except (OSError, pa.ArrowInvalid, KeyError) as e:
            raise InputError(f"cannot read the index id map: {e}", path=str(path)) from None
        return cls(item_ids, indices)
