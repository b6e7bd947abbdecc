"""FAISS index kinds on clustered synthetic item vectors: QPS and recall@100 vs exact (Flat), build time, memory.

Sizes up to ``--compare_max`` (default 1M x 64; smoke: 20k) compare every kind in memory: vectors drawn from a
Gaussian mixture with Zipf-sized clusters of different spreads plus a uniform background (so neighbourhoods are
neither trivially separable nor structureless), cosine metric as in a two-tower run. Every index is built by
``retrieval.index.build_index``: search parameters are tuned automatically to recall@100 >= 0.95 on 1000 user-like
queries (half tuning, half check), then measured here on separate queries. The last row of a size is what ``auto``
builds from 50k items on (4-bit residual product-quantization codes scanned with SIMD, then exact re-ranking; see
``retrieval/index/factory.py``). Rows: build seconds (training + adding + self-check tuning), index bytes
(serialized), RSS delta of the build, batch QPS (all queries in one call, FAISS's threads; best of 3, and per CPU
second on one thread), recall@100 (ann-benchmarks definition, exact by ``faiss.knn``), speed-up over Flat measured
in the same process. Target: >= 50x Flat's QPS at recall@100 >= 0.95.

Larger sizes (default 10M x 64; smoke: 60k) are the bounded-memory path: the catalogue is written as Parquet shards
of 1M items (never held whole), and ``auto`` is built from them in a spawned process the way a run's index stage
does (``ParquetVectors``: quantizer trained on a sample, vectors added in chunks, chunked exact search for the
self-check). That row reports the build's peak RSS (``VmHWM`` of its process) next to the raw vectors' size, the
serialized index bytes (with ``RFlat`` these include the full float32 vectors), batch QPS and recall@100 on 1000
separate queries, and its single-thread QPS relative to the largest compared size's ``auto`` row.

Unless ``--smoke`` or ``--no-record``, the rows are also recorded (``benchmarks.record``): appended to
``results.json``'s ``separate_runs`` with the machine facts, and on the ``RESULTS.md`` page rewritten from it.

    python -m benchmarks.bench_index [--smoke] [--sizes=1000000,10000000] [--compare_max=1000000] [--keep_dir=DIR]
        [--no-record]"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from absl import logging

from benchmarks.record import add_record_flag, record, should_record
from retrieval.index import IndexQualityError, build_index
from retrieval.index.factory import PreparedVectors, ivf_lists, prepare_vectors
from retrieval.index.selfcheck import RecallProbe, apply_search_params
from retrieval.index.source import ParquetVectors
from retrieval.memory import peak_rss_mb

K, FLOOR, TARGET_SPEEDUP = 100, 0.95, 50.0
NUM_QUERIES = 1000
SHARD_ROWS = 1_000_000


class Mixture:
    """Gaussian mixture of count / 500 clusters with Zipf(1.1) sizes and spreads in [0.35, 0.9]; each cluster's noise
    has its own random orientation and a decaying spectrum (scale of direction j ~ j^-0.5, total variance as if
    isotropic), as learned embeddings have a few strong directions and a long weak tail; 5% uniform background.
    ``sample`` draws any number of rows from it, so a 10M catalogue can be written in chunks."""

    def __init__(self, count: int, dimension: int, seed: int):
        rng = np.random.default_rng(seed)
        self.clusters, self.dimension = max(8, count // 500), dimension
        self.centers = rng.standard_normal([self.clusters, dimension], dtype=np.float32)
        sizes = 1.0 / np.arange(1, self.clusters + 1) ** 1.1
        self.probabilities = sizes / sizes.sum()
        spectrum = (1.0 + np.arange(dimension)) ** -0.5
        spectrum *= np.sqrt(dimension / np.square(spectrum).sum())
        self.scales = (rng.uniform(0.35, 0.9, self.clusters)[:, None] * spectrum).astype(np.float32)
        self.rotations = np.stack([np.linalg.qr(rng.standard_normal([dimension, dimension]))[0]
                                   for _ in range(self.clusters)]).astype(np.float32)

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        labels = rng.choice(self.clusters, size=count, p=self.probabilities)
        noise = rng.standard_normal([count, self.dimension], dtype=np.float32) * self.scales[labels]
        vectors = self.centers[labels]
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(self.clusters + 1))
        for cluster in np.flatnonzero(np.diff(bounds)):
            rows = order[bounds[cluster]:bounds[cluster + 1]]
            vectors[rows] += noise[rows] @ self.rotations[cluster].T
        background = rng.random(count) < 0.05
        vectors[background] = rng.uniform(-2, 2, [int(background.sum()), self.dimension]).astype(np.float32)
        return vectors


def clustered_vectors(count: int, dimension: int, seed: int) -> np.ndarray:
    """``count`` rows of the ``Mixture`` for ``count`` items."""
    return Mixture(count, dimension, seed).sample(count, np.random.default_rng(seed + 1))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _settle() -> int:
    """RSS after collecting garbage and returning freed heap to the OS (so deltas belong to one build)."""
    gc.collect()
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    return _rss_bytes()


def _qps(index, queries: np.ndarray, repeats: int = 3) -> tuple[float, float]:
    """(queries per wall second with FAISS's threads, queries per CPU second on one thread), best of ``repeats``.
    The single-thread CPU-time figure is what other processes on a shared machine cannot distort."""
    wall = []
    for _ in range(repeats):
        start = time.perf_counter()
        index.search(queries, K)
        wall.append(time.perf_counter() - start)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    cpu = []
    try:
        for _ in range(repeats):
            start = time.process_time()
            index.search(queries, K)
            cpu.append(time.process_time() - start)
    finally:
        faiss.omp_set_num_threads(threads)
    return len(queries) / min(wall), len(queries) / min(cpu)


def write_catalogue(directory: Path, count: int, dimension: int, seed: int,
                    extra: int = 0) -> np.ndarray:
    """Writes ``count`` rows of the ``Mixture`` as item-embedding Parquet shards of SHARD_ROWS (``item_id`` "0",
    "1", ..., ``embedding`` list<float32>, the export contract's) without holding the catalogue in memory; returns
    ``extra`` more rows of the same mixture (queries: users like the items, not items)."""
    mixture, rng = Mixture(count, dimension, seed), np.random.default_rng(seed + 1)
    directory.mkdir(parents=True)
    for shard, start in enumerate(range(0, count, SHARD_ROWS)):
        vectors = mixture.sample(min(SHARD_ROWS, count - start), rng)
        offsets = pa.array(np.arange(len(vectors) + 1, dtype=np.int32) * dimension)
        pq.write_table(pa.table({"item_id": pa.array(np.arange(start, start + len(vectors)).astype(str)),
                                 "embedding": pa.ListArray.from_arrays(offsets, pa.array(vectors.reshape(-1)))}),
                       directory / f"part-{shard:05d}.parquet")
    return mixture.sample(extra, rng)


def _build_from_files(directory: Path, tuning_queries: np.ndarray, queries: np.ndarray,
                      keep: Path | None = None) -> dict:
    """The ``auto`` index built from the Parquet shards in ``directory`` as a run's index stage builds it (in its own
    process: ``peak_rss_mb`` is this build's alone), then measured like the in-memory rows; saved to ``keep`` if
    given (``ItemIndex.save``)."""
    logging.set_verbosity(logging.INFO)  # a spawned process: the build's progress (training, adding) is logged
    before = peak_rss_mb()
    source = ParquetVectors(directory)
    start, cpu = time.perf_counter(), time.process_time()
    index = build_index(source, source.item_ids(), factory="auto", metric="cosine", queries=tuning_queries,
                        recall_floor=FLOOR, recall_k=K)
    row = {"name": "auto from files", "factory": index.factory, "items": source.count, "dim": source.dimension,
           "metric": "cosine", "build_s": round(time.perf_counter() - start, 2),
           "build_cpu_s": round(time.process_time() - cpu, 2), "peak_rss_mb": round(peak_rss_mb(), 1),
           "rss_before_build_mb": round(before, 1), "vectors_mb": round(source.count * source.dimension * 4 / 2**20, 1)}
    faiss.write_index(index.index, str(directory / "index.faiss"))
    row["index_bytes"] = (directory / "index.faiss").stat().st_size
    (directory / "index.faiss").unlink()
    queries = prepare_vectors(queries, "cosine")
    qps, cpu_qps = _qps(index.index, queries)
    probe = RecallProbe(PreparedVectors(source, "cosine"), index.id_map.indices, queries, K, "ip")
    row.update({"search_params": index.search_params, "queries": len(queries), "qps": round(qps, 1),
                "qps_1thread_cpu": round(cpu_qps, 1), f"recall_at_{K}": round(probe(index.index), 4),
                "self_check_recall": index.manifest["self_check"]["recall"]})
    apply_search_params(index.index, {**index.search_params, "k_factor_rf": 1})
    row["codes_only_recall"] = round(probe(index.index), 4)
    if keep is not None:
        apply_search_params(index.index, index.search_params)
        index.save(keep)
    return row


def streamed_row(count: int, dimension: int, keep_dir: Path | None = None) -> dict:
    """``_build_from_files`` over a fresh catalogue of ``count`` items, in a spawned process. With ``keep_dir``, the
    shards and the index stay there as ``items-<count>/`` and ``index-<count>/`` (``bench_serving`` reuses them)."""
    with tempfile.TemporaryDirectory() as tmp:
        items = keep_dir / f"items-{count}" if keep_dir else Path(tmp) / "items"
        start = time.perf_counter()
        queries = write_catalogue(items, count, dimension, seed=0, extra=2 * NUM_QUERIES)
        written = round(time.perf_counter() - start, 1)
        keep = keep_dir / f"index-{count}" if keep_dir else None
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            row = pool.apply(_build_from_files, (items, queries[:NUM_QUERIES], queries[NUM_QUERIES:], keep))
    row["catalogue_write_s"] = written
    logging.info("%s", row)
    return row


def compared_rows(count: int, dimension: int, smoke: bool) -> list[dict]:
    """Every index kind built in memory over ``count`` items and compared with Flat (module docstring)."""
    num_queries, flat_queries = (200, 200) if smoke else (NUM_QUERIES, 200)
    vectors = clustered_vectors(count + NUM_QUERIES + num_queries, dimension, seed=0)  # users: same mixture
    items, tuning_queries = vectors[:count], vectors[count:count + NUM_QUERIES]
    queries = prepare_vectors(vectors[count + NUM_QUERIES:], "cosine")
    ids = np.arange(count).astype(str)
    probe = RecallProbe(prepare_vectors(items, "cosine"), np.arange(count) + 2, queries, K, "ip")
    nlist = ivf_lists(count)
    kinds = [("Flat", "Flat"), ("HNSW32", "HNSW32"), ("IVF-Flat", f"IVF{nlist},Flat"),
             ("IVF-PQ+refine", f"IVF{nlist},PQ{dimension}x4fsr,RFlat")]
    rows, flat_qps, flat_cpu_qps = [], None, None
    for name, factory in kinds:
        row = {"name": name, "factory": factory, "items": count, "dim": dimension, "metric": "cosine"}
        before = _settle()
        start, cpu = time.perf_counter(), time.process_time()
        try:
            index = build_index(items, ids, factory=factory, metric="cosine", queries=tuning_queries,
                                recall_floor=FLOOR, recall_k=K)
        except IndexQualityError as e:  # reported, not fatal
            rows.append({**row, "refused": True, "self_check_recall": round(e.check.recall, 4),
                         "search_params": e.check.search_params})
            continue
        row["build_s"] = round(time.perf_counter() - start, 2)
        row["build_cpu_s"] = round(time.process_time() - cpu, 2)  # all threads; robust to a busy machine
        row["rss_delta_bytes"] = _settle() - before
        row["index_bytes"] = int(faiss.serialize_index(index.index).size)
        searched = queries[:flat_queries] if factory == "Flat" else queries
        qps, cpu_qps = _qps(index.index, searched)
        flat_qps, flat_cpu_qps = (qps, cpu_qps) if factory == "Flat" else (flat_qps, flat_cpu_qps)
        recall = probe(index.index)
        speedup = cpu_qps / flat_cpu_qps
        row.update({"search_params": index.search_params, "queries": len(searched), "qps": round(qps, 1),
                    "qps_1thread_cpu": round(cpu_qps, 1), f"recall_at_{K}": round(recall, 4),
                    "self_check_recall": index.manifest["self_check"]["recall"], "qps_vs_flat": round(qps / flat_qps, 2),
                    "qps_1thread_cpu_vs_flat": round(speedup, 2),
                    "meets_target": bool(recall >= FLOOR and speedup >= TARGET_SPEEDUP)})
        if "k_factor_rf" in index.search_params:  # what the codes alone find: the exact re-ranking of k only
            apply_search_params(index.index, {**index.search_params, "k_factor_rf": 1})
            row["codes_only_recall"] = round(probe(index.index), 4)
        rows.append(row)
        logging.info("%s", row)
        del index
    return rows


def run(smoke: bool, sizes: Sequence[int] | None = None, compare_max: int | None = None,
        keep_dir: Path | None = None) -> list[dict]:
    """Sizes up to ``compare_max`` compare every kind in memory; larger ones build ``auto`` from Parquet shards (kept
    in ``keep_dir`` if given)."""
    sizes = sizes or ((20_000, 60_000) if smoke else (1_000_000, 10_000_000))
    compare_max = compare_max or (20_000 if smoke else 1_000_000)
    rows = []
    for count in sizes:
        rows += compared_rows(count, 64, smoke) if count <= compare_max else [streamed_row(count, 64, keep_dir)]
    compared = [row for row in rows if row["name"] == "IVF-PQ+refine" and "qps_1thread_cpu" in row]
    for row in rows:
        if row["name"] == "auto from files" and compared:
            row["qps_1thread_cpu_vs_compared"] = round(row["qps_1thread_cpu"] / compared[-1]["qps_1thread_cpu"], 3)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="20k items compared, 60k from files: seconds")
    parser.add_argument("--sizes", type=lambda text: [int(n) for n in text.split(",")], default=None,
                        help="catalogue sizes, comma-separated (default 1000000,10000000)")
    parser.add_argument("--compare_max", type=int, default=None,
                        help="largest size at which every index kind is compared in memory (default 1000000)")
    parser.add_argument("--keep_dir", type=Path, default=None,
                        help="keep the larger sizes' shards and indexes here (for bench_serving --catalogue_dir)")
    add_record_flag(parser)
    logging.set_verbosity(logging.INFO)  # one line per index as it finishes
    args = parser.parse_args()
    rows = run(args.smoke, args.sizes, args.compare_max, args.keep_dir)
    for row in rows:
        print(json.dumps(row))
    if should_record(args):
        record("index", rows, "python -m benchmarks.bench_index " + " ".join(sys.argv[1:]))
