"""Training cost against the catalogue size: the shipped two-tower recipe (``configs/two_tower.py``) trained by
``training.fit`` on the same synthetic log at 4k, 200k, 1M and 10M items, in one run, in three modes: dense Adam
(``sparse_updates="off"``, what "auto" picks below 30,000 rows), lazy Adam (``"on"``, what "auto" picks from 30,000
rows: ``retrieval/optimizers.py``'s ``CatchUpAdam``) and lazy row-wise Adagrad (``"rowwise"``:
``optimizer="rowwise_adagrad"``, ``sparse_updates="on"``).

The log is the same at every size: ``examples`` next-item examples (history of 50, as the recipe) whose items are
drawn from the catalogue by ``--distribution``, so a batch looks up the same number of rows whatever the size
(51,200 history rows and 1,024 labels); only the tables grow (two ``[V, 128]`` item tables: the item tower's and the
history's). The lazy step's cost follows the *distinct* rows a batch touches, which the distribution sets:

- ``uniform`` (default): every item equally likely: distinct history rows per batch at most 4k at 4k items, ~50k
  from 200k items: the worst case for the lazy step.
- ``zipf``: item of popularity rank ``r`` drawn with probability proportional to ``r ** -ZIPF_EXPONENT`` (1.0), rank 1
  at index 2, as ``Vocabulary`` orders real ids (most frequent first). Real catalogues are long-tailed: the
  rank-frequency slope of this repository's own training sets (ranks 1%-50%, head and singleton tail left out) is
  1.18 on set-splits/lastfm (13,973 items), 0.86 on set-splits/ml-1m, 0.76 on amazon-beauty; 1.0 (Zipf's law) sits
  in that range. Far fewer distinct rows per batch than uniform: the popular rows repeat.

Every row reports ``distinct_history_rows_per_batch`` and ``distinct_label_rows_per_batch`` (means over the log's
batches of ``batch_size`` examples: the rows each table's lazy step updates). Each (size, mode) trains in a fresh subprocess (peak
RSS ``ru_maxrss`` is its own) with the recipe's batch size (1024) and ``--jit_compile`` (default "auto": XLA on):
``warmup`` steps (tracing, XLA), then ``timed`` steps timed by a ``training.ProgressLogger`` subclass
(``common.timed_logger``). With ``--repeats=n`` every size and mode runs n times, sizes interleaved (repeat
1: 4k, 200k, 1M; repeat 2: ...), so that the ratios are paired in time on a shared machine: rates are medians
over the repeats, ratios medians of the per-repeat ratios.

Reported: examples per wall second over the timed steps (median, min, max), per CPU second (the process's CPU time,
all threads: steadier on a busy machine), peak RSS, the memory the tables and the optimizer's slots need (``table_gb``),
``ratio_vs_smallest``: examples/s over the same mode's rate at the smallest size, and ``ratio_vs_shipped_smallest``
(wall and per CPU second): over the shipped config's rate at the smallest size (dense Adam, "auto" at 4k). Target
(issue 29): the shipped config at 1M (lazy Adam) >= 0.7x the shipped config at 4k. A size whose tables and slots
exceed ``MEMORY_FRACTION`` of this machine's memory is reported as skipped, not run (10M with Adam on a 24 GiB
machine: 30.7 GB; row-wise Adagrad's 10.2 GB pass the check).

    python -m benchmarks.bench_catalogue [--smoke] [--no-record] [--sizes=4000,200000] [--modes=off,on]
        [--repeats=3] [--jit_compile=off] [--distribution=zipf]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

import numpy as np

from benchmarks.record import add_record_flag, record, should_record
from retrieval.jobs.config_checks import OPTIMIZER_SLOTS
from retrieval.memory import peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
FULL = {"sizes": (4_000, 200_000, 1_000_000, 10_000_000), "examples": 40_960, "warmup": 10, "timed": 20}
SMOKE = {"sizes": (300, 3_000), "examples": 512, "warmup": 2, "timed": 4, "batch_size": 32}
MODES = {"off": ("adam", "off"), "on": ("adam", "on"), "rowwise": ("rowwise_adagrad", "on"),
         "floor": ("adam", "on")}  # optimizer, sparse; "floor" also drops lazy Adam's per-row state (docstring)
SHIPPED_SMALL = "off"  # what sparse_updates "auto" picks at the smallest size
TARGET_RATIO, TARGET_SIZE = 0.7, 1_000_000
MEMORY_FRACTION = 0.6
MAX_HISTORY = 50
DISTRIBUTIONS = ("uniform", "zipf")
ZIPF_EXPONENT = 1.0


def table_gb(items: int, config, optimizer: str = "adam") -> float:
    """Bytes of the item tables and their slots under ``optimizer`` (float32; row-wise Adagrad's one float per row
    not counted), in GB."""
    dims = config.model.item_tower.id_embedding_dim + config.model.user_tower.history_embedding_dim
    return (1 + OPTIMIZER_SLOTS[optimizer]) * items * dims * 4 / 1e9


def _shipped_config(smoke: bool):
    from configs.two_tower import get_config

    config = get_config()
    if smoke:
        config.train.batch_size = SMOKE["batch_size"]
        config.model.embedding_dim = config.model.item_tower.id_embedding_dim = 16
        config.model.user_tower.history_embedding_dim, config.model.user_tower.hidden_units = 16, (16,)
    return config


def _items(rng: np.random.Generator, items: int, shape, distribution: str) -> np.ndarray:
    """Item indices (2 .. items + 1) drawn uniformly or by Zipf's law over the ranks (index 2 the most popular)."""
    if distribution == "uniform":
        return rng.integers(2, items + 2, shape, dtype=np.int32)
    cdf = np.cumsum(np.arange(1, items + 1, dtype=np.float64) ** -ZIPF_EXPONENT)
    ranks = np.searchsorted(cdf, rng.random(shape) * cdf[-1], side="right")
    return (np.minimum(ranks, items - 1) + 2).astype(np.int32)


