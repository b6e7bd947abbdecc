"""String id <-> contiguous index mapping with occurrence counts (the ids-and-indices contract every layer relies on).

Index 0 is padding (``<pad>``), 1 is out-of-vocabulary (``<oov>``), known ids start at 2, ordered by decreasing count
(ties by id) so that frequent ids get small indices: the log-uniform (Zipfian) candidate sampler of
``tf.random.log_uniform_candidate_sampler`` assumes exactly that order (Jean et al. 2015). Counts are kept because
popularity baselines, the unigram noise distribution of SGNS and static in-batch ``log Q`` corrections all use them;
build a vocabulary from the training split only so none of them sees test interactions.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval.artifacts import atomic_path
from retrieval.data import validate
from retrieval.errors import InputError

PAD, OOV = "<pad>", "<oov>"
PAD_INDEX, OOV_INDEX = 0, 1
NUM_RESERVED = 2


@dataclasses.dataclass(frozen=True, eq=False)
class Vocabulary:
    """Ids (``ids[0] = "<pad>"``, ``ids[1] = "<oov>"``) and their training counts (0 for the reserved rows)."""

    ids: np.ndarray
    counts: np.ndarray

    def __post_init__(self):
        ids = np.asarray(self.ids, dtype=object)
        counts = np.asarray(self.counts, dtype=np.int64)
        if len(ids) < NUM_RESERVED or ids[0] != PAD or ids[1] != OOV or len(ids) != len(counts):
            raise ValueError("a Vocabulary starts with <pad>, <oov> and has one count per id")
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "_index", pd.Index(ids[NUM_RESERVED:]))

    @classmethod
    def from_ids(cls, ids: Iterable[str], min_count: int = 1) -> Vocabulary:
        """Counts ``ids`` (one entry per interaction) and keeps those seen at least ``min_count`` times."""
        return cls.from_counts(pd.Series(np.asarray(ids, dtype=object)).value_counts(sort=False), min_count)

    @classmethod
    def from_counts(cls, counts: pd.Series, min_count: int = 1) -> Vocabulary:
        """The vocabulary of ``counts`` (occurrences indexed by id, ids unique), e.g. summed over the shards of a log
        that does not fit in memory; the same as :meth:`from_ids` on the ids those counts describe."""
        counts = counts[counts >= min_count]
        order = np.lexsort((counts.index.to_numpy(dtype=object).astype(str), -counts.to_numpy()))
        return cls(np.concatenate([[PAD, OOV], counts.index.to_numpy(dtype=object)[order]]),
                   np.concatenate([[0, 0], counts.to_numpy()[order]]))

    def with_catalogue(self, catalogue_ids: Iterable[str], counts: Optional[pd.Series] = None) -> Vocabulary:
        """This vocabulary plus the catalogue's ids it lacks, appended after its own.

        ``counts`` (training interactions by id, the counts this vocabulary was built from *before* ``min_count``)
        gives an added id its own count: an item that ``min_count`` left out but the catalogue lists keeps its
        clicks, so it stays warm (its training interactions stay in training, so evaluation must not count it
        among the items nobody clicked). Those ids come first, by decreasing count (ties by id; all of them are
        below ``min_count``, so the frequency order holds), then the ids without any training interaction ("cold"),
        count 0, in id order. Without ``counts`` every added id is cold."""
        ids = pd.Index(pd.unique(np.asarray(catalogue_ids, dtype=object)))
        added = ids[~ids.isin(self.ids)].to_numpy(dtype=object).astype(str).astype(object)
        found = (np.zeros(len(added), np.int64) if counts is None
                 else counts.reindex(pd.Index(added)).fillna(0).to_numpy(np.int64))
        order = np.lexsort((added.astype(str), -found))
        return Vocabulary(np.concatenate([self.ids, added[order]]), np.concatenate([self.counts, found[order]]))

    @property
    def warm(self) -> np.ndarray:
        """[V] bool: which indices are items with training interactions (count > 0; the reserved rows are not)."""
        return self.counts > 0

    def stable_against(self, previous: Vocabulary) -> Vocabulary:
        """This vocabulary reordered for a warm start from ``previous``: ids ``previous`` knew first, in their old
        order (so their indices move as little as possible), then new ids in this vocabulary's order (decreasing
        count); the counts stay this vocabulary's."""
        known = self.ids[NUM_RESERVED:]
        old_rank = pd.Index(previous.ids).get_indexer(known)
        order = np.lexsort((np.arange(len(known)), np.where(old_rank >= 0, old_rank, np.iinfo(np.int64).max)))
        keep = np.concatenate([np.arange(NUM_RESERVED), NUM_RESERVED + order])
        return Vocabulary(self.ids[keep], self.counts[keep])

    @property
    def size(self) -> int:
        """Number of indices, reserved ones included (the embedding table size)."""
        return len(self.ids)

    def __len__(self) -> int:
        return self.size

    def lookup(self, ids: Iterable[str]) -> np.ndarray:
        """Maps ids to indices (int64); unknown ids map to 1 (OOV)."""
        found = self._index.get_indexer(pd.Index(np.asarray(ids, dtype=object)))
        return np.where(found < 0, OOV_INDEX, found + NUM_RESERVED).astype(np.int64)

    def to_ids(self, indices: Iterable[int]) -> np.ndarray:
        """Maps indices back to ids (0 -> ``<pad>``, 1 -> ``<oov>``)."""
        return self.ids[np.asarray(indices, dtype=np.int64)]

    def save(self, path: str | os.PathLike) -> None:
        """Writes a readable Parquet table ``index, id, count`` (reserved rows included), atomically."""
        table = pa.table({"index": pa.array(np.arange(self.size), pa.int64()),
                          "id": pa.array(self.ids.tolist(), pa.string()),
                          "count": pa.array(self.counts, pa.int64())})
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocabulary:
        """Reads a vocabulary written by :meth:`save`."""
        with validate.reading(path):
            table = pq.read_table(path, columns=["index", "id", "count"]).to_pandas()
        if not np.array_equal(table["index"].to_numpy(), np.arange(len(table))):
            raise InputError("vocabulary rows are not indices 0..n-1 in order", path=str(path), column="index")
        try:
            return cls(table["id"].to_numpy(dtype=object), table["count"].to_numpy())
        except ValueError as e:
            raise InputError(str(e), path=str(path)) from None
