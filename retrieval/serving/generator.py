"""``CandidateGenerator``: candidates for a user (or a history) from a published run, and similar items.

Which history feeds the user tower: the request's history (most recent first) when the tower can read any of its
ids, else the user's stored training history, else none. The tower reads the items of its training vocabulary (the
run's ``vocab/items.parquet``; for a catalogue refresh's run the trained run's, ``vocab/training_items.parquet``),
so histories are looked up there, not in the served catalogue: an item a refresh removed from the catalogue still
counts in the histories that hold it (stored or requested), as it did before the refresh, and an item a refresh
added is one the tower cannot read (its exported signature takes ids only, and it never trained on that id): it is
reported in ``unknown_history`` with the ids nobody knows and not counted in ``history_used``. A retrain reads it
through its row. A history none of whose items the tower reads is no history for the tower (the stored one is read
instead); when there is no stored one either but the history holds catalogue items and the run has an item-to-item
index (the cold head's, ``retrieval.index.similar``), the answer is the items nearest to the mean of those items'
vectors there (``history_source`` "similar", scores correlations): a user whose clicks are all new items gets items
like them, not the popular ones.

The history in effect, the request history's catalogue items (read or not: the user has them) and the request's
``exclude`` ids are never recommended: the index is asked for k + |excluded| neighbours and the excluded ones are
filtered out (vectorized), so k survive whenever the index finds enough.

Without any history (a user unknown to training, no readable request history) the answer is the most popular
training items (``fallback=True``), the same on every path (HTTP, this class, ``pipelines.recommend``): ``scores``
are NaN there, since no model scored them, and ``counts`` holds each item's training interactions, what they are
ranked by (:func:`most_popular`).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from absl import logging

from retrieval.artifacts import PathLike, RunPaths, read_json
from retrieval.data.histories import UserHistories
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import InputError
from retrieval.export import load_user_encoder
from retrieval.index import IdMap, ItemIndex
from retrieval.index.run_index import build_run_index
from retrieval.index.similar import Folded, similarity_vectors
from retrieval.index.source import ParquetVectors
from retrieval.serving.settings import resolve_run_dir


class UnknownItemError(InputError):
    """The item asked about is not in the run's catalogue (HTTP 404)."""


def most_popular(counts: np.ndarray) -> np.ndarray:
    """Catalogue positions by decreasing training count, ties by position: the fallback answer of every path."""
    return np.lexsort((np.arange(len(counts)), -np.asarray(counts)))


@dataclasses.dataclass(frozen=True)
class Candidates:
    """One answer: original ids and the model's scores (higher is better); under the popularity fallback the scores
    are NaN and ``counts`` holds the items' training interactions."""

    item_ids: np.ndarray
    scores: np.ndarray
    fallback: bool = False
    history_source: str = "none"  # "request", "stored", "similar" (the item-to-item view of new items) or "none"
    history_used: int = 0  # history items in effect that the user tower reads
    unknown_history: tuple = ()  # request history ids the user tower cannot read (ignored)
    counts: Optional[np.ndarray] = None  # under the fallback: training interactions of each item


