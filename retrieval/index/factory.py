"""Which FAISS index to build and how: metrics, the ``auto`` choice by catalogue size, seeded training, id mapping.

Index descriptions are FAISS index-factory strings (Johnson et al. 2019, "Billion-scale similarity search with GPUs";
https://github.com/facebookresearch/faiss/wiki/The-index-factory): ``Flat`` (exact), ``IVF<n>,Flat`` (inverted file
of n k-means lists, exact distances inside the probed lists), ``HNSW<M>`` (graph with M links per node, Malkov &
Yashunin 2018), ``IVF<n>,PQ<m>`` (product quantization in m sub-spaces, Jegou et al. 2011; add ``,RFlat`` to
re-rank the shortlist with exact distances). Metrics: ``ip`` (inner product; ``dot`` is an alias), ``l2``
(squared Euclidean) and ``cosine`` (inner product of L2-normalised vectors: items are normalised here once, queries
at search time).

``auto`` thresholds, by catalogue size N (from ``benchmarks/bench_index.py``: 64-d clustered vectors, cosine,
recall@100 against exact search, single-thread CPU time, so that a busy shared machine does not distort them):

* N < 50,000: ``Flat``. At 20k items no approximate index beat exact search (IVF-Flat 3.6x at best, HNSW32 0.9x),
  and exact search has no recall to lose.
* N >= 50,000: ``IVF<n>,PQ<d>x4fsr,RFlat`` with n = the power of two nearest 4 * sqrt(N) (4096 at 1M): an inverted
  file of k-means lists whose residuals (``r``) are coded with 4-bit product quantization, one sub-quantizer per
  dimension, scanned with FAISS's SIMD "fast scan" (Andre et al. 2017, "Accelerated nearest neighbor search with
  Quick ADC"), then the shortlist of k * k_factor_rf re-ranked with exact distances (``RFlat``). nprobe and
  k_factor_rf are tuned to the recall floor. Memory: the raw vectors plus d / 2 bytes of codes per item.
  At 1M items: 78-81x Flat's single-thread QPS at recall@100 0.961 (nprobe 54, k_factor_rf 4), against IVF4096,Flat
  38-41x (nprobe 44), HNSW32 17-19x (efSearch 267; 4x the build CPU time, twice the memory) and the same fast-scan codes
  without residuals 24x (their codes alone reach recall 0.53, so the re-ranking needs k_factor_rf 32). At 250k items
  33x vs IVF-Flat's 17x; at 60k 6.7x vs 5.9x. 8192 lists, an HNSW coarse quantizer or SQ8 codes were slower at the
  same recall or could not reach it. HNSW also assumes a metric space: with raw inner product (``ip``) its recall
  can stall below the floor, which the self-check then reports.
  At 10M items (built from Parquet shards, ``bench_index --sizes=10000000``): IVF16384, tuned to nprobe 138 and
  k_factor_rf 8, recall@100 0.963, 2,765 queries per CPU second (single thread; 1M: 8,618); 3.05 GB of index, as the
  re-ranking stage keeps the float32 vectors; built in 21 min on 2 shared cores (training 10 min, adding 9 min).
"""

from __future__ import annotations

import re
import time
from typing import Callable, Iterator

import faiss
import numpy as np
from absl import logging

from retrieval.errors import InputError
from retrieval.index.source import CHUNK_ROWS, VectorSource

METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "cosine": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}
_METRIC_ALIASES = {"dot": "ip", "inner_product": "ip"}
EXACT_BELOW = 50_000
TRAIN_POINTS_PER_CENTROID = 40  # FAISS warns below 39 points per k-means centroid
MIN_TRAINING_SIZE = 10_000
ADD_LOG_ROWS = 1_000_000  # progress is logged every this many vectors added


def canonical_metric(metric: str) -> str:
    """``ip``, ``l2`` or ``cosine`` (``dot`` and ``inner_product`` mean ``ip``)."""
    name = _METRIC_ALIASES.get(str(metric).lower(), str(metric).lower())
    if name not in METRICS:
        raise InputError(f"unknown metric {metric!r}; expected one of ip (dot), l2, cosine", field="metric")
    return name


def prepare_vectors(vectors: np.ndarray, metric: str) -> np.ndarray:
    """float32, C-contiguous, 2-D; rows scaled to unit L2 norm for ``cosine`` (zero rows stay zero)."""
    vectors = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    if vectors.ndim != 2:
        raise InputError(f"vectors must be 2-D [N, d], got shape {vectors.shape}")
    if not np.isfinite(vectors).all():
        raise InputError("vectors contain NaN or infinite values")
    if canonical_metric(metric) == "cosine":
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = np.ascontiguousarray(vectors / np.maximum(norms, np.finfo(np.float32).tiny))
    return vectors


class PreparedVectors(VectorSource):
    """``source`` with every chunk passed through ``prepare_vectors`` (checked finite; unit rows for ``cosine``)."""

    def __init__(self, source: VectorSource, metric: str):
        self.source, self.metric = source, metric
        self.count, self.dimension = source.count, source.dimension

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        for chunk in self.source.chunks(rows):
            yield prepare_vectors(chunk, self.metric)

    def take(self, rows: np.ndarray) -> np.ndarray:
        return prepare_vectors(self.source.take(rows), self.metric)


