"""Item2Vec speed and quality: ``retrieval.models.item2vec.train_item2vec`` vs gensim's word2vec (skip-gram, NEG).

Target (issue 27): ours at <= 0.5x gensim's wall time, recall@20 >= gensim's, peak RSS <= 1.5x gensim's.

Data: MovieLens 1M (users 1-2999) ``ratings.dat`` from ``../shared/datasets/``, each user's ratings sorted by
timestamp, leave-last-one-out (the last item of a user with >= 2 ratings is the test item). ``--smoke``: the
synthetic generator at a tiny size. Both sides get the same training sequences and the settings of
``default_item2vec_config()``: dimension, window, negatives, epochs, subsampling ``sample=t``, learning rate 0.025
-> 0.0001, ``min_count=1`` (gensim: ``sg=1, hs=0, ns_exponent=0.75, workers=2``), and as many threads: our
``threads=2`` (Hogwild, as gensim's workers) unless ``--overrides`` says otherwise.

Two matched comparisons. ``ours`` vs ``gensim``: word2vec's dynamic window on both sides (our default
``shrink_window=True``, a window ``b ~ U{1..window}`` per user and epoch; gensim's default ``shrink_windows=True``,
per target word: the same expected weighting of pairs, ``(window + 1) / (2 * window)`` of them).
``ours_fixed_window`` vs ``gensim_fixed_window``: every pair within ``window`` on both sides
(``shrink_window=False`` / ``shrink_windows=False``). ``--smoke`` runs the first comparison only.

Quality: next-item recall@20 (= hit rate, one test item per user), full corpus, the user's training items excluded,
test items unknown to training dropped. Query = mean of the vectors of the user's last 3 training items, scored by
cosine against every item: the same rule for both sides, and what an exported Item2Vec run serves with
``max_history=3``.

Timing: each repeat is a fresh subprocess per side, sides alternating, so peak RSS (``VmHWM``) is per side. Repeat
``r`` seeds both sides with ``seed + r``, so the recall medians include seed-to-seed variation (about +-0.005 here).
``train_s`` is the training call only (ours: ``train_item2vec``, i.e. pair building, tracing and the epochs; gensim:
the ``Word2Vec(...)`` constructor, i.e. vocabulary and the epochs), after imports and data loading;
``train_cpu_s`` is the process CPU time (all threads) over the same span. Our training loop is Numba-compiled
and cached on disk (as gensim's C extension is compiled at install): the parent compiles it once before the repeats
(``compile_s``; ~0.3 s when the cache is already there), so every timed child loads it from the cache (~0.3 s, timed).
Rows: median (min-max) of the repeats; on ours, ``time_ratio_vs_<side>`` = our median / theirs
(``cpu_ratio_vs_<side>`` for CPU time, ``rss_ratio_vs_<side>`` for peak RSS), ``recall_diff_vs_<side>`` and
``meets_target`` (all three parts of the target).

Unless ``--smoke`` or ``--no-record``, the rows are also recorded (``benchmarks.record``): appended to
``results.json``'s ``separate_runs`` and on the ``RESULTS.md`` page rewritten from it, with the load average before the
run in the note.

    python -m benchmarks.bench_item2vec [--smoke] [--overrides='{"threads": 1}'] [--no-record]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import ml_collections
import numpy as np
import pandas as pd

from benchmarks import common
from benchmarks.record import add_record_flag, record, should_record
from retrieval.data import Vocabulary, leave_last_n_out, read_interactions, synthetic
from retrieval.memory import peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "ml-1m-partial" / "ratings.dat"
K, QUERY_ITEMS = 20, 3
SIDES = ("ours", "gensim", "ours_fixed_window", "gensim_fixed_window")
MATCHED = {"ours": "gensim", "ours_fixed_window": "gensim_fixed_window"}
GENSIM_WORKERS = 2
TIME_TARGET, RSS_TARGET = 0.5, 1.5
FULL = {"repeats": 3, "overrides": {"threads": GENSIM_WORKERS}}
SMOKE = {"repeats": 1, "overrides": {"threads": GENSIM_WORKERS, "epochs": 2, "batch_size": 256, "dim": 16}}


def load_split(smoke: bool) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(train, test, dataset name): leave-last-one-out, train sorted by user then timestamp (stable)."""
    if smoke:
        frame, _, _ = synthetic.generate(num_users=150, num_items=120, interactions_per_user=15, seed=0)
        name = "synthetic-smoke"
    else:
        frame, name = read_interactions(DATA), "ml-1m-partial"
    split = leave_last_n_out(frame, 1)
    return split.train.sort_values(["user_id", "timestamp"], kind="stable"), split.test, name


