"""Training throughput of the two-tower model: our pipeline vs a plain TFRS model fed the way the TFRS tutorials do.

The same model on both sides: ID-only item tower (d = 64, L2-normalised), user tower = masked mean of the embedded
history (50 items, the item tower's table) -> Dense(128, ReLU) -> Dense(64) -> L2 normalisation, in-batch softmax
at temperature 0.1 with accidental hits removed, Adam with the same warmup + cosine schedule
(``training.make_optimizer``), batch 1024, the same next-item examples of ``ml-1m-partial/ratings.dat``.

- ``ours``: ``build_model`` (``log_q="none"``, no example age, so the objective is plain in-batch softmax) trained by
  ``training.fit`` on the ``next_item_examples`` int arrays (``to_dataset``: one permutation per epoch cut into
  batches of row numbers, one gather per batch), with its defaults: ``jit_compile="auto"`` XLA-compiles this
  sampler-free step and sums the embedding gradients densely instead of de-duplicating 52k gathered rows with
  TensorFlow's CPU segment sum (the largest op of the uncompiled step, on both sides).
- ``tfrs``: a ``tfrs.Model`` with ``tfrs.tasks.Retrieval`` fed a ``tf.data.Dataset`` of string features (user id,
  history as a ``""``-padded string tensor [N, 50], item id), ``StringLookup`` inside the towers, masked
  ``GlobalAveragePooling1D``; pipeline ``shuffle(N) -> batch -> cache -> prefetch`` as in the tutorials. The
  tutorials compute ``FactorizedTopK`` only in evaluation (``compute_metrics=not training``): no metric is computed
  while training on either side. The loss is the mean (not TFRS's default sum) so both logs show the same number.

Timing: each repeat is a fresh subprocess per side (sides alternate), so peak RSS (``ru_maxrss`` of the child) is
per side. Both sides train under the same callbacks (``training.StopAtStep`` and a ``training.ProgressLogger``
subclass that notes the wall clock and the process CPU time at its log steps; ``fit`` gets it by patching the name,
nothing else changes). Throughput is ``window`` steps after a warm-up of ``window`` steps (tracing, shuffle buffer
fill), per wall second (``examples_per_s``) and per CPU second of the whole process, all threads
(``examples_per_cpu_s``: the cost, which moves less than wall time when other jobs share the cores). TFRS is timed
twice in one child: in its first epoch (batches built from strings) and in its second (batches read from the
cache, its steady state); the headline ratios are against the latter. Rows: median of the repeats with min and
max, ``ratio_vs_tfrs`` / ``cpu_ratio_vs_tfrs`` against the cached TFRS medians. Target: ours >= 2x.

    python -m benchmarks.bench_training [--smoke]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

from benchmarks import common
from retrieval.data import Vocabulary, next_item_examples, read_interactions, synthetic
from retrieval.memory import peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "ml-1m-partial" / "ratings.dat"
MAX_HISTORY, DIM, HIDDEN, TEMPERATURE = 50, 64, 128, 0.1
FULL = {"batch_size": 1024, "window": 200, "repeats": 3}
SMOKE = {"batch_size": 64, "window": 4, "repeats": 1}
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


def _timed_logger():
    """``training.ProgressLogger`` that also notes the wall clock and the process CPU time (all threads: the step,
    the input pipeline) at each of its log steps, in the class attribute ``marks`` (``{step: (wall, cpu)}``)."""
    from retrieval import training

    class TimedLogger(training.ProgressLogger):
        marks: dict[int, tuple[float, float]] = {}

        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            if self.step % self.every_steps == 0:
                self.marks[self.step] = (time.perf_counter(), time.process_time())

    return TimedLogger


def _rates(marks: dict, start: int, end: int, batch_size: int) -> dict[str, float]:
    """Examples per wall second and per CPU second between two marked steps."""
    examples = (end - start) * batch_size
    return {"wall": examples / (marks[end][0] - marks[start][0]), "cpu": examples / (marks[end][1] - marks[start][1])}


def _check_window(num_examples: int, batch_size: int, window: int) -> int:
    """Steps per epoch; the warm-up and the timed window must both fit in the first epoch."""
    steps_per_epoch = math.ceil(num_examples / batch_size)
    if 2 * window > steps_per_epoch:
        raise ValueError(f"2 x {window} steps do not fit in an epoch of {steps_per_epoch} steps")
    return steps_per_epoch


def _ours(examples: dict, items: Vocabulary, users: Vocabulary, batch_size: int, window: int) -> dict:
    """Our pipeline: ``build_model`` + ``training.fit`` (its progress logger swapped for the timed subclass, nothing
    else); rates of steps [window, 2 * window]."""
    from retrieval import models, training

    config = models.default_config()
    config.objective.log_q = "none"
    config.user_tower.use_example_age = False
    model = models.build_model(config, items, users)
    _check_window(len(examples["label"]), batch_size, window)
    logger = _timed_logger()
    with mock.patch.object(training, "ProgressLogger", logger):
        training.fit(model, examples, _train_config(batch_size, window, 1))
    return {"steady": _rates(logger.marks, window, 2 * window, batch_size)}


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


def _tfrs(examples: dict, items: Vocabulary, users: Vocabulary, batch_size: int, window: int) -> dict:
    """The TFRS tutorial way; rates of steps [window, 2 * window] (first epoch) and of the first window of the
    second epoch (cached batches)."""
    import tensorflow as tf

    from retrieval import training

    n = len(examples["label"])
    steps_per_epoch = _check_window(n, batch_size, window)
    cached_start = math.ceil(steps_per_epoch / window) * window
    end = cached_start + window
    config = _train_config(batch_size, window, math.ceil(end / steps_per_epoch))
    dataset = (tf.data.Dataset.from_tensor_slices(_string_features(examples, items, users))
               .shuffle(n, seed=config.seed).batch(batch_size).cache().prefetch(tf.data.AUTOTUNE))
    model = _tfrs_model(items.ids[2:])
    model.compile(optimizer=training.make_optimizer(config, config.epochs * steps_per_epoch))
    logger = _timed_logger()
    model.fit(dataset, epochs=config.epochs, callbacks=[training.StopAtStep(end), logger(window, batch_size, end)],
              verbose=0)
    return {"first_epoch": _rates(logger.marks, window, 2 * window, batch_size),
            "steady": _rates(logger.marks, cached_start, end, batch_size)}


def child(side: str, smoke: bool) -> dict:
    """One measurement in this process (run it in a fresh one): rates by phase and the peak RSS."""
    import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)

    settings = SMOKE if smoke else FULL
    examples, items, users, dataset = load_examples(smoke)
    measure = {"ours": _ours, "tfrs": _tfrs}[side]
    rates = measure(examples, items, users, settings["batch_size"], settings["window"])
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
    for _ in range(settings["repeats"]):
        for side in children:
            children[side].append(_spawn(side, smoke))
    series = {"ours": ("ours", "steady", "build_model + training.fit, int index arrays"),
              "tfrs": ("tfrs", "steady", "tfrs.Model, string features + StringLookup, cached batches (epoch 2)"),
              "tfrs_first_epoch": ("tfrs", "first_epoch", "the same TFRS model in its first epoch (before cache)")}
    reference = {clock: common.spread([c["rates"]["steady"][clock] for c in children["tfrs"]])["median"]
                 for clock in ("wall", "cpu")}
    first = children["ours"][0]
    rows = []
    for name, (side, phase, what) in series.items():
        row = {"name": name, "pipeline": what, "dataset": first["dataset"], "examples": first["examples"],
               "batch_size": settings["batch_size"], "timed_steps": settings["window"], "repeats": settings["repeats"]}
        for clock, key, ratio in (("wall", "examples_per_s", "ratio_vs_tfrs"),
                                  ("cpu", "examples_per_cpu_s", "cpu_ratio_vs_tfrs")):
            rates = common.spread([c["rates"][phase][clock] for c in children[side]])
            row.update({key: round(rates["median"]), f"{key}_min": round(rates["min"]),
                        f"{key}_max": round(rates["max"]), ratio: round(rates["median"] / reference[clock], 2)})
        row["peak_rss_mb"] = round(common.spread([c["peak_rss_mb"] for c in children[side]])["median"])
        rows.append({**row, "target_ratio": TARGET_RATIO})
    rows[0]["wall_s"] = round(time.perf_counter() - start, 1)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic data, seconds")
    parser.add_argument("--child", choices=("ours", "tfrs"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.smoke)))
    else:
        for row in run(args.smoke):
            print(json.dumps(row))