def _log(items: int, examples: int, distribution: str = "uniform", seed: int = 0) -> dict[str, np.ndarray]:
    """Next-item examples over ``items`` catalogue items (indices 2 .. items + 1), drawn by ``distribution``."""
    rng = np.random.default_rng(seed)
    return {"user": rng.integers(2, 1002, examples, dtype=np.int32),
            "history": _items(rng, items, (examples, MAX_HISTORY), distribution),
            "history_length": np.full(examples, MAX_HISTORY, np.int32),
            "label": _items(rng, items, examples, distribution)}


def distinct_rows(log: dict[str, np.ndarray], batch_size: int) -> dict[str, float]:
    """Mean distinct history and label rows over the log's full batches of ``batch_size`` examples."""
    batches = range(0, len(log["label"]) - batch_size + 1, batch_size)
    return {f"distinct_{name}_rows_per_batch": round(float(np.mean(
        [len(np.unique(log[name][start:start + batch_size])) for start in batches]))) for name in ("history", "label")}


def _vocabulary(size: int, counts: np.ndarray):
    from retrieval.data.vocab import OOV, PAD, Vocabulary

    ids = np.empty(size + 2, dtype=object)
    ids[:2] = PAD, OOV
    ids[2:] = np.char.add("i", np.arange(size).astype(str)).astype(object)
    return Vocabulary(ids, np.maximum(counts[:size + 2], 1) * (np.arange(size + 2) >= 2))


def stateless_step(optimizer, gradient, rows, variable, lr):
    """The floor mode's ``_sparse_step`` for ``LazyAdam`` (and ``CatchUpAdam``): the rows' decrement ``lr * g``, no
    slots read or written."""
    return lr * gradient