def ivf_lists(count: int) -> int:
    """Number of IVF lists for ``count`` items: the power of two nearest 4 * sqrt(count), at least 1, and no more
    than the items allow (TRAIN_POINTS_PER_CENTROID each)."""
    target = 4.0 * np.sqrt(max(count, 1))
    lists = 2 ** int(np.round(np.log2(target)))
    return int(max(1, min(lists, count // TRAIN_POINTS_PER_CENTROID)))


def auto_factory(count: int, dimension: int) -> str:
    """The factory string ``auto`` resolves to for ``count`` vectors of ``dimension`` (see the module docstring)."""
    if count < EXACT_BELOW:
        return "Flat"
    return f"IVF{ivf_lists(count)},PQ{int(dimension)}x4fsr,RFlat"


# Named factories (index.factory), resolved by the catalogue's size and dimension; any other string goes to FAISS.
NAMED: dict[str, Callable[[int, int], str]] = {"auto": auto_factory}


def resolve_factory(factory: str, count: int, dimension: int) -> str:
    """A named factory (:data:`NAMED`, e.g. ``auto``) -> its size-based choice; anything else is passed to FAISS as
    given."""
    factory = str(factory).strip()
    if factory.lower() in NAMED:
        return NAMED[factory.lower()](count, dimension)
    if not factory:
        raise InputError("empty index factory string", field="factory")
    return factory


def codebook_size(factory: str) -> int:
    """The largest k-means codebook ``factory`` trains: IVF lists, or 2**bits centroids per PQ sub-space."""
    sizes = [int(n) for n in re.findall(r"IVF(\d+)", factory)]
    sizes += [2 ** int(bits or 8) for bits in re.findall(r"PQ\d+(?:x(\d+))?", factory)]
    return max(sizes, default=0)


def training_size(factory: str, count: int) -> int:
    """How many vectors to train on: TRAIN_POINTS_PER_CENTROID per centroid of the largest codebook (at least
    MIN_TRAINING_SIZE, for scalar quantizers and rotations), at most the whole catalogue."""
    return int(min(count, max(TRAIN_POINTS_PER_CENTROID * codebook_size(factory), MIN_TRAINING_SIZE)))


def _configure_training(index: faiss.Index, seed: int) -> None:
    """Seeds every k-means run inside ``index`` (IVF coarse quantizer, PQ codebooks) so builds are reproducible, and
    skips IVF-PQ's polysemous training (a slow annealing of code order only used by Hamming filtering, ``ht``,
    which is never enabled here)."""
    try:
        ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    except RuntimeError:  # no inverted file (Flat, HNSW)
        return
    ivf.cp.seed = seed
    if hasattr(ivf, "pq"):
        ivf.pq.cp.seed = seed
    if hasattr(ivf, "do_polysemous_training"):
        ivf.do_polysemous_training = False


def create_index(vectors: VectorSource, ids: np.ndarray, factory: str, metric: str, seed: int = 0,
                 train_size: int | None = None) -> faiss.IndexIDMap2:
    """Builds ``factory`` over prepared ``vectors`` (``PreparedVectors``) and returns it wrapped in an
    ``IndexIDMap2`` holding ``ids``. The quantizer is trained on a seeded sample of ``train_size`` rows (default
    ``training_size``) gathered in one pass; the vectors are then added chunk by chunk, so that memory holds the index
    and one chunk, never a second copy of the catalogue."""
    count, dimension = vectors.count, vectors.dimension
    try:
        inner = faiss.index_factory(dimension, factory, METRICS[canonical_metric(metric)])
    except RuntimeError as e:
        raise InputError(f"FAISS cannot build index {factory!r}: {str(e).splitlines()[-1]}", field="factory") from None
    if not inner.is_trained:
        size = training_size(factory, count) if train_size is None else int(min(train_size, count))
        if size < codebook_size(factory):
            raise InputError(f"index {factory!r} needs at least {codebook_size(factory)} training vectors, got {size} "
                             f"(catalogue of {count}); use fewer IVF lists or Flat", field="factory")
        sample = np.sort(np.random.default_rng(seed).choice(count, size=size, replace=False))
        _configure_training(inner, seed)
        logging.info("training %s on %d of %d vectors (seed %d)", factory, size, count, seed)
        started = time.perf_counter()
        inner.train(vectors.take(sample))
        logging.info("trained in %.1f s", time.perf_counter() - started)
    index = faiss.IndexIDMap2(inner)
    ids, start, started = np.ascontiguousarray(ids, dtype=np.int64), 0, time.perf_counter()
    for chunk in vectors.chunks():
        index.add_with_ids(chunk, ids[start:start + len(chunk)])
        start += len(chunk)
        if start // ADD_LOG_ROWS != (start - len(chunk)) // ADD_LOG_ROWS or start == count:
            logging.info("added %d of %d vectors in %.1f s", start, count, time.perf_counter() - started)
    return index
