"""``ItemIndex``: a FAISS index of item vectors with its id map, search parameters and manifest.

On disk (one directory, written atomically)::

    index.faiss    faiss.write_index of an IndexIDMap2 whose ids are vocabulary indices (plain faiss.read_index)
    ids.parquet    index (int64) -> item_id (string), see ``idmap.IdMap``
    manifest.json  dimension, metric, count, factory, search_params, model_version, built_at, build_seconds,
                   self_check (recall@k against exact search, floor, queries), seed, faiss_version
    transform.npy  (an index of transformed vectors only) [D, d]: queries are multiplied by it before the search
    similar/       (optional) the item-to-item index, a directory of this layout with a transform
                   (``retrieval.index.similar``: runs whose item vectors are two blocks); it shares the id map

Scores are "higher is better" for every metric: inner product for ``ip`` and ``cosine``, minus the squared
Euclidean distance for ``l2``.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

import faiss
import numpy as np
from absl import logging

from retrieval.artifacts import PathLike, atomic_path, read_json, write_json
from retrieval.errors import InputError
from retrieval.index import factory as factories
from retrieval.index.idmap import IdMap
from retrieval.index.selfcheck import IndexQualityError, apply_search_params, self_check
from retrieval.index.source import VectorSource, as_source

INDEX_FILE, IDS_FILE, MANIFEST_FILE, TRANSFORM_FILE = "index.faiss", "ids.parquet", "manifest.json", "transform.npy"
SIMILAR_DIR = "similar"
FORMAT_VERSION = 1


class Neighbours(NamedTuple):
    """Search results, [B, k] each; missing results (fewer than k found) have index -1, id "" and score -inf."""

    scores: np.ndarray
    indices: np.ndarray
    item_ids: np.ndarray


class ItemIndex:
    """Nearest-neighbour search over item vectors, answering vocabulary indices and original ids.

    ``transform`` [D, d] (None: the vectors as they are): the index holds vectors times it, and ``search`` maps its
    queries the same way. ``similar``: the item-to-item index when the item vectors need a view of their own for it
    (``retrieval.index.similar``), else None (items are compared in this index)."""

    def __init__(self, index: faiss.Index, id_map: IdMap, manifest: dict, transform: Optional[np.ndarray] = None,
                 similar: Optional[ItemIndex] = None):
        if index.ntotal != len(id_map):
            raise InputError(f"the index holds {index.ntotal} vectors but the id map {len(id_map)} ids")
        self.index, self.id_map, self.manifest = index, id_map, manifest
        self.transform, self.similar = transform, similar
        apply_search_params(index, manifest.get("search_params", {}))

    metric = property(lambda self: self.manifest["metric"])
    factory = property(lambda self: self.manifest["factory"])
    dimension = property(lambda self: int(self.manifest["dimension"]))
    search_params = property(lambda self: dict(self.manifest.get("search_params", {})))

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: np.ndarray, k: int) -> Neighbours:
        """Top-``k`` items for each query row ([B, d] or [d]; [B, D] or [D] with a ``transform``); k above the
        catalogue size is clamped."""
        if self.transform is not None:
            queries = np.asarray(queries, np.float32)
            if queries.shape[-1] != self.transform.shape[0]:
                raise InputError(f"queries have dimension {queries.shape[-1]}, the index's transform takes "
                                 f"{self.transform.shape[0]}")
            queries = queries @ self.transform
        queries = factories.prepare_vectors(queries, self.metric)
        if queries.shape[1] != self.dimension:
            raise InputError(f"queries have dimension {queries.shape[1]}, the index {self.dimension}")
        k = int(min(k, len(self)))
        if k <= 0:
            raise InputError(f"k must be positive, got {k}", field="k")
        scores, indices = self.index.search(queries, k)
        if self.metric == "l2":
            scores = -scores
        scores = np.where(indices >= 0, scores, -np.inf).astype(np.float32)
        return Neighbours(scores, indices, self.id_map.ids_of(indices))

    def save(self, directory: PathLike) -> Path:
        """Writes index, id map and manifest into ``directory`` atomically (an existing one is replaced)."""
        directory = Path(directory)
        with atomic_path(directory) as tmp:
            self._write(tmp)
        logging.info("saved %s index of %d items to %s", self.factory, len(self), directory)
        return directory

    def _write(self, directory: Path) -> None:
        """The files of ``save`` in the new directory ``directory`` (the item-to-item index in ``similar/``)."""
        directory.mkdir()
        faiss.write_index(self.index, str(directory / INDEX_FILE))
        self.id_map.save(directory / IDS_FILE)
        if self.transform is not None:
            np.save(directory / TRANSFORM_FILE, self.transform)
        write_json(directory / MANIFEST_FILE, self.manifest)
        if self.similar is not None:
            self.similar._write(directory / SIMILAR_DIR)

    @classmethod
    def load(cls, directory: PathLike, mmap: bool = False, id_map: Optional[IdMap] = None) -> ItemIndex:
        """Reads a directory written by ``save``; the stored search parameters are applied. ``mmap``: map the
        index file read-only instead of copying it (``faiss.IO_FLAG_MMAP_IFC``, zero-copy), so that server
        processes on one machine share one copy in the page cache; the file must then not change in place (``save``
        replaces the directory, which leaves a mapped old file valid). ``id_map``: the map to use instead of reading
        ``ids.parquet`` (the item-to-item index in ``similar/`` shares its parent's: one copy in memory)."""
        directory = Path(directory)
        if not (directory / MANIFEST_FILE).is_file():
            raise InputError("not an index directory (no manifest.json)", path=str(directory))
        manifest = read_json(directory / MANIFEST_FILE)
        try:
            index = faiss.read_index(str(directory / INDEX_FILE),
                                     faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY if mmap else 0)
        except RuntimeError as e:
            raise InputError(f"cannot read the FAISS index: {str(e).splitlines()[-1]}",
                             path=str(directory / INDEX_FILE)) from None
        id_map = IdMap.load(directory / IDS_FILE) if id_map is None else id_map
        transform = np.load(directory / TRANSFORM_FILE) if (directory / TRANSFORM_FILE).is_file() else None
        similar = cls.load(directory / SIMILAR_DIR, mmap, id_map) if (directory / SIMILAR_DIR).is_dir() else None
        return cls(index, id_map, manifest, transform, similar)


def _check_queries(vectors: VectorSource, queries: Optional[np.ndarray], metric: str, count: int,
                   seed: int) -> tuple[np.ndarray, str]:
    """A seeded sample of ``count`` self-check queries: rows of ``queries`` (user embeddings) when given, otherwise
    item vectors (gathered in one pass; the index holds them, so the check is optimistic for them; prefer real
    queries)."""
    if queries is not None:
        pool = factories.prepare_vectors(queries, metric)
        if pool.shape[1] != vectors.dimension:
            raise InputError(f"self-check queries have dimension {pool.shape[1]}, the items {vectors.dimension}")
        if not len(pool):
            raise InputError("no self-check queries")
        return np.ascontiguousarray(pool[np.random.default_rng(seed).permutation(len(pool))[:count]]), "users"
    rows = np.random.default_rng(seed).permutation(vectors.count)[:count]
    order = np.argsort(rows)
    sample = np.empty([len(rows), vectors.dimension], np.float32)
    sample[order] = vectors.take(rows[order])
    return sample, "items"


def build_index(vectors: np.ndarray | VectorSource, item_ids: Sequence[str] | IdMap, *,
                indices: Optional[np.ndarray] = None, factory: str = "auto", metric: str = "ip",
                queries: Optional[np.ndarray] = None, recall_floor: float = 0.95, recall_k: int = 100, recall_margin: float = 0.01,
                num_check_queries: int = 1000, search_params: Optional[dict] = None, seed: int = 0,
                train_size: Optional[int] = None, model_version: Optional[str] = None) -> ItemIndex:
    """Builds, tunes and self-checks an index of ``vectors`` [N, d] for ``item_ids`` [N].

    ``vectors``: an array, or a ``VectorSource`` (e.g. ``ParquetVectors`` over the run's item-embedding file(s)),
    which is read in chunks: training on a sample, adding and the self-check's exact search each take one pass, and
    memory holds the index plus a chunk. ``indices`` are the FAISS ids (default: vocabulary indices 2..N+1,
    ``retrieval.data.vocab``). ``item_ids`` may also be an ``IdMap`` (then without ``indices``): a caller that needs the map
    before building (``run_index``: for the training histories) passes it, so that memory holds one map, not two.
    ``factory`` is a FAISS factory string or ``auto`` (``factory.auto_factory``). ``queries`` are user embeddings
    for the self-check (default: a sample of the item vectors). Unless ``search_params`` are given, nprobe/efSearch
    are tuned on half of the ``num_check_queries`` to ``recall_floor + recall_margin``; recall@``recall_k`` on the
    other half must reach ``recall_floor`` or ``IndexQualityError`` is raised.
    """
    start = time.perf_counter()
    metric = factories.canonical_metric(metric)
    vectors = factories.PreparedVectors(as_source(vectors), metric)
    if isinstance(item_ids, IdMap) and indices is not None:
        raise InputError("pass indices inside the IdMap, not beside it", field="indices")
    id_map = item_ids if isinstance(item_ids, IdMap) else IdMap(item_ids, indices)
    if len(id_map) != vectors.count or not vectors.count:
        raise InputError(f"need one vector per item and at least one item, got {vectors.count} vectors and "
                         f"{len(id_map)} ids")
    resolved = factories.resolve_factory(factory, vectors.count, vectors.dimension)
    index = factories.create_index(vectors, id_map.indices, resolved, metric, seed, train_size)
    sample, source = _check_queries(vectors, queries, metric, num_check_queries, seed)
    check = self_check(index, vectors, id_map.indices, sample, source, metric, recall_k, recall_floor,
                       recall_margin, search_params)
    manifest = {
        "format_version": FORMAT_VERSION, "dimension": vectors.dimension, "metric": metric,
        "count": vectors.count, "factory": resolved, "requested_factory": factory,
        "search_params": check.search_params, "model_version": model_version, "seed": seed,
        "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "build_seconds": round(time.perf_counter() - start, 3), "self_check": check.to_dict(),
        "faiss_version": faiss.__version__, "files": {"index": INDEX_FILE, "ids": IDS_FILE},
    }
    logging.info("index %s over %d items: recall@%d = %.4f (floor %.3f, %s queries) with %s", resolved,
                 vectors.count, check.k, check.recall, recall_floor, source,
                 check.search_params or "its default search parameters")
    if not check.passed:
        raise IndexQualityError(
            f"index {resolved!r} reaches recall@{check.k} = {check.recall:.4f} against exact search on "
            f"{check.num_queries} {source} queries, below the floor {recall_floor} (search params "
            f"{check.search_params}); use more IVF lists/probes, a larger HNSW M, a refine stage (',RFlat') or Flat",
            check)
    return ItemIndex(index, id_map, manifest)
