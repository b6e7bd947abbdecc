"""Scaling of the data path: synthetic logs of 1M, 10M and 50M interactions (``--sizes``) through the streamed prepare
and training from its TFRecord shards.

Per size, every stage runs in its own subprocess (``peak_rss_mb`` is that process's high-water mark, see
``common.peak_rss_mb``): ``generate`` (chunked Parquet log), ``prepare`` (streamed, embedded engine; shards of about
:data:`ROWS_PER_SHARD` interactions), ``prepare_dask_1`` / ``prepare_dask_2`` (the same on a local Dask cluster of 1
and 2 worker processes; RSS of the driver only), ``train`` (two-tower, :data:`TRAIN_STEPS` steps of batch 1024 read
from the shards) and, up to :data:`IN_MEMORY_MAX_ROWS`, ``prepare_in_memory`` (the reference: the whole log in pandas,
split, vocabularies and the dense next-item examples, as the in-memory path does). ``rss_vs_in_memory`` is the
streamed prepare's peak over the reference's, same size. Target: peak RSS of the 50M run within a few GB of the 1M
run. Each stage is timed once (minutes per stage at 10M+; rerun to see the spread).

    python -m benchmarks.bench_scale [--smoke] [--sizes=1000000,10000000]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import peak_rss_mb

SIZES = (1_000_000, 10_000_000, 50_000_000)
SMOKE_SIZES = (20_000,)
PER_USER = 41  # mean interactions per synthetic user (after repeats are dropped)
ROWS_PER_SHARD = 1_000_000
TRAIN_STEPS, SMOKE_TRAIN_STEPS = 200, 5
IN_MEMORY_MAX_ROWS = 10_000_000
BATCH_SIZE, MAX_HISTORY = 1024, 50


def _config(log: Path, rows: int, engine: str = "embedded", workers: int = 1):
    from configs.base import override
    from configs.two_tower import get_config

    return override(get_config(), {"data.train_path": str(log), "data.num_shards": max(2, math.ceil(
        rows / ROWS_PER_SHARD)), "data.engine": engine, "data.engine_workers": workers,
        "model.max_history": MAX_HISTORY, "train.batch_size": BATCH_SIZE, "train.epochs": 1})


def _stage(stage: str, work: Path, rows: int, steps: int) -> dict:
    """One stage in this (fresh) process; returns its measurements."""
    log = work / "interactions.parquet"
    start = time.perf_counter()
    if stage == "generate":
        from retrieval.data import synthetic

        count, _ = synthetic.write_chunked(work, max(rows // PER_USER, 1), max(rows // 25, 100), format="parquet")
        out = {"rows": count}
    elif stage.startswith("prepare_dask") or stage == "prepare":
        from retrieval.data import engine as engine_lib
        from retrieval.data import streaming

        workers = int(stage.rsplit("_", 1)[1]) if stage != "prepare" else 1
        config = _config(log, rows, "dask" if stage != "prepare" else "embedded", workers)
        run_dir = work / f"run_{stage}"
        with engine_lib.open_engine(config.data.engine, workers=workers) as engine:
            summary = streaming.prepare(streaming.Settings.from_config(config, run_dir), engine, "auto")
        out = {"rows": summary["train_interactions"] + summary["test_interactions"], "shards": config.data.num_shards,
               "examples": summary["streaming"]["examples"]}
    elif stage == "prepare_in_memory":
        from retrieval.data import examples, readers, splits
        from retrieval.data.vocab import Vocabulary

        frame = readers.read_interactions(log)
        split = splits.leave_last_n_out(frame, 1, policy="keep")
        items, users = Vocabulary.from_ids(split.train["item_id"]), Vocabulary.from_ids(split.train["user_id"])
        built = examples.next_item_examples(users.lookup(split.train["user_id"]), items.lookup(split.train["item_id"]),
                                            split.train["timestamp"].to_numpy(), max_history=MAX_HISTORY)
        out = {"rows": len(frame), "examples": len(built["label"])}
    else:  # train
        import dataclasses

        from retrieval import training
        from retrieval.artifacts import RunPaths
        from retrieval.data import shards, streaming
        from retrieval.data.vocab import Vocabulary
        from retrieval.models import build_model

        config = _config(log, rows)
        paths = RunPaths(work / "run_prepare")
        examples = shards.ExampleShards.load(streaming.examples_dir(paths))
        examples = dataclasses.replace(examples, num_examples=min(len(examples), steps * BATCH_SIZE))
        model = build_model(config.model, Vocabulary.load(paths.item_vocab), Vocabulary.load(paths.user_vocab))
        start = time.perf_counter()
        result = training.fit(model, examples, config.train)
        out = {"rows": rows, "steps": result.step, "examples": len(examples)}
    seconds = time.perf_counter() - start
    per_s_key = "examples_per_s" if stage == "train" else "rows_per_s"
    return {**out, "seconds": round(seconds, 2), per_s_key: round(out["examples" if stage == "train" else "rows"]
                                                                  / seconds), "peak_rss_mb": round(peak_rss_mb())}


def _subprocess(stage: str, work: Path, rows: int, steps: int) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_scale", f"--stage={stage}", f"--work={work}",
               f"--rows={rows}", f"--steps={steps}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    if done.returncode:
        raise RuntimeError(f"{stage} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(smoke: bool, sizes: tuple[int, ...] = SIZES) -> list[dict]:
    """One row per size and stage (see the module docstring)."""
    sizes, steps = (SMOKE_SIZES, SMOKE_TRAIN_STEPS) if smoke else (sizes, TRAIN_STEPS)
    rows = []
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="bench_scale_") as directory:
            stages = ["generate", "prepare", "train", "prepare_dask_1", "prepare_dask_2"]
            if size <= IN_MEMORY_MAX_ROWS:
                stages.append("prepare_in_memory")
            measured = {stage: _subprocess(stage, Path(directory), size, steps) for stage in stages}
        reference = measured.get("prepare_in_memory", {}).get("peak_rss_mb")
        for stage, row in measured.items():
            extra = ({"rss_vs_in_memory": round(row["peak_rss_mb"] / reference, 2)}
                     if stage == "prepare" and reference else {})
            rows.append({"name": stage, "size": size, **row, **extra})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a minute")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated log sizes")
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        print(json.dumps(_stage(args.stage, Path(args.work), args.rows, args.steps)))
    else:
        for result in run(args.smoke, tuple(int(s) for s in args.sizes.split(","))):
            print(json.dumps(result), flush=True)