def config(overrides: dict) -> dict:
    """``default_item2vec_config()`` with ``overrides``, as a plain dict (children get it as JSON, so the gensim
    child never imports TensorFlow)."""
    from retrieval.models.item2vec import default_item2vec_config

    c = default_item2vec_config()
    c.update(overrides)
    return c.to_dict()


def recall_at_k(vectors: np.ndarray, train: pd.DataFrame, test: pd.DataFrame, vocab: Vocabulary, k: int = K,
                query_items: int = QUERY_ITEMS, block: int = 1024) -> tuple[float, int]:
    """Next-item recall@k (see the module docstring) of item ``vectors`` by vocabulary index; (recall, users)."""
    users = Vocabulary.from_ids(train["user_id"])
    train_users, train_items = users.lookup(train["user_id"]), vocab.lookup(train["item_id"])
    order = np.argsort(train_users, kind="stable")  # by user index, time order kept within a user
    train_users, train_items = train_users[order], train_items[order]
    test_users, test_items = users.lookup(test["user_id"]), vocab.lookup(test["item_id"])
    keep = (test_users >= 2) & (test_items >= 2)
    test_users, test_items = test_users[keep], test_items[keep]
    ends = np.searchsorted(train_users, test_users, side="right")
    starts = np.searchsorted(train_users, test_users, side="left")
    position = np.arange(query_items)[None, :] + np.maximum(ends - query_items, starts)[:, None]
    valid = position < ends[:, None]
    queries = (vectors[train_items[np.minimum(position, len(train_items) - 1)]] * valid[..., None]).sum(1)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    hits = 0
    for lo in range(0, len(test_users), block):
        rows = slice(lo, lo + block)
        scores = queries[rows] @ unit.T
        scores[:, :2] = -np.inf
        lengths = (ends - starts)[rows]
        owner = np.repeat(np.arange(len(scores)), lengths)
        offsets = np.repeat(starts[rows] - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
        scores[owner, train_items[offsets]] = -np.inf
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        hits += int((top == test_items[rows, None]).any(axis=1).sum())
    return hits / max(len(test_users), 1), len(test_users)


def _train_ours(train: pd.DataFrame, vocab: Vocabulary, c) -> np.ndarray:
    from retrieval.models.item2vec import train_item2vec

    users = Vocabulary.from_ids(train["user_id"])
    return train_item2vec(c, users.lookup(train["user_id"]), vocab.lookup(train["item_id"]),
                          train["timestamp"].to_numpy(), vocab)


def _train_gensim(train: pd.DataFrame, vocab: Vocabulary, c, shrink: bool):
    from gensim.models import Word2Vec

    sequences = train.groupby("user_id", sort=False)["item_id"].apply(list).tolist()

    def fit():
        model = Word2Vec(sequences, vector_size=c.dim, window=c.window, min_count=1, sg=1, hs=0,
                         negative=c.negatives, ns_exponent=c.noise_exponent, sample=c.subsample, epochs=c.epochs,
                         alpha=c.learning_rate, min_alpha=c.min_learning_rate, workers=GENSIM_WORKERS, seed=c.seed,
                         shrink_windows=shrink)
        vectors = np.zeros([vocab.size, c.dim], np.float32)
        vectors[2:] = model.wv.vectors[[model.wv.get_index(item) for item in vocab.ids[2:]]]
        return vectors

    return fit


def child(side: str, smoke: bool, settings: dict) -> dict:
    """One measured training of ``side`` in this process with the item2vec config ``settings``: times, recall,
    memory."""
    train, test, _ = load_split(smoke)
    vocab = Vocabulary.from_ids(train["item_id"])
    c = ml_collections.ConfigDict(settings)
    c.shrink_window = not side.endswith("fixed_window")
    if side.startswith("ours"):
        import retrieval.models.item2vec  # noqa: F401  (TensorFlow import and setup are not timed)

        fit = lambda: _train_ours(train, vocab, c)  # noqa: E731
    else:
        fit = _train_gensim(train, vocab, c, shrink=c.shrink_window)
    rss_before = peak_rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    vectors = fit()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    recall, users = recall_at_k(vectors, train, test, vocab)
    return {"train_s": wall, "train_cpu_s": cpu, "recall": recall, "users": users,
            "peak_rss_mb": peak_rss_mb(), "peak_rss_before_training_mb": rss_before}


def _spawn(side: str, smoke: bool, settings: dict) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_item2vec", f"--child={side}",
               f"--settings={json.dumps(settings)}"] + (["--smoke"] if smoke else [])
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{side} child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(side: str, dataset: str, results: list[dict], c: dict) -> dict:
    row = {"name": side, "dataset": dataset, "runs": len(results), "users": results[0]["users"],
           **{key: c[key] for key in ("dim", "window", "negatives", "epochs", "subsample")},
           "threads": c["threads"] if side.startswith("ours") else GENSIM_WORKERS,
           "shrink_window": not side.endswith("fixed_window")}
    for key in ("train_s", "train_cpu_s", "recall", "peak_rss_mb", "peak_rss_before_training_mb"):
        stats = common.spread([r[key] for r in results])
        row[key] = round(stats["median"], 4)
        if len(results) > 1 and key in ("train_s", "train_cpu_s", "recall"):
            row[f"{key}_min"], row[f"{key}_max"] = round(stats["min"], 4), round(stats["max"], 4)
    return row


