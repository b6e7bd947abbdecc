"""Users' training histories, most recent first: the one rule every consumer of a run applies (training's
validation, evaluation, batch recommendation, the index self-check and serving).

"Most recent first" is the ``timestamp`` column descending, later rows of the table first on ties, or the table's row
order alone without timestamps (:func:`recent_first_order`). :func:`item_ids_recent_first` gives item ids per user
(evaluation); :class:`UserHistories` holds them in compressed sparse rows of item indices (serving, indexing).

Serving needs them three ways: as the default user-tower input of a known user, as the items to exclude from that
user's candidates ("seen excluded", the evaluation protocol's rule), and, summed over users, as the popularity
counts of the cold-start fallback. Items are stored as vocabulary indices (through the index's ``IdMap``); training
rows whose item is not in the catalogue are dropped.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

import numpy as np
import pandas as pd

from retrieval.artifacts import PathLike
from retrieval.data import readers, validate
from retrieval.errors import InputError


class ItemIndexer(Protocol):
    """Maps item ids to the indices a consumer stores (e.g. ``retrieval.index.IdMap``); -1 for unknown ids."""

    def indices_of(self, ids: np.ndarray) -> np.ndarray: ...


def recent_first_order(codes: np.ndarray, recency: np.ndarray) -> np.ndarray:
    """Permutation that groups rows by ``codes`` (ascending) and puts each group's newest first (``recency``
    descending), later rows first on ties."""
    return np.lexsort((-np.arange(len(codes)), -np.asarray(recency), codes))


def item_ids_recent_first(train: pd.DataFrame, user_ids: Sequence[str]) -> list[np.ndarray]:
    """Each of ``user_ids``' training item ids in ``train`` (canonical columns), most recent first; empty for users
    without training rows."""
    users = pd.Index(np.asarray(user_ids, dtype=object).astype(str))
    rows = users.get_indexer(train["user_id"].astype(str).to_numpy(dtype=object))
    keep = rows >= 0
    recency = train["timestamp"].to_numpy() if "timestamp" in train else np.zeros(len(train), np.int64)
    order = recent_first_order(rows[keep], recency[keep])
    items = train["item_id"].astype(str).to_numpy(dtype=object)[keep][order]
    bounds = np.cumsum(np.bincount(rows[keep], minlength=len(users)))[:-1]
    return np.split(items, bounds)


class UserHistories:
    """``items[offsets[r]:offsets[r + 1]]`` are the item indices of user ``user_ids[r]``, most recent first."""

    def __init__(self, user_ids: np.ndarray, offsets: np.ndarray, items: np.ndarray):
        self.user_ids, self.offsets, self.items = user_ids, offsets, items
        self._rows = pd.Index(user_ids)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, id_map: ItemIndexer) -> UserHistories:
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
        order = recent_first_order(codes, recency)
        offsets = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(user_ids)))]).astype(np.int64)
        return cls(user_ids.astype(object), offsets, items[order])

    @classmethod
    def from_parquet(cls, path: PathLike, id_map: ItemIndexer, user_ids: Optional[Sequence[str]] = None) -> UserHistories:
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
