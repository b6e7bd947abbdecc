"""Training throughput of the two-tower model: our pipeline vs a plain TFRS model fed the way the TFRS tutorials do.

The same model on both sides: ID-only item tower (d = 64, L2-normalised), user tower = masked mean of the embedded
history (50 items, the item tower's table) -> Dense(128, ReLU) -> Dense(64) -> L2 normalisation, in-batch softmax
at temperature 0.1 with accidental hits removed, Adam with the same warmup + cosine schedule
(``training.make_optimizer``), batch 1024, the same next-item examples of ``ml-1m-partial/ratings.dat``.

- ``ours``: ``build_model`` (``log_q="none"``, no example age, so the objective is plain in-batch softmax) trained by
  ``training.fit`` on the ``next_item_examples`` int arrays (``to_dataset``: one permutation per epoch cut into
  batches of row numbers, one gather per batch), with its defaults: ``jit_compile="auto"`` XLA-compiles this
  sampler-free step and sums the embedding gradients densely instead of de-duplicating 52k gathered rows with
  TensorFlow's CPU segment sum (the largest op of the uncompiled step, on both sides); the compiled step pools the
  history as sums over 10-position chunks, which XLA fuses with the lookup (``layers.sum_over_positions``).
- ``tfrs``: a ``tfrs.Model`` with ``tfrs.tasks.Retrieval`` fed a ``tf.data.Dataset`` of string features (user id,
  history as a ``""``-padded string tensor [N, 50], item id), ``StringLookup`` inside the towers, masked
  ``GlobalAveragePooling1D``; pipeline ``shuffle(N) -> batch -> cache -> prefetch`` as in the tutorials. The
  tutorials compute ``FactorizedTopK`` only in evaluation (``compute_metrics=not training``): no metric is computed
  while training on either side. The loss is the mean (not TFRS's default sum) so both logs show the same number.

Timing: each repeat is a fresh subprocess per side, so peak RSS (``ru_maxrss`` of the child) is per side; the
order of the two sides alternates from one repeat to the next (ours first, then TFRS first, ...), so a drift of the
machine's load does not always fall on the same side. Both sides train under the same callbacks
(``training.StopAtStep`` and a ``training.ProgressLogger`` subclass that notes the wall clock and the process CPU
time every ``window`` steps and stops training at the last step timed; ``fit`` gets it by patching the name, nothing
else changes) and are timed over the same steps: ``first_epoch``, steps ``window .. 3 window`` (after ``window``
warm-up steps; TFRS builds its batches from strings there, before its cache) and ``steady``, ``windows`` spans of
``window`` steps from the first multiple of ``window`` in the second epoch (a whole epoch of warm-up on both sides:
tracing, XLA, allocator, TFRS's cache). Before, ours was timed in its first epoch after 200 steps and TFRS in its
second: an unequal warm-up worth ~10% on ours.

Throughput: per wall second over the whole span (``examples_per_s``), per wall second in the fastest of its
``window``-step parts (``best_window_examples_per_s``: what the pipeline does when no other job takes the cores, as
``timeit`` takes the best of its runs; the two sides get the same rule), and per CPU second of the whole process,
all threads (``examples_per_cpu_s``: the cost, which moves less than wall time when other jobs share the cores).
Rows: median of the repeats with min and max. ``*ratio_vs_tfrs``: the median (min-max) over repeats of the paired
ratio (this repeat's ours / this repeat's TFRS, steady state). Target: ours >= 2x on every repeat, not only the
median: ``meets_target`` on the whole-span wall ratio, ``meets_target_best_window`` on the best-window one.

Unless ``--smoke`` or ``--no-record``, the rows are also recorded (``benchmarks.record``): appended to
``results.json``'s ``separate_runs`` and on the ``RESULTS.md`` page rewritten from it.

    python -m benchmarks.bench_training [--smoke] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

from benchmarks import common
from benchmarks.record import add_record_flag, record, should_record
from retrieval.data import Vocabulary, next_item_examples, read_interactions, synthetic
from retrieval.memory import peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "ml-1m-partial" / "ratings.dat"
MAX_HISTORY, DIM, HIDDEN, TEMPERATURE = 50, 64, 128, 0.1
FULL = {"batch_size": 1024, "window": 100, "windows": 4, "repeats": 4}
SMOKE = {"batch_size": 64, "window": 4, "windows": 2, "repeats": 1}
TARGET_RATIO = 2.0


def load_examples(smoke: bool) -> tuple[dict[str, np.ndarray], Vocabulary, Vocabulary, str]:
    """Next-item examples (all interactions, no split: this is a speed test), the vocabularies and the data name."""
    if smoke:
        frame, _, _ = synthetic.generate(num_users=100, num_items=120, interactions_per_user=20, seed=0)
        name = "synthetic-smoke"
    else:
        frame, name = read_interactions(DATA), "ml-1m-partial"
    users, items = Vocabulary.from_ids(frame["user_id"]), Vocabulary.from_ids(frame["item_id"])
    examples = next_item_examples(users.lookup(frame["user_id"]), items.lookup(frame["item_id"]),
                                  frame["timestamp"].to_numpy(), max_history=MAX_HISTORY)
    return examples, items, users, name


def _train_config(batch_size: int, window: int, epochs: int):
    from retrieval import training

    config = training.default_train_config()
    config.batch_size, config.epochs, config.log_every_steps = batch_size, epochs, window
    return config


def _rates(marks: dict, start: int, end: int, window: int, batch_size: int) -> dict[str, float]:
    """Examples per wall second and per CPU second between two marked steps (the first marks at or after them), and
    per wall second in the fastest of the ``window``-step parts of that span (``best_wall``)."""
    def per_second(a: int, b: int, clock: int) -> float:
        a, b = common.marked_step(marks, a), common.marked_step(marks, b)
        return (b - a) * batch_size / (marks[b][clock] - marks[a][clock])

    parts = [per_second(a, a + window, 0) for a in range(start, end, window)]
    return {"wall": per_second(start, end, 0), "cpu": per_second(start, end, 1), "best_wall": max(parts)}


def _phases(marks: dict, windows: dict, window: int, batch_size: int) -> dict[str, dict[str, float]]:
    return {phase: _rates(marks, start, end, window, batch_size) for phase, (start, end) in windows.items()}


def _windows(num_examples: int, batch_size: int, window: int, count: int) -> tuple[dict[str, tuple[int, int]], int]:
    """The timed steps of both sides, ``{"first_epoch": (window, 3 window), "steady": (s, s + count * window)}`` with
    ``s`` the first multiple of ``window`` in the second epoch, and the epochs they need."""
    steps_per_epoch = _check_window(num_examples, batch_size, window)
    steady = math.ceil(steps_per_epoch / window) * window
    if steady + count * window > 2 * steps_per_epoch:
        raise ValueError(f"{count} windows of {window} steps from step {steady} do not fit in the second epoch")
    windows = {"first_epoch": (window, 3 * window), "steady": (steady, steady + count * window)}
    return windows, math.ceil((steady + count * window) / steps_per_epoch)


def _check_window(num_examples: int, batch_size: int, window: int) -> int:
    """Steps per epoch; the warm-up and the two first-epoch windows must fit in the first epoch."""
    steps_per_epoch = math.ceil(num_examples / batch_size)
    if 3 * window > steps_per_epoch:
        raise ValueError(f"3 x {window} steps do not fit in an epoch of {steps_per_epoch} steps")
    return steps_per_epoch


def _ours(examples: dict, items: Vocabulary, users: Vocabulary, batch_size: int, window: int, count: int) -> dict:
    """Our pipeline: ``build_model`` + ``training.fit`` (its progress logger swapped for the timed subclass, nothing
    else); rates of the ``_windows`` steps."""
    from retrieval import models, training

    config = models.default_config()
    config.objective.log_q = "none"
    config.user_tower.use_example_age = False
    model = models.build_model(config, items, users)
    windows, epochs = _windows(len(examples["label"]), batch_size, window, count)
    logger = common.timed_logger(windows["steady"][1])
    with mock.patch.object(training, "ProgressLogger", logger):
        training.fit(model, examples, _train_config(batch_size, window, epochs))
    return _phases(logger.marks, windows, window, batch_size)


def _string_features(examples: dict, items: Vocabulary, users: Vocabulary) -> dict[str, np.ndarray]:
    """The examples as the TFRS tutorials hold them: original string ids, histories padded with ``""``."""
    item_ids = np.concatenate([["", ""], items.ids[2:]]).astype(object)
    return {"user_id": users.ids[examples["user"]], "history": item_ids[examples["history"]],
            "item_id": item_ids[examples["label"]]}


def _tfrs_model(item_ids: np.ndarray):
    import tensorflow as tf
    import tensorflow_recommenders as tfrs

    class TutorialModel(tfrs.Model):
        """Two towers over string features, built from Keras layers the way the TFRS tutorials do."""

        def __init__(self):
            super().__init__()
            # mask_token "" -> 0, one OOV index -> 1, known ids from 2: the same indices as our vocabulary.
            self.lookup = tf.keras.layers.StringLookup(vocabulary=list(item_ids), mask_token="")
            self.embedding = tf.keras.layers.Embedding(self.lookup.vocabulary_size(), DIM)
            self.pool = tf.keras.layers.GlobalAveragePooling1D()
            self.mlp = tf.keras.Sequential([tf.keras.layers.Dense(HIDDEN, activation="relu"),
                                            tf.keras.layers.Dense(DIM)])
            loss = tf.keras.losses.CategoricalCrossentropy(from_logits=True)
            self.task = tfrs.tasks.Retrieval(loss=loss, temperature=TEMPERATURE, remove_accidental_hits=True)

        def compute_loss(self, features, training=False):
            history = self.lookup(features["history"])
            pooled = self.pool(self.embedding(history), mask=history >= 2)
            query = tf.math.l2_normalize(self.mlp(pooled), axis=-1)
            labels = self.lookup(features["item_id"])
            candidates = tf.math.l2_normalize(self.embedding(labels), axis=-1)
            return self.task(query, candidates, candidate_ids=labels, compute_metrics=not training)

    return TutorialModel()


def _tfrs(examples: dict, items: Vocabulary, users: Vocabulary, batch_size: int, window: int, count: int) -> dict:
    """The TFRS tutorial way; rates of the ``_windows`` steps (the second epoch's from cached batches)."""
    import tensorflow as tf

    from retrieval import training

    n = len(examples["label"])
    windows, epochs = _windows(n, batch_size, window, count)
    end = windows["steady"][1]
    config = _train_config(batch_size, window, epochs)
    dataset = (tf.data.Dataset.from_tensor_slices(_string_features(examples, items, users))
               .shuffle(n, seed=config.seed).batch(batch_size).cache().prefetch(tf.data.AUTOTUNE))
    model = _tfrs_model(items.ids[2:])
    model.compile(optimizer=training.make_optimizer(config, config.epochs * math.ceil(n / batch_size)))
    logger = common.timed_logger(end)
    model.fit(dataset, epochs=config.epochs, callbacks=[training.StopAtStep(end), logger(window, batch_size, end)],
              verbose=0)
    return _phases(logger.marks, windows, window, batch_size)


def child(side: str, smoke: bool) -> dict:
    """One measurement in this process (run it in a fresh one): rates by phase and the peak RSS."""
    import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)

    settings = SMOKE if smoke else FULL
    examples, items, users, dataset = load_examples(smoke)
    measure = {"ours": _ours, "tfrs": _tfrs}[side]
    rates = measure(examples, items, users, settings["batch_size"], settings["window"], settings["windows"])
    return {"side": side, "dataset": dataset, "examples": len(examples["label"]), "rates": rates,
            "peak_rss_mb": peak_rss_mb()}


