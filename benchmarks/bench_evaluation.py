"""Speed of the offline evaluation at Gowalla size: full-corpus exact ranking + metrics, baselines, bootstrap.

Data: synthetic, shaped like Gowalla as used by LightGCN (29,858 users, 40,981 items, d = 64, about 25 training
items per user excluded from the ranking, about 7 test items per user); items are drawn with a Zipf-like popularity
(p ~ rank^-0.8, duplicates dropped) so item kNN sees realistic co-occurrence; vectors are Gaussian. ``--smoke`` uses
a tiny size. Rows:

- ``exact_ranking_metrics``: ``evaluator.evaluate`` for the model only (blocked matmul + top-100 with training items
  excluded, all metrics at k = 10, 20, 50, 100), median of several runs after a warm-up, per memory bound of a score
  block;
- ``naive_loop``: the straightforward per-user NumPy loop (score one user, mask, argsort, metrics with Python sets),
  timed on the first ``reference_users`` users and *extrapolated* linearly to all users; ``speedup_vs_naive``
  compares it with the default blocked run, and ``matches_reference`` checks recall@20 and NDCG@20 on those users;
- ``baseline_<name>``: one baseline's fit + ranking + metrics; ``item_knn_fit``: the neighbour lists alone;
- ``bootstrap``: 1000 resamples of 8 per-user metrics (intervals) plus the paired test of two systems;
- ``full_evaluation``: what a run costs by default: model, three baselines, intervals and paired tests.

Every row has the wall-clock median (``median_s``), the process CPU time (``cpu_s``, both threads) and the 1-minute
load average when the benchmark started: on a shared machine wall time grows with the load, CPU time much less.

    python -m benchmarks.bench_evaluation [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Callable

import numpy as np

from retrieval.evaluation import baselines, bootstrap, csr, evaluator, metrics, ranking

GOWALLA = {"users": 29_858, "items": 40_981, "dim": 64, "train_per_user": 25, "test_per_user": 7}
SMOKE = {"users": 300, "items": 500, "dim": 16, "train_per_user": 10, "test_per_user": 3}
KS = (10, 20, 50, 100)


def make_problem(users: int, items: int, dim: int, train_per_user: int, test_per_user: int, seed: int = 0):
    """(user vectors, item vectors [items + 2], train CSR, test CSR); test pairs never repeat training pairs."""
    rng = np.random.default_rng(seed)
    popularity = np.arange(1, items + 1, dtype=np.float64) ** -0.8
    draws = rng.choice(items, size=(users, train_per_user + test_per_user), p=popularity / popularity.sum()) + 2
    rows = np.repeat(np.arange(users), train_per_user + test_per_user).reshape(users, -1)
    train = csr.from_pairs(rows[:, :train_per_user].ravel(), draws[:, :train_per_user].ravel(), users)
    test_rows, test_cols = rows[:, train_per_user:].ravel(), draws[:, train_per_user:].ravel()
    fresh = ~csr.contains(train, test_rows, test_cols[:, None])[:, 0]
    test = csr.from_pairs(test_rows[fresh], test_cols[fresh], users)
    user_vectors = rng.standard_normal((users, dim)).astype(np.float32)
    item_vectors = rng.standard_normal((items + 2, dim)).astype(np.float32)
    return user_vectors, item_vectors, train, test


def naive_loop(user_vectors, item_vectors, train, test, rows, k: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Reference: one user at a time, full sort, Python sets. Returns per-user recall@k and NDCG@k."""
    recall, ndcg = [], []
    for u in rows:
        scores = item_vectors @ user_vectors[u]
        scores[:2] = -np.inf
        scores[train.indices[train.indptr[u]:train.indptr[u + 1]]] = -np.inf
        top = np.argsort(-scores)[:k]
        relevant = set(test.indices[test.indptr[u]:test.indptr[u + 1]].tolist())
        hits = [int(i in relevant) for i in top]
        recall.append(sum(hits) / len(relevant))
        ideal = sum(1 / np.log2(r + 2) for r in range(min(len(relevant), k)))
        ndcg.append(sum(h / np.log2(r + 2) for r, h in enumerate(hits)) / ideal)
    return np.array(recall), np.array(ndcg)