def child(items: int, mode: str, smoke: bool, jit_compile: str = "auto", distribution: str = "uniform") -> dict:
    """Trains the recipe at ``items`` items in ``mode`` (``MODES``) in this process; rates and peak RSS."""
    import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)
    from benchmarks.common import marked_step, timed_logger
    from retrieval import models, training
    from retrieval.optimizers import LazyAdam

    settings = SMOKE if smoke else FULL
    config = _shipped_config(smoke)
    examples = _log(items, settings["examples"], distribution)
    counts = np.bincount(examples["label"], minlength=items + 2)
    model = models.build_model(config.model, _vocabulary(items, counts), _vocabulary(1000, np.ones(1002, int)))
    train = config.train
    (train.optimizer, train.sparse_updates), train.early_stopping_patience = MODES[mode], 0
    train.jit_compile = jit_compile
    end = settings["warmup"] + settings["timed"]
    train.epochs = -(-end * train.batch_size // settings["examples"])
    train.checkpoint_every_steps = 10 ** 9  # (log_every_steps stays the recipe's: it bounds steps_per_execution)
    logger = timed_logger(end)
    stateless = mock.patch.object(LazyAdam, "_sparse_step", stateless_step)
    with mock.patch.object(training, "ProgressLogger", logger), stateless if mode == "floor" else nullcontext():
        training.fit(model, examples, train)
    first, last = marked_step(logger.marks, settings["warmup"]), marked_step(logger.marks, end)
    (wall0, cpu0), (wall1, cpu1) = logger.marks[first], logger.marks[last]
    examples_timed = (last - first) * train.batch_size
    return {"examples_per_s": examples_timed / (wall1 - wall0), "examples_per_cpu_s": examples_timed / (cpu1 - cpu0),
            "lazy": bool(getattr(model.optimizer, "sparse_updates", False)),
            "optimizer": type(model.optimizer).__name__, "peak_rss_mb": peak_rss_mb()}


def _spawn(items: int, mode: str, smoke: bool, jit_compile: str, distribution: str) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_catalogue", f"--child={items},{mode}",
               f"--jit_compile={jit_compile}", f"--distribution={distribution}"]
    done = subprocess.run(command + (["--smoke"] if smoke else []), cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if done.returncode != 0:
        raise RuntimeError(f"child {items},{mode} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _memory_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def _median(values: list[float]) -> float:
    return float(np.median(values))


def run(smoke: bool, sizes=None, modes=tuple(MODES), repeats: int = 1, jit_compile: str = "auto",
        distribution: str = "uniform") -> list[dict]:
    """One row per (size, mode), measured ``repeats`` times with the sizes interleaved; ratios against the smallest
    size's rates in the same repeat (module docstring)."""
    settings = SMOKE if smoke else FULL
    config = _shipped_config(smoke)
    sizes = list(sizes or settings["sizes"])
    rows, start, load_before = {}, time.perf_counter(), os.getloadavg()
    for items in sizes:
        touched = None  # distinct rows per batch, of a size that runs
        for mode in modes:
            need = table_gb(items, config, MODES[mode][0])
            name = f"{items}_items_sparse_{mode}" + ("" if distribution == "uniform" else f"_{distribution}")
            row = {"name": name, "items": items, "sparse_updates": mode,
                   "optimizer": MODES[mode][0], "jit_compile": jit_compile, "distribution": distribution,
                   "examples": settings["examples"],
                   "batch_size": config.train.batch_size, "timed_steps": settings["timed"], "repeats": repeats,
                   "table_gb": round(need, 2)}
            if need > MEMORY_FRACTION * _memory_gb():
                row["skipped"] = (f"tables + optimizer slots need {need:.1f} GB, more than {MEMORY_FRACTION:.0%} of "
                                  f"this machine's {_memory_gb():.1f} GB")
            else:
                touched = touched or distinct_rows(_log(items, settings["examples"], distribution),
                                                   config.train.batch_size)
                row.update(touched)
            rows[items, mode] = row
    measured = {key: [] for key, row in rows.items() if "skipped" not in row}
    for _ in range(repeats):
        for key in measured:
            measured[key].append(_spawn(*key, smoke, jit_compile, distribution))
    smallest = min(items for items, _ in measured) if measured else None
    for (items, mode), runs in measured.items():
        wall = [run_["examples_per_s"] for run_ in runs]
        cpu = [run_["examples_per_cpu_s"] for run_ in runs]
        row = rows[items, mode]
        row.update(examples_per_s=round(_median(wall)), examples_per_s_min=round(min(wall)),
                   examples_per_s_max=round(max(wall)), examples_per_cpu_s=round(_median(cpu)),
                   peak_rss_mb=round(max(run_["peak_rss_mb"] for run_ in runs)),
                   lazy_optimizer=runs[0]["lazy"], optimizer_class=runs[0]["optimizer"])
        for name, base in (("ratio_vs_smallest", (smallest, mode)), ("ratio_vs_shipped_smallest",
                                                                       (smallest, SHIPPED_SMALL))):
            if base in measured:
                for unit in ("examples_per_s", "examples_per_cpu_s"):
                    ratios = [run_[unit] / ref[unit] for run_, ref in zip(runs, measured[base], strict=True)]
                    row[name + ("" if unit == "examples_per_s" else "_cpu")] = round(_median(ratios), 3)
    target = rows.get((TARGET_SIZE, "on"), {})
    if "ratio_vs_shipped_smallest" in target:
        target.update(target_ratio=TARGET_RATIO,
                      meets_target=target["ratio_vs_shipped_smallest"] >= TARGET_RATIO)
    out = list(rows.values())
    out[0].update(wall_s=round(time.perf_counter() - start, 1), load_average_before=list(np.round(load_before, 2)),
                  load_average_after=list(np.round(os.getloadavg(), 2)))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", help="items,mode: one measurement in this process (internal)")
    parser.add_argument("--sizes", help="comma-separated catalogue sizes (default: 4k, 200k, 1M, 10M)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--repeats", type=int, default=1, help="measurements per (size, mode), sizes interleaved")
    parser.add_argument("--jit_compile", default="auto", choices=("auto", "on", "off"), help="train.jit_compile")
    parser.add_argument("--distribution", default="uniform", choices=DISTRIBUTIONS,
                        help=f"item draws of the synthetic log (zipf: exponent {ZIPF_EXPONENT} over the ranks)")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if args.child:
        items, mode = args.child.split(",")
        print(json.dumps(child(int(items), mode, args.smoke, args.jit_compile, args.distribution)))
        return
    modes = tuple(args.modes.split(","))
    if not set(modes) <= set(MODES):
        parser.error(f"--modes: one or more of {', '.join(MODES)}")
    rows = run(args.smoke, [int(s) for s in args.sizes.split(",")] if args.sizes else None, modes, args.repeats,
               args.jit_compile, args.distribution)
    print(json.dumps(rows, indent=1))
    if should_record(args):
        flags = [f"--{name}={value}" for name, value, default in (
            ("sizes", args.sizes, None), ("modes", args.modes, ",".join(MODES)), ("repeats", args.repeats, 1),
            ("jit_compile", args.jit_compile, "auto"), ("distribution", args.distribution, "uniform"))
            if value != default]
        record("catalogue", rows, " ".join(["python -m benchmarks.bench_catalogue", *flags]))


if __name__ == "__main__":
    main()
