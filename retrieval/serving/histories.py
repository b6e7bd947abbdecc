"""Users' training histories (``data/train.parquet``) in compressed sparse rows, most recent first.

Serving needs them three ways: as the default user-tower input of a known user, as the items to exclude from that
user's candidates ("seen excluded", the evaluation protocol's rule), and, summed over users, as the popularity
counts of the cold-start fallback. Items are stored as vocabulary indices (through the index's ``IdMap``); training
rows whose item is not in the catalogue are dropped.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pandas as pd

from retrieval.artifacts import PathLike
from retrieval.data import readers, validate
from retrieval.errors import InputError
from retrieval.index.idmap import IdMap


class UserHistories:
    """``items[offsets[r]:offsets[r + 1]]`` are the item indices of user ``user_ids[r]``, most recent first."""

    def __init__(self, user_ids: np.ndarray, offsets: np.ndarray, items: np.ndarray):
        self.user_ids, self.offsets, self.items = user_ids, offsets, items
        self._rows = pd.Index(user_ids)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, id_map: IdMap) -> UserHistories:
        """From canonical interactions (``user_id``, ``item_id``, optional ``timestamp``). Without timestamps, later
        rows count as more recent (the order of the file)."""
        missing = {"user_id", "item_id"} - set(frame.columns)
        if missing:
            raise InputError(f"training data lacks columns {sorted(missing)}")
        items = id_map.indices_of(frame["item_id"].to_numpy(dtype=object))
        known = items >= 0
        users = frame["user_id"].to_numpy(dtype=object)[known].astype(str)
        items = items[known]
        recency = (frame["timestamp"].to_numpy(dtype=np.int64)[known] if "timestamp" in frame.columns
                   else np.arange(len(items), dtype=np.int64))
        user_ids, codes = np.unique(users, return_inverse=True)
        order = np.lexsort((np.arange(len(items))[::-1], -recency, codes))  # user, newest first, later rows first
        offsets = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(user_ids)))]).astype(np.int64)
        return cls(user_ids.astype(object), offsets, items[order])

    @classmethod
    def from_parquet(cls, path: PathLike, id_map: IdMap, user_ids: Optional[Sequence[str]] = None) -> UserHistories:
        """From a run's ``data/train.parquet``; with ``user_ids``, only those users' rows are read (a filtered scan:
        memory holds the sample, not the table)."""
        try:
            return cls.from_frame(readers.read_run_interactions(path, user_ids), id_map)
        except InputError as e:
            raise validate.internal_artifact(e, path, "the training data") from None

    def __len__(self) -> int:
        return len(self.user_ids)

    def rows_of(self, user_ids: Sequence[str | None]) -> np.ndarray:
        """Row of each user, -1 for unknown users and None."""
        given = np.fromiter((u is not None for u in user_ids), dtype=bool, count=len(user_ids))
        users = np.array(["" if u is None else str(u) for u in user_ids], dtype=object)
        rows = self._rows.get_indexer(users) if len(users) else np.zeros(0, np.int64)
        return np.where(given, rows, -1).astype(np.int64)

    def history(self, row: int) -> np.ndarray:
        """Item indices of user row ``row`` (most recent first); empty for -1."""
        return self.items[self.offsets[row]:self.offsets[row + 1]] if row >= 0 else self.items[:0]

    def item_counts(self, size: int) -> np.ndarray:
        """Training interactions per item index, [size] int64 (popularity)."""
        return np.bincount(self.items, minlength=size).astype(np.int64)

    def sample(self, count: int, seed: int) -> np.ndarray:
        """A seeded sample of up to ``count`` user rows."""
        return np.random.default_rng(seed).permutation(len(self))[:count]