def _timed(call: Callable[[], object], repeats: int = 1) -> dict:
    """Median wall and CPU seconds of ``repeats`` calls (after one warm-up call when repeating)."""
    if repeats > 1:
        call()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"median_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(cpus), 3)}


def run(smoke: bool) -> list[dict]:
    """Benchmark rows (see the module docstring)."""
    size = SMOKE if smoke else GOWALLA
    repeats, reference_users = (2, 50) if smoke else (3, 300)
    user_vectors, item_vectors, train, test = make_problem(**size)
    rows_with_test = np.flatnonzero(test.lengths > 0)
    n_users, n_items = len(rows_with_test), len(item_vectors)
    common = {"users": n_users, "items": size["items"], "dim": size["dim"],
              "train_pairs_per_user": round(train.indices.size / size["users"], 1),
              "test_pairs_per_user": round(test.indices.size / size["users"], 1), "cpus": os.cpu_count(),
              "load_average_1min": round(os.getloadavg()[0], 1)}

    def evaluate(**kwargs):
        return evaluator.evaluate(user_vectors, item_vectors, train, test, KS, **kwargs)

    rows, model_seconds = [], {}
    for block_mb in (64, 256, 1024):
        timing = _timed(lambda b=block_mb: evaluate(baselines=(), n_bootstrap=0, max_block_bytes=b << 20), repeats)
        model_seconds[block_mb] = timing["median_s"]
        rows.append({"name": "exact_ranking_metrics", **common, "max_block_mb": block_mb, **timing,
                     "users_per_s": round(n_users / timing["median_s"])})
    subset = rows_with_test[:reference_users]
    start = time.perf_counter()
    recall, ndcg = naive_loop(user_vectors, item_vectors, train, test, subset)
    per_user = (time.perf_counter() - start) / len(subset)
    top, _ = ranking.top_k(ranking.dot_scorer(user_vectors, item_vectors), subset, n_items, 20, train)
    fast = metrics.accuracy(top, csr.take(test, subset), [20])
    matches = bool(np.allclose(fast["recall@20"], recall) and np.allclose(fast["ndcg@20"], ndcg))
    rows.append({"name": "naive_loop", **common, "timed_users": len(subset), "extrapolated": True,
                 "extrapolated_s": round(per_user * n_users, 1), "users_per_s": round(1 / per_user),
                 "speedup_vs_naive": round(per_user * n_users / model_seconds[256], 1), "matches_reference": matches})
    popularity = np.bincount(train.indices, minlength=n_items)
    for name in baselines.NAMES:
        def rank_baseline(n=name):
            scorer = baselines.make(n, train, n_items, popularity)
            top_k, _ = ranking.top_k(scorer, rows_with_test, n_items, max(KS), train)
            metrics.accuracy(top_k, csr.take(test, rows_with_test), KS)
        rows.append({"name": f"baseline_{name}", **common, **_timed(rank_baseline)})
    rows.append({"name": "item_knn_fit", **common, **_timed(lambda: baselines.ItemKNN(train, n_items))})
    per_user_metrics = {f"m{i}": np.random.default_rng(i).random(n_users) for i in range(2 * len(KS))}
    rows.append({"name": "bootstrap", **common, "resamples": 1000, "metrics": len(per_user_metrics), **_timed(
        lambda: (bootstrap.bootstrap_ci(per_user_metrics, 1000), bootstrap.paired_comparison(
            per_user_metrics, {k: v[::-1] for k, v in per_user_metrics.items()}, 1000)))})
    rows.append({"name": "full_evaluation", **common, "baselines": list(baselines.NAMES), "resamples": 1000,
                 **_timed(lambda: evaluate(n_bootstrap=1000))})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds")
    for row in run(parser.parse_args().smoke):
        print(json.dumps(row))