def run(smoke: bool, overrides: dict | None = None) -> list[dict]:
    """Rows for every side (see the module docstring); each of ours carries its ratios to the matched gensim."""
    settings = SMOKE if smoke else FULL
    c = config({**settings["overrides"], **(overrides or {})})
    _, _, dataset = load_split(smoke)
    from retrieval.models import item2vec_train  # no TensorFlow: compiles (or loads) the cached training loop

    compile_s = item2vec_train.compile_loop()
    have_gensim = importlib.util.find_spec("gensim") is not None
    sides = [s for s in SIDES[:2 if smoke else None] if have_gensim or s.startswith("ours")]
    results = {side: [] for side in sides}
    for repeat in range(settings["repeats"]):
        for side in sides:
            results[side].append(_spawn(side, smoke, {**c, "seed": c["seed"] + repeat}))
    rows = {side: _row(side, dataset, results[side], c) for side in sides}
    for ours, theirs in MATCHED.items():
        if ours in rows and theirs in rows:
            mine, other = rows[ours], rows[theirs]
            mine[f"time_ratio_vs_{theirs}"] = round(mine["train_s"] / other["train_s"], 3)
            mine[f"cpu_ratio_vs_{theirs}"] = round(mine["train_cpu_s"] / other["train_cpu_s"], 3)
            mine[f"recall_diff_vs_{theirs}"] = round(mine["recall"] - other["recall"], 4)
            mine[f"rss_ratio_vs_{theirs}"] = round(mine["peak_rss_mb"] / other["peak_rss_mb"], 3)
            mine["meets_target"] = bool(mine["train_s"] <= TIME_TARGET * other["train_s"]
                                        and mine["recall"] >= other["recall"]
                                        and mine["peak_rss_mb"] <= RSS_TARGET * other["peak_rss_mb"])
    if "ours" in rows:
        rows["ours"]["compile_s"] = round(compile_s, 2)
    out = list(rows.values())
    if not have_gensim:
        out += [{"name": side, "dataset": dataset, "skipped": "gensim is not installed (pip install gensim)"}
                for side in SIDES[:2 if smoke else None] if not side.startswith("ours")]
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic data, seconds")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--overrides", default="{}", help="JSON object of item2vec config keys to change")
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    add_record_flag(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.smoke, json.loads(args.settings))))
    else:
        load_before = [round(x, 2) for x in os.getloadavg()]
        results = run(args.smoke, json.loads(args.overrides))
        for result in results:
            print(json.dumps(result))
        if should_record(args):
            record("item2vec", results, "python -m benchmarks.bench_item2vec " + " ".join(sys.argv[1:]),
                   note=f"Load average (1, 5, 15 min) before the run: {load_before}; the heading's is at its end.")
