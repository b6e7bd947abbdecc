"""Item vectors read in chunks: an in-memory array, or item-embedding Parquet file(s) read in record batches.

A catalogue of 10M x 64 float32 vectors is 2.56 GB; reading ``item_embeddings.parquet`` whole (an Arrow table, then a
numpy copy, then a normalised copy for ``cosine``) needs several times that. Index building therefore reads its
vectors through a ``VectorSource``: ``chunks`` yields consecutive row blocks of bounded size, ``take`` gathers a sorted
sample of rows (the quantizer's training set, self-check queries) in one pass. ``ParquetVectors`` reads the
``embedding`` column (list<float32>, the export contract's) of one file or of several shard files in order (a
directory of ``*.parquet`` files standing in for one file), ``pyarrow.parquet.ParquetFile.iter_batches`` at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval.artifacts import PathLike
from retrieval.errors import InputError
from retrieval.index.idmap import id_array

CHUNK_ROWS = 65_536  # 16 MiB of 64-d float32 per chunk


class VectorSource:
    """``count`` x ``dimension`` float32 vectors, read as consecutive chunks (interface; see the module docstring)."""

    count: int
    dimension: int

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        """Consecutive float32 blocks [<= rows, d] covering all vectors in order."""
        raise NotImplementedError

    def take(self, rows: np.ndarray) -> np.ndarray:
        """Vectors of the sorted, unique row numbers ``rows``, [len(rows), d], in one pass over ``chunks``."""
        rows = np.asarray(rows, dtype=np.int64)
        out, start, filled = np.empty([len(rows), self.dimension], np.float32), 0, 0
        for chunk in self.chunks():
            end = start + len(chunk)
            wanted = rows[filled:np.searchsorted(rows, end)]
            out[filled:filled + len(wanted)] = chunk[wanted - start]
            filled, start = filled + len(wanted), end
            if filled == len(rows):
                break
        return out

    def read_all(self) -> np.ndarray:
        """All vectors [count, d] in one preallocated array (peak memory: the array plus one chunk)."""
        out, start = np.empty([self.count, self.dimension], np.float32), 0
        for chunk in self.chunks():
            out[start:start + len(chunk)] = chunk
            start += len(chunk)
        return out


class ArrayVectors(VectorSource):
    """An in-memory [N, d] array as a ``VectorSource`` (chunks are views)."""

    def __init__(self, vectors: np.ndarray):
        self.vectors = vectors
        self.count, self.dimension = int(vectors.shape[0]), int(vectors.shape[1])

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        for start in range(0, self.count, rows):
            yield self.vectors[start:start + rows]

    def take(self, rows: np.ndarray) -> np.ndarray:
        return self.vectors[np.asarray(rows, dtype=np.int64)]

    def read_all(self) -> np.ndarray:
        return self.vectors


def shard_files(path: PathLike | Sequence[PathLike]) -> list[Path]:
    """The Parquet file(s) of ``path``: a file, a directory of ``*.parquet`` shards (sorted by name), or a list."""
    if isinstance(path, (str, Path)):
        path = Path(path)
        files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    else:
        files = [Path(p) for p in path]
    if not files:
        raise InputError("no item-embedding shard files", path=str(path))
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise InputError(f"item-embedding file(s) not found: {', '.join(missing[:3])}")
    return files


class ParquetVectors(VectorSource):
    """A vector column (``embedding`` unless named) of item-embedding Parquet file(s), read in record batches (module
    docstring)."""

    def __init__(self, path: Union[PathLike, Sequence[PathLike]], column: str = "embedding"):
        self.files, self.column = shard_files(path), column
        try:
            self._rows = [pq.ParquetFile(f).metadata.num_rows for f in self.files]
            first = next((f for f, n in zip(self.files, self._rows, strict=True) if n), self.files[0])
            head = next(pq.ParquetFile(first).iter_batches(batch_size=1, columns=[column]), None)
        except (OSError, pa.ArrowInvalid, KeyError) as e:
            raise InputError(f"cannot read item embeddings: {e}", path=str(self.files[0])) from None
        self.count = int(sum(self._rows))
        self.dimension = 0 if head is None or not len(head) else len(head.column(0)[0])

    def item_ids(self) -> np.ndarray:
        """The ``item_id`` column of all shards, in order, as str: a ``StringDType`` array read in record batches
        (``idmap.id_array``), no Python object per id."""
        try:
            return id_array((batch.column(0) for path in self.files
                             for batch in pq.ParquetFile(path).iter_batches(CHUNK_ROWS, columns=["item_id"])),
                            self.count)
        except (OSError, pa.ArrowInvalid, KeyError) as e:
            raise InputError(f"cannot read item ids: {e}", path=str(self.files[0])) from None

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        for path in self.files:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=rows, columns=[self.column]):
                lists = batch.column(0)
                lengths = lists.value_lengths().to_numpy(zero_copy_only=False)
                if len(lengths) and np.any(lengths != self.dimension):
                    raise InputError(f"embeddings have different lengths (expected {self.dimension})", path=str(path),
                                     column=self.column)
                values = lists.flatten().to_numpy(zero_copy_only=False)
                yield values.astype(np.float32, copy=False).reshape(len(lengths), self.dimension)


def as_source(vectors: Union[np.ndarray, VectorSource]) -> VectorSource:
    """``vectors`` as a ``VectorSource`` (arrays are checked to be 2-D float32-convertible and wrapped)."""
    if isinstance(vectors, VectorSource):
        return vectors
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    if vectors.ndim != 2:
        raise InputError(f"vectors must be 2-D [N, d], got shape {vectors.shape}")
    return ArrayVectors(vectors)
