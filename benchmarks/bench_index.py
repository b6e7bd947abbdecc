"""FAISS index kinds on clustered synthetic item vectors: QPS and recall@100 vs exact (Flat), build time, memory.

1M x 64 items (smoke: 20k) drawn from a Gaussian mixture with Zipf-sized clusters of different spreads plus a
uniform background (so neighbourhoods are neither trivially separable nor structureless), cosine metric as in a
two-tower run. Every index is built by ``retrieval.index.build_index``: search parameters are tuned automatically to
recall@100 >= 0.95 on 1000 user-like queries (half tuning, half check), then measured here on separate queries.
The last row is what ``auto`` builds from 50k items on (4-bit residual product-quantization codes scanned with SIMD,
then exact re-ranking; see ``retrieval/index/factory.py``). Rows: build seconds (training + adding + self-check tuning), index bytes (serialized), RSS delta of the build, batch
QPS (all queries in one call, FAISS's threads; median of 3), recall@100 (ann-benchmarks definition, exact by
``faiss.knn``), speed-up over Flat measured in the same process. Target: >= 50x Flat's QPS at recall@100 >= 0.95.

    python -m benchmarks.bench_index [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

import faiss
import numpy as np
from absl import logging

from retrieval.index import IndexQualityError, build_index
from retrieval.index.factory import ivf_lists, prepare_vectors
from retrieval.index.selfcheck import RecallProbe, apply_search_params

K, FLOOR, TARGET_SPEEDUP = 100, 0.95, 50.0


def clustered_vectors(count: int, dimension: int, seed: int) -> np.ndarray:
    """Gaussian mixture of count / 500 clusters with Zipf(1.1) sizes and spreads in [0.35, 0.9]; each cluster's noise
    has its own random orientation and a decaying spectrum (scale of direction j ~ j^-0.5, total variance as if
    isotropic), as learned embeddings have a few strong directions and a long weak tail; 5% uniform background."""
    rng = np.random.default_rng(seed)
    clusters = max(8, count // 500)
    centers = rng.standard_normal([clusters, dimension], dtype=np.float32)
    sizes = 1.0 / np.arange(1, clusters + 1) ** 1.1
    labels = rng.choice(clusters, size=count, p=sizes / sizes.sum())
    spectrum = (1.0 + np.arange(dimension)) ** -0.5
    spectrum *= np.sqrt(dimension / np.square(spectrum).sum())
    spread = rng.uniform(0.35, 0.9, clusters)
    vectors = centers[labels]
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(clusters + 1))
    for cluster in range(clusters):
        rows = order[bounds[cluster]:bounds[cluster + 1]]
        rotation = np.linalg.qr(rng.standard_normal([dimension, dimension]))[0].astype(np.float32)
        scale = (spread[cluster] * spectrum).astype(np.float32)
        vectors[rows] += (rng.standard_normal([len(rows), dimension], dtype=np.float32) * scale) @ rotation.T
    background = rng.random(count) < 0.05
    vectors[background] = rng.uniform(-2, 2, [int(background.sum()), dimension]).astype(np.float32)
    return vectors


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


def run(smoke: bool) -> list[dict]:
    count, dimension = (20_000, 64) if smoke else (1_000_000, 64)
    num_queries, flat_queries = (200, 200) if smoke else (1000, 200)
    vectors = clustered_vectors(count + 1000 + num_queries, dimension, seed=0)  # users: same mixture, not items
    items, tuning_queries, queries = vectors[:count], vectors[count:count + 1000], vectors[count + 1000:]
    queries = prepare_vectors(queries, "cosine")
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="20k items, seconds")
    logging.set_verbosity(logging.INFO)  # one line per index as it finishes
    for row in run(parser.parse_args().smoke):
        print(json.dumps(row))
