"""Training cost against the catalogue size: the shipped two-tower recipe (``configs/two_tower.py``) trained by
``training.fit`` on the same synthetic log at 4k, 200k, 1M and 10M items, with dense Adam (``sparse_updates="off"``)
and with the lazy optimizer (``"on"``, ``retrieval/optimizers.py``), in one run.

The log is the same at every size: ``examples`` next-item examples (history of 50, as the recipe) whose items are
drawn uniformly from the catalogue, so a batch looks up the same number of rows whatever the size; only the tables
grow (two ``[V, 128]`` item tables: the item tower's and the history's). Each (size, mode) trains in a fresh
subprocess (peak RSS ``ru_maxrss`` is its own) with the recipe's batch size (1024) and jit_compile "auto" (XLA on):
``warmup`` steps (tracing, XLA), then ``timed`` steps timed by a ``training.ProgressLogger`` subclass
(``bench_training._timed_logger``). Reported: examples per wall second over the timed steps, per CPU second, peak
RSS, the memory the tables and Adam's two slots need (``table_gb``), and ``ratio_vs_smallest``: examples/s over the
same mode's rate at the smallest size (4k) in this run. Target (issue 29): sparse at 1M >= 0.7x sparse at 4k. A size
whose tables and slots exceed ``MEMORY_FRACTION`` of this machine's memory is reported as skipped, not run.

    python -m benchmarks.bench_catalogue [--smoke] [--no-record] [--sizes=4000,200000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

from benchmarks.record import add_record_flag, record, should_record
from retrieval.memory import peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
FULL = {"sizes": (4_000, 200_000, 1_000_000, 10_000_000), "examples": 40_960, "warmup": 10, "timed": 20}
SMOKE = {"sizes": (300, 3_000), "examples": 512, "warmup": 2, "timed": 4, "batch_size": 32}
MODES = ("off", "on")
TARGET_RATIO, TARGET_SIZE = 0.7, 1_000_000
MEMORY_FRACTION = 0.6
MAX_HISTORY = 50


def table_gb(items: int, config) -> float:
    """Bytes of the item tables and Adam's two slots per table (float32), in GB."""
    dims = config.model.item_tower.id_embedding_dim + config.model.user_tower.history_embedding_dim
    return 3 * items * dims * 4 / 1e9


def _shipped_config(smoke: bool):
    from configs.two_tower import get_config

    config = get_config()
    if smoke:
        config.train.batch_size = SMOKE["batch_size"]
        config.model.embedding_dim = config.model.item_tower.id_embedding_dim = 16
        config.model.user_tower.history_embedding_dim, config.model.user_tower.hidden_units = 16, (16,)
    return config


