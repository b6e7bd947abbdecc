"""Training throughput from the two example sources of one prepare: streamed from the shard files vs held in memory.

One prepare (``retrieval.data.prepare``, 8 partitions) of ``ml-1m-partial/ratings.dat`` (leave-last-1-out, next-item
examples) writes the TFRecord example shards once. The shipped two-tower recipe (``configs/two_tower.py``, the same
model, vocabularies and batch on both sides) then trains from:

- ``in_memory``: the shards read into arrays (``load_examples(in_memory=True)``: ``examples.to_dataset``, one
  permutation per epoch cut into batches, one gather per batch), what a run with ``data.streaming=off`` trains on;
- ``streamed``: the shard files through ``tf.data`` (``shards.ExampleShards.to_dataset``: interleaved
  ``TFRecordDataset``, a shuffle buffer over blocks of 256 examples, parse, rebatch, prefetch), what a run with
  ``data.streaming=on`` trains on.

Each side runs in a fresh subprocess per repeat, alternating which goes first; ``training.fit`` runs ``2 * window``
steps and the rate is taken over the second ``window`` (after warm-up and tracing) from the wall clock at the
``ProgressLogger``'s log steps (every ``window`` steps: a multiple of the recipe's ``train.steps_per_execution``, 4,
which the logging period bounds, so both sides run as shipped). Row ``streamed`` carries ``ratio_vs_in_memory``: the
median (min-max) of the paired per-repeat ratio; the target is >= 0.8 on the median (issue 24).

    python -m benchmarks.bench_sources [--smoke]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

from benchmarks import common

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "ml-1m-partial" / "ratings.dat"
FULL = {"window": 160, "repeats": 3, "batch_size": 1024, "shards": 8}
SMOKE = {"window": 4, "repeats": 1, "batch_size": 64, "shards": 3}
TARGET_RATIO = 0.8
SIDES = ("in_memory", "streamed")


def _config(log: str, settings: dict):
    from configs.base import override
    from configs.two_tower import get_config

    return override(get_config(), {
        "data.train_path": log, "data.format": "auto", "data.streaming": "on", "data.num_shards": settings["shards"],
        "model.user_tower.use_example_age": False, "train.batch_size": settings["batch_size"],
        "train.log_every_steps": settings["window"], "train.epochs": 1})


def prepare_once(work: Path, smoke: bool) -> str:
    """The prepared run directory (shards, vocabularies) both sides train from; the log, or a synthetic one."""
    from retrieval.data import handoff, prepare, synthetic
    from retrieval.data.engine import Embedded

    settings = SMOKE if smoke else FULL
    log = DATA
    if smoke:
        frame, _, _ = synthetic.generate(num_users=300, num_items=200, interactions_per_user=10, seed=0)
        log = work / "log.csv"
        frame.to_csv(log, index=False)
    config = _config(str(log), settings)
    prepare.run(handoff.settings_of(config, work / "run"), Embedded(), "auto")
    return str(log)


def child(side: str, work: Path, log: str, smoke: bool) -> dict:
    """One side in this (fresh) process: examples/s over the second window of ``training.fit``."""
    from retrieval import artifacts, training
    from retrieval.data import prepare
    from retrieval.data.vocab import Vocabulary
    from retrieval.models import build_model

    settings = SMOKE if smoke else FULL
    config = _config(log, settings)
    paths = artifacts.RunPaths(work / "run")
    items, users = Vocabulary.load(paths.item_vocab), Vocabulary.load(paths.user_vocab)
    source = prepare.load_examples(paths, in_memory=side == "in_memory", max_history=config.model.max_history,
                                   shuffle_buffer=config.data.shuffle_buffer)
    window = settings["window"]
    logger = common.timed_logger(2 * window)
    config.train.epochs = max(1, -(-2 * window * settings["batch_size"] // len(source)))
    model = build_model(config.model, items, users)
    with mock.patch.object(training, "ProgressLogger", logger):
        training.fit(model, source, config.train)
    marks = logger.marks
    start, end = common.marked_step(marks, window), common.marked_step(marks, 2 * window)
    seconds = marks[end][0] - marks[start][0]
    return {"side": side, "examples": len(source), "examples_per_s": (end - start) * settings["batch_size"] / seconds}


def _spawn(side: str, work: Path, log: str, smoke: bool) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_sources", f"--child={side}", f"--work={work}", f"--log={log}"]
    done = subprocess.run(command + (["--smoke"] if smoke else []), capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"{side} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(smoke: bool) -> list[dict]:
    """Rows ``in_memory`` and ``streamed`` (see the module docstring)."""
    settings = SMOKE if smoke else FULL
    if not smoke and not DATA.exists():
        return [{"name": "streamed", "skipped": f"file not found: {DATA}"}]
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        log = prepare_once(work, smoke)
        children = {side: [] for side in SIDES}
        for repeat in range(settings["repeats"]):
            for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
                children[side].append(_spawn(side, work, log, smoke))
    rows = []
    for side in SIDES:
        rates = common.spread([c["examples_per_s"] for c in children[side]])
        row = {"name": side, "dataset": "synthetic-smoke" if smoke else "ml-1m-partial",
               "examples": children[side][0]["examples"], "batch_size": settings["batch_size"],
               "shards": settings["shards"], "timed_steps": settings["window"], "repeats": settings["repeats"],
               "examples_per_s": round(rates["median"]), "examples_per_s_min": round(rates["min"]),
               "examples_per_s_max": round(rates["max"])}
        if side == "streamed":
            ratio = common.spread([s["examples_per_s"] / m["examples_per_s"]
                                   for s, m in zip(children["streamed"], children["in_memory"], strict=True)])
            row.update({"ratio_vs_in_memory": round(ratio["median"], 3),
                        "ratio_vs_in_memory_min": round(ratio["min"], 3),
                        "ratio_vs_in_memory_max": round(ratio["max"], 3),
                        "meets_target": ratio["median"] >= TARGET_RATIO})
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic data, one repeat")
    parser.add_argument("--child", choices=SIDES, help="internal: run one side in this process")
    parser.add_argument("--work", help="internal: the prepared directory")
    parser.add_argument("--log", help="internal: the log the run was prepared from")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, Path(args.work), args.log, args.smoke)))
        return
    print(json.dumps(run(args.smoke), indent=2))


if __name__ == "__main__":
    main()
