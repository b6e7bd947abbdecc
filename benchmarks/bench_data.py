"""Speed of the example builders: YoutubeDNN next-item examples and Item2Vec skip-gram pairs per second.

Data: MovieLens 1M (users 1-2999) ``ratings.dat`` and Amazon Beauty ``Beauty.txt`` from ``../shared/datasets/``
(a row says "skipped" when a file is absent); ``--smoke`` uses the synthetic generator at a tiny size instead.
Each builder is timed as the median of several runs, after one warm-up, including the sort into user sequences.
The reference is the straightforward per-user Python loop over the same sequences (checked to give the same
examples), timed once on the first users; ``speedup_vs_loop`` compares rates. Target: >= 1M examples/s on 2 cores.

    python -m benchmarks.bench_data [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np

from retrieval.data import Vocabulary, next_item_examples, read_interactions, skipgram_pairs, synthetic, user_sequences

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
SOURCES = {"ml-1m-partial": DATASETS / "ml-1m-partial" / "ratings.dat",
           "amazon-beauty": DATASETS / "amazon-beauty" / "Beauty.txt"}
MAX_HISTORY, WINDOW = 50, 5
TARGET_PER_S = 1_000_000


def _indices(frame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    users, items = Vocabulary.from_ids(frame["user_id"]), Vocabulary.from_ids(frame["item_id"])
    return users.lookup(frame["user_id"]), items.lookup(frame["item_id"]), frame["timestamp"].to_numpy()


def _median_seconds(call: Callable[[], object], repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _loop_next_item(indptr: np.ndarray, items: np.ndarray) -> dict[str, np.ndarray]:
    """Reference: one Python iteration per example."""
    rows = []
    for u in range(len(indptr) - 1):
        sequence = items[indptr[u]:indptr[u + 1]]
        for t in range(1, len(sequence)):
            if sequence[t] >= 2:
                history = np.zeros(MAX_HISTORY, np.int32)
                past = sequence[max(0, t - MAX_HISTORY):t][::-1]
                history[:len(past)] = past
                rows.append((u, history, len(past), sequence[t]))
    return {"user": np.array([r[0] for r in rows], np.int32), "history": np.array([r[1] for r in rows]),
            "history_length": np.array([r[2] for r in rows], np.int32), "label": np.array([r[3] for r in rows])}


def _loop_skipgram(indptr: np.ndarray, items: np.ndarray) -> dict[str, np.ndarray]:
    """Reference: one Python iteration per pair."""
    targets, contexts = [], []
    for u in range(len(indptr) - 1):
        sequence = [i for i in items[indptr[u]:indptr[u + 1]] if i >= 2]
        for p, target in enumerate(sequence):
            for q in range(max(0, p - WINDOW), min(len(sequence), p + WINDOW + 1)):
                if q != p:
                    targets.append(target)
                    contexts.append(sequence[q])
    return {"target": np.array(targets, np.int32), "context": np.array(contexts, np.int32)}


def _first_users(users: np.ndarray, items: np.ndarray, times: np.ndarray, budget: int):
    """The interactions of the lowest user indices, about ``budget`` of them (for the slow reference)."""
    counts = np.bincount(users)
    last_user = int(np.searchsorted(np.cumsum(counts), budget)) + 1
    keep = users <= last_user
    return users[keep], items[keep], times[keep]


def _same_rows(fast: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> bool:
    """Whether both hold the same multiset of examples (the reference's keys), whatever their order."""
    tables = [np.column_stack([d[k].reshape(len(d[k]), -1).astype(np.int64) for k in reference]) for d in (fast,
                                                                                                           reference)]
    a, b = (t[np.lexsort(t.T[::-1])] for t in tables)
    return a.shape == b.shape and bool(np.array_equal(a, b))


def _rows(dataset: str, users: np.ndarray, items: np.ndarray, times: np.ndarray, repeats: int,
          reference_budget: int) -> list[dict]:
    builders = {
        "next_item_examples": (lambda u, i, t: next_item_examples(u, i, t, max_history=MAX_HISTORY), _loop_next_item,
                               "label"),
        "skipgram_pairs": (lambda u, i, t: skipgram_pairs(u, i, t, window=WINDOW), _loop_skipgram, "target"),
    }
    rows = []
    for name, (fast, loop, key) in builders.items():
        count = len(fast(users, items, times)[key])
        seconds = _median_seconds(lambda f=fast: f(users, items, times), repeats)
        small = _first_users(users, items, times, reference_budget)
        expected = fast(*small)
        start = time.perf_counter()
        reference = loop(*user_sequences(*small))
        loop_rate = len(reference[key]) / (time.perf_counter() - start)
        same = _same_rows(expected, reference)
        rows.append({"name": name, "dataset": dataset, "interactions": len(users), "examples": count,
                     "median_s": round(seconds, 4), "examples_per_s": round(count / seconds),
                     "reference_examples_per_s": round(loop_rate), "speedup_vs_loop": round(count / seconds / loop_rate,
                                                                                            1),
                     "matches_reference": bool(same), "target_examples_per_s": TARGET_PER_S})
    return rows


def run(smoke: bool) -> list[dict]:
    """Benchmark rows per dataset and builder (see the module docstring)."""
    if smoke:
        interactions, _, _ = synthetic.generate(num_users=200, num_items=150, interactions_per_user=20, seed=0)
        return _rows("synthetic-smoke", *_indices(interactions), repeats=3, reference_budget=2_000)
    rows = []
    for dataset, path in SOURCES.items():
        if not path.exists():
            rows += [{"name": name, "dataset": dataset, "skipped": f"file not found: {path}"}
                     for name in ("next_item_examples", "skipgram_pairs")]
            continue
        rows += _rows(dataset, *_indices(read_interactions(path)), repeats=7, reference_budget=30_000)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic data, seconds")
    for row in run(parser.parse_args().smoke):
        print(json.dumps(row))