def _log(items: int, examples: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Next-item examples over ``items`` catalogue items (indices 2 .. items + 1), uniform draws."""
    rng = np.random.default_rng(seed)
    history = rng.integers(2, items + 2, (examples, MAX_HISTORY), dtype=np.int32)
    return {"user": rng.integers(2, 1002, examples, dtype=np.int32), "history": history,
            "history_length": np.full(examples, MAX_HISTORY, np.int32),
            "label": rng.integers(2, items + 2, examples, dtype=np.int32)}


def _vocabulary(size: int, counts: np.ndarray):
    from retrieval.data.vocab import OOV, PAD, Vocabulary

    ids = np.empty(size + 2, dtype=object)
    ids[:2] = PAD, OOV
    ids[2:] = np.char.add("i", np.arange(size).astype(str)).astype(object)
    return Vocabulary(ids, np.maximum(counts[:size + 2], 1) * (np.arange(size + 2) >= 2))


def child(items: int, mode: str, smoke: bool) -> dict:
    """Trains the recipe at ``items`` items with ``sparse_updates=mode`` in this process; rates and peak RSS."""
    import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)
    from benchmarks.bench_training import _timed_logger
    from retrieval import models, training

    settings = SMOKE if smoke else FULL
    config = _shipped_config(smoke)
    examples = _log(items, settings["examples"])
    counts = np.bincount(examples["label"], minlength=items + 2)
    model = models.build_model(config.model, _vocabulary(items, counts), _vocabulary(1000, np.ones(1002, int)))
    train = config.train
    train.sparse_updates, train.early_stopping_patience = mode, 0
    end = settings["warmup"] + settings["timed"]
    train.epochs = -(-end * train.batch_size // settings["examples"])
    train.log_every_steps, train.checkpoint_every_steps = 1, 10 ** 9
    logger = _timed_logger(end)
    with mock.patch.object(training, "ProgressLogger", logger):
        training.fit(model, examples, train)
    (wall0, cpu0), (wall1, cpu1) = logger.marks[settings["warmup"]], logger.marks[end]
    examples_timed = settings["timed"] * train.batch_size
    return {"examples_per_s": examples_timed / (wall1 - wall0), "examples_per_cpu_s": examples_timed / (cpu1 - cpu0),
            "lazy": bool(getattr(model.optimizer, "sparse_updates", False)), "peak_rss_mb": peak_rss_mb()}


def _spawn(items: int, mode: str, smoke: bool) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_catalogue", f"--child={items},{mode}"]
    done = subprocess.run(command + (["--smoke"] if smoke else []), cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if done.returncode != 0:
        raise RuntimeError(f"child {items},{mode} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _memory_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def run(smoke: bool, sizes=None) -> list[dict]:
    """One row per (size, mode); ``ratio_vs_4k`` against the same mode at the smallest size."""
    settings = SMOKE if smoke else FULL
    config = _shipped_config(smoke)
    rows, start = [], time.perf_counter()
    for items in sizes or settings["sizes"]:
        need = table_gb(items, config)
        for mode in MODES:
            row = {"name": f"{items}_items_sparse_{mode}", "items": items, "sparse_updates": mode,
                   "examples": settings["examples"], "batch_size": config.train.batch_size,
                   "timed_steps": settings["timed"], "table_gb": round(need, 2)}
            if need > MEMORY_FRACTION * _memory_gb():
                rows.append({**row, "skipped": f"tables + Adam slots need {need:.1f} GB, more than "
                                               f"{MEMORY_FRACTION:.0%} of this machine's {_memory_gb():.1f} GB"})
                continue
            measured = _spawn(items, mode, smoke)
            rows.append({**row, "examples_per_s": round(measured["examples_per_s"]),
                         "examples_per_cpu_s": round(measured["examples_per_cpu_s"]),
                         "peak_rss_mb": round(measured["peak_rss_mb"]), "lazy_optimizer": measured["lazy"]})
    for mode in MODES:
        timed = [row for row in rows if row["sparse_updates"] == mode and "examples_per_s" in row]
        for row in timed:
            row["ratio_vs_smallest"] = round(row["examples_per_s"] / timed[0]["examples_per_s"], 3)
    target = [row for row in rows if row["items"] == TARGET_SIZE and row["sparse_updates"] == "on"
              and "ratio_vs_smallest" in row]
    if target:
        target[0].update(target_ratio=TARGET_RATIO, meets_target=target[0]["ratio_vs_smallest"] >= TARGET_RATIO)
    rows[0]["wall_s"] = round(time.perf_counter() - start, 1)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", help="items,mode: one measurement in this process (internal)")
    parser.add_argument("--sizes", help="comma-separated catalogue sizes (default: 4k, 200k, 1M, 10M)")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if args.child:
        items, mode = args.child.split(",")
        print(json.dumps(child(int(items), mode, args.smoke)))
        return
    rows = run(args.smoke, [int(s) for s in args.sizes.split(",")] if args.sizes else None)
    print(json.dumps(rows, indent=1))
    if should_record(args):
        record("catalogue", rows, "python -m benchmarks.bench_catalogue" + (f" --sizes={args.sizes}" if args.sizes
                                                                             else ""))


if __name__ == "__main__":
    main()