class CandidateGenerator:
    """Answers ``recommend``/``recommend_batch``/``similar`` for one loaded run (immutable once built)."""

    def __init__(self, encoder, index: ItemIndex, histories: UserHistories, item_vectors: np.ndarray, manifest: dict,
                 run_dir: Optional[Path] = None, vocabulary: Optional[IdMap] = None,
                 similar_vectors: Optional[np.ndarray] = None):
        """``histories`` hold indices of ``vocabulary``, the items the user tower reads (module docstring; default:
        the catalogue, ``index.id_map``); ``similar_vectors``: the item-to-item index's own vectors of the items
        (``retrieval.index.similar.similarity_vectors``; default ``item_vectors``)."""
        self.encoder, self.index, self.histories, self.manifest = encoder, index, histories, manifest
        self.item_vectors, self.run_dir = item_vectors, run_dir
        self.similar_vectors = item_vectors if similar_vectors is None else similar_vectors
        self.vocabulary = index.id_map if vocabulary is None else vocabulary
        self.max_history = int(manifest.get("max_history") or 0) or None
        self.loaded_at = time.time()
        indices = index.id_map.indices
        self._key_base = int(indices.max()) + 1  # (row, item) pairs become row * _key_base + item
        self._to_catalogue = None  # the catalogue index of each vocabulary index (-1: none); None: the same indices
        if self.vocabulary is not index.id_map:
            self._to_catalogue = np.full(int(self.vocabulary.indices.max()) + 1, -1, np.int64)
            self._to_catalogue[self.vocabulary.indices] = index.id_map.indices_of(self.vocabulary.item_ids)
        trained = histories.item_counts(len(self._to_catalogue) if self._to_catalogue is not None else self._key_base)
        clicked = np.flatnonzero(trained)
        listed = self._catalogue_index(clicked)
        self._counts = np.zeros(self._key_base, np.int64)  # training interactions by catalogue index
        self._counts[listed[listed >= 0]] = trained[clicked[listed >= 0]]
        self._popular = indices[most_popular(self._counts[indices])]

    @classmethod
    def from_run(cls, run_dir: PathLike, mmap_index: bool = False) -> CandidateGenerator:
        """Loads a run (or the ``latest`` run of a model directory): user tower, ``index/`` (built in memory, with a
        warning, when the run has none), item embeddings, vocabulary, ``data/train.parquet``, ``manifest.json``.
        ``mmap_index``: the index file is memory-mapped (``ItemIndex.load(mmap=True)``), one copy in the page cache
        for every process serving the run."""
        paths = RunPaths(resolve_run_dir(run_dir))
        manifest = read_json(paths.manifest)
        encoder = load_user_encoder(paths.user_tower)
        source = ParquetVectors(paths.item_embeddings)  # one array filled batch by batch: no second copy
        item_ids, vectors = source.item_ids(), source.read_all()
        if paths.index.is_dir():
            index = ItemIndex.load(paths.index, mmap=mmap_index)
        else:
            logging.warning("run %s has no index/; building one in memory", paths.root)
            index = build_run_index(paths, save=False, encoder=encoder)
        if not np.array_equal(index.id_map.item_ids, item_ids) or not np.array_equal(
                index.id_map.indices, np.arange(len(item_ids)) + NUM_RESERVED):
            raise InputError("index/ids.parquet does not match item_embeddings.parquet; rebuild the index",
                             path=str(paths.index))
        if paths.item_vocab.is_file() and not np.array_equal(
                Vocabulary.load(paths.item_vocab).ids[NUM_RESERVED:].astype(str), item_ids):
            raise InputError("vocab/items.parquet does not match item_embeddings.parquet", path=str(paths.item_vocab))
        vocabulary = (IdMap(Vocabulary.load(paths.training_item_vocab).ids[NUM_RESERVED:])
                      if paths.training_item_vocab.is_file() else index.id_map)  # what the user tower reads
        histories = UserHistories.from_parquet(paths.train_data, vocabulary)
        similar = similarity_vectors(paths.item_embeddings) if index.similar is not None else None
        logging.info("loaded run %s (version %s): %d items, %d users", paths.root, manifest.get("version"),
                     len(index), len(histories))
        return cls(encoder, index, histories, vectors, manifest, paths.root, vocabulary,
                   similar.read_all() if isinstance(similar, Folded) else None)

    version = property(lambda self: str(self.manifest.get("version")))
    run_id = property(lambda self: str(self.manifest.get("run_id")))

    def info(self) -> dict:
        """What ``GET /v1/model`` reports (the run by its directory's name: no absolute path leaves the server)."""
        check = self.index.manifest.get("self_check", {})
        return {"version": self.version, "run_id": self.run_id, "model_type": self.manifest.get("model_type"),
                "metric": self.index.metric, "run": self.run_dir.name if self.run_dir else None, "items": len(self.index),
                "users": len(self.histories), "dimension": self.index.dimension, "max_history": self.max_history,
                "index": {"factory": self.index.factory, "search_params": self.index.search_params,
                          "recall": check.get("recall"), "recall_k": check.get("k")},
                "loaded_at": self.loaded_at}

    def recommend(self, user_id: Optional[str] = None, history: Optional[Sequence[str]] = None, k: int = 10,
                  exclude: Optional[Sequence[str]] = None, exclude_history: bool = True) -> Candidates:
        """Top-``k`` candidates for one user id and/or history (see the module docstring)."""
        return self.recommend_batch([user_id], [history], k, [exclude], exclude_history)[0]

    def recommend_batch(self, user_ids: Sequence[Optional[str]], histories: Optional[Sequence] = None, k: int = 10,
                        excludes: Optional[Sequence] = None, exclude_history: bool = True) -> list[Candidates]:
        """``recommend`` for many requests with one encoder call and one index search."""
        count = len(user_ids)
        histories = [None] * count if histories is None else list(histories)
        excludes = [None] * count if excludes is None else list(excludes)
        if not (len(histories) == len(excludes) == count):
            raise InputError(f"{count} user ids, {len(histories)} histories and {len(excludes)} exclude lists")
        if k <= 0:
            raise InputError(f"k must be positive, got {k}", field="k")
        readable = self._split_lookup(histories, self.vocabulary)
        listed = readable if self._to_catalogue is None else self._split_lookup(histories, self.index.id_map)
        rows = self.histories.rows_of(user_ids)
        used, sources, unknown, seen = [], [], [], []
        for i, (given, found) in enumerate(zip(histories, readable, strict=True)):
            known = found[found >= 0]
            stored = self.histories.history(rows[i])
            source = "request" if len(known) else ("stored" if len(stored) else "none")
            if source == "none" and self.index.similar is not None and (listed[i] >= 0).any():
                source = "similar"
            used.append(known if len(known) else stored)
            sources.append(source)
            given_ids = np.asarray([] if given is None else given, dtype=object)
            unknown.append(tuple(given_ids[found < 0].astype(str).tolist()))
            seen.append(np.concatenate([self.in_catalogue(used[i]), listed[i][listed[i] >= 0]]))
        banned = [np.concatenate([h if exclude_history else h[:0], e[e >= 0]])
                  for h, e in zip(seen, self._split_lookup(excludes, self.index.id_map), strict=True)]
        width = k + max((len(b) for b in banned), default=0)
        encoded = np.flatnonzero([len(h) > 0 for h in used])
        indices = np.tile(self._popular[:width], (count, 1))
        scores = np.zeros(indices.shape, np.float32)  # the fallback's: no model score (NaN in its answer)
        if len(encoded):
            neighbours = self._search_users([user_ids[i] for i in encoded], [used[i] for i in encoded], width)
            indices[encoded], scores[encoded] = neighbours.indices, neighbours.scores  # both min(width, N) wide
        similar = [i for i in range(count) if sources[i] == "similar"]
        if similar:
            positions = [self.index.id_map.positions_of(self.index.id_map.ids_of(listed[i][listed[i] >= 0]))
                         for i in similar]
            queries = np.stack([self.similar_vectors[p].mean(axis=0) for p in positions])
            neighbours = self.index.similar.search(queries, width)
            indices[similar], scores[similar] = neighbours.indices, neighbours.scores
        kept = self._first_k(indices, scores, banned, k)
        # The user tower reads the max_history most recent of them (_search_users): those are the ones in effect.
        return [self._answer(i, s, sources[r], min(len(used[r]), self.max_history), unknown[r])
                for r, (i, s) in enumerate(kept)]

    def _answer(self, indices: np.ndarray, scores: np.ndarray, source: str, used: int, unknown: tuple) -> Candidates:
        """One request's ``Candidates``; under the fallback (no history) NaN scores and the items' training counts."""
        if source != "none":
            return Candidates(self.index.id_map.ids_of(indices), scores, False, source, used, unknown)
        return Candidates(self.index.id_map.ids_of(indices), np.full(len(indices), np.nan, np.float32), True, source,
                          used, unknown, self._counts[indices])

    def in_catalogue(self, history: np.ndarray) -> np.ndarray:
        """The catalogue indices of a history's items (vocabulary indices), those the catalogue lacks left out: the
        items of a history that a user must not be recommended."""
        found = self._catalogue_index(history)
        return found[found >= 0]

    def _catalogue_index(self, items: np.ndarray) -> np.ndarray:
        """The catalogue index of each vocabulary index in ``items``, -1 where the catalogue lacks the item."""
        return items if self._to_catalogue is None else self._to_catalogue[items]

    def similar(self, item_id: str, k: int = 10) -> Candidates:
        """The ``k`` nearest items to ``item_id``'s own embedding, itself excluded: in the run's item-to-item index
        when it has one (``index/similar/``: warm and cold items compared by the correlation of their scores over
        users, the vectors folded, ``retrieval.index.similar``), else in its item index."""
        position = self.index.id_map.positions_of([item_id])[0]
        if position < 0:
            removed = self.vocabulary is not self.index.id_map and self.vocabulary.positions_of([item_id])[0] >= 0
            raise UnknownItemError(f"item {item_id!r} is not in the served catalogue (a catalogue refresh removed it; "
                                   "histories still read it)" if removed else f"unknown item {item_id!r}",
                                   field="item_id")
        index = self.index if self.index.similar is None else self.index.similar
        neighbours = index.search(self.similar_vectors[position], k + 1)
        (indices, scores), = self._first_k(neighbours.indices, neighbours.scores,
                                           [self.index.id_map.indices[[position]]], k)
        return Candidates(self.index.id_map.ids_of(indices), scores)

    @staticmethod
    def _split_lookup(lists: Sequence[Optional[Sequence[str]]], id_map: IdMap) -> list[np.ndarray]:
        """Indices in ``id_map`` (-1 unknown) of each id list (None = empty), with one vectorized lookup."""
        lengths = [len(ids) if ids is not None else 0 for ids in lists]
        flat = [str(item) for ids in lists if ids is not None for item in ids]
        return np.split(id_map.indices_of(flat), np.cumsum(lengths)[:-1])

    def _search_users(self, user_ids: list, histories: list[np.ndarray], width: int):
        limit = self.max_history
        queries = self.encoder.encode(["" if u is None else str(u) for u in user_ids],
                                      [self.vocabulary.ids_of(h[:limit]).tolist() for h in histories])
        return self.index.search(queries, width)

    def _first_k(self, indices: np.ndarray, scores: np.ndarray, banned: list[np.ndarray],
                 k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per row, the first ``k`` entries that are items (index >= 2) and not banned for that row."""
        rows = np.arange(len(indices))[:, None]
        banned_keys = np.concatenate([r * self._key_base + b for r, b in enumerate(banned)] + [np.zeros(0, np.int64)])
        keep = (indices >= NUM_RESERVED) & ~np.isin(rows * self._key_base + indices, banned_keys)
        keep &= np.cumsum(keep, axis=1) <= k
        return [(indices[r][keep[r]], scores[r][keep[r]].astype(np.float32)) for r in range(len(indices))]