def _spawn(side: str, smoke: bool) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_training", f"--child={side}"] + (["--smoke"] if smoke else [])
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{side} child failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(smoke: bool) -> list[dict]:
    """Benchmark rows: ours, TFRS cached (the reference) and TFRS first epoch (see the module docstring)."""
    settings = SMOKE if smoke else FULL
    if not smoke and not DATA.exists():
        return [{"name": "two_tower_training", "skipped": f"file not found: {DATA}"}]
    start = time.perf_counter()
    children = {"ours": [], "tfrs": []}
    for repeat in range(settings["repeats"]):
        for side in ("ours", "tfrs") if repeat % 2 == 0 else ("tfrs", "ours"):
            children[side].append(_spawn(side, smoke))
    series = {"ours": ("ours", "steady", "build_model + training.fit, int index arrays"),
              "tfrs": ("tfrs", "steady", "tfrs.Model, string features + StringLookup, cached batches (epoch 2)"),
              "ours_first_epoch": ("ours", "first_epoch", "ours in its first epoch"),
              "tfrs_first_epoch": ("tfrs", "first_epoch", "the same TFRS model in its first epoch (before cache)")}
    first = children["ours"][0]
    rows = []
    for name, (side, phase, what) in series.items():
        timed = settings["windows"] * settings["window"] if phase == "steady" else 2 * settings["window"]
        row = {"name": name, "pipeline": what, "dataset": first["dataset"], "examples": first["examples"],
               "batch_size": settings["batch_size"], "timed_steps": timed, "repeats": settings["repeats"]}
        for clock, key, ratio in (("wall", "examples_per_s", "ratio_vs_tfrs"),
                                  ("best_wall", "best_window_examples_per_s", "best_window_ratio_vs_tfrs"),
                                  ("cpu", "examples_per_cpu_s", "cpu_ratio_vs_tfrs")):
            rates = common.spread([c["rates"][phase][clock] for c in children[side]])
            paired = common.spread([c["rates"][phase][clock] / t["rates"]["steady"][clock]
                                    for c, t in zip(children[side], children["tfrs"], strict=True)])
            row.update({key: round(rates["median"]), f"{key}_min": round(rates["min"]),
                        f"{key}_max": round(rates["max"]), ratio: round(paired["median"], 2),
                        f"{ratio}_min": round(paired["min"], 2), f"{ratio}_max": round(paired["max"], 2)})
        row["peak_rss_mb"] = round(common.spread([c["peak_rss_mb"] for c in children[side]])["median"])
        rows.append({**row, "target_ratio": TARGET_RATIO})
    rows[0]["meets_target"] = bool(rows[0]["ratio_vs_tfrs_min"] >= TARGET_RATIO)
    rows[0]["meets_target_best_window"] = bool(rows[0]["best_window_ratio_vs_tfrs_min"] >= TARGET_RATIO)
    rows[0]["wall_s"] = round(time.perf_counter() - start, 1)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic data, seconds")
    parser.add_argument("--child", choices=("ours", "tfrs"), help=argparse.SUPPRESS)
    add_record_flag(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.smoke)))
    else:
        load_before = [round(x, 2) for x in os.getloadavg()]
        rows = run(args.smoke)
        for row in rows:
            print(json.dumps(row))
        if should_record(args):
            record("training", rows, "python -m benchmarks.bench_training " + " ".join(sys.argv[1:]),
                   note=f"Load average (1, 5, 15 min) before the run: {load_before}; the heading's is at its end.")
