"""Scaling of the data path: synthetic logs of 1M, 10M and 50M interactions (``--sizes``) through the whole training
pipeline, out of core.

Per size, every measured side runs in its own subprocess (``peak_rss_mb`` is that process's high-water mark, see
``retrieval.memory.peak_rss_mb``):

- ``generate``: the chunked synthetic generator (Parquet log, one row group per chunk of users), a fixed catalogue of
  :data:`NUM_ITEMS` items and ``size / PER_USER`` users, so that only the number of interactions grows.
- ``pipeline``: ``TrainingJob`` end to end, the shipped two-tower config with ``data.streaming=on`` (embedded engine,
  shards of about :data:`ROWS_PER_SHARD` interactions): prepare, one epoch over at most
  :data:`EXAMPLES_PER_USER` next-item examples per user (``data.max_examples_per_user``, YouTube DNN's cap) read
  from the TFRecord shards, export, evaluation on a sample of :data:`EVAL_USERS` test users (``eval.max_users``),
  index, gate (floors off: synthetic data) and publish. Each stage's row gives its seconds and the process's peak RSS
  when the stage ended (the stage markers record it).
- ``prepare_dask_1`` / ``prepare_dask_2`` (up to :data:`DASK_MAX_ROWS`): the streamed prepare alone on a local Dask
  cluster of 1 and 2 worker processes (RSS of the driver only).
- ``prepare_in_memory`` (up to :data:`IN_MEMORY_MAX_ROWS`): the reference, the same prepare tasks on one partition
  (``data.streaming=off``: the whole log in one task); ``rss_vs_in_memory`` divides the streamed prepare's peak by it.

Target: the 50M run completes with a peak RSS within a few GB of the 1M run's. Each side runs once (minutes at 10M+).

    python -m benchmarks.bench_scale [--smoke] [--sizes=1000000,10000000,50000000]
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

from retrieval.memory import peak_rss_mb

SIZES = (1_000_000, 10_000_000, 50_000_000)
SMOKE_SIZES = (20_000,)
NUM_ITEMS, SMOKE_ITEMS = 200_000, 2_000
PER_USER = 53  # mean interactions per synthetic user with NUM_ITEMS items (measured: 1,067,628 for 20,000 users)
ROWS_PER_SHARD = 2_000_000
EXAMPLES_PER_USER = 5
EVAL_USERS = 20_000
DASK_MAX_ROWS = IN_MEMORY_MAX_ROWS = 10_000_000
PIPELINE_STAGES = ("prepare", "train", "export", "evaluate", "index", "gate", "publish")


def _config(log: Path, rows: int, engine: str = "embedded", workers: int = 1):
    from configs.base import override
    from configs.two_tower import get_config

    return override(get_config(), {
        "data.train_path": str(log), "data.streaming": "on", "data.split": "leave_last_n", "data.holdout_n": 1,
        "data.num_shards": max(2, math.ceil(rows / ROWS_PER_SHARD)), "data.engine": engine,
        "data.engine_workers": workers, "data.max_examples_per_user": EXAMPLES_PER_USER, "train.epochs": 1,
        "train.validation_fraction": 0.0,  # one fixed epoch: no automatic holdout and refit
        "train.log_every_steps": 200, "eval.max_users": EVAL_USERS, "eval.baselines": ("most_popular", "random"),
        "gate.floors": "", "gate.min_lift_over_popular": -1.0})


def _stage(stage: str, work: Path, rows: int, items: int) -> dict:
    """One side in this (fresh) process; returns its measurements."""
    log = work / "interactions.parquet"
    start = time.perf_counter()
    if stage == "generate":
        from retrieval.data import synthetic

        count, _ = synthetic.write_chunked(work, max(rows // PER_USER, 1), items, format="parquet")
        out = {"rows": count}
    elif stage == "pipeline":
        from retrieval import artifacts
        from retrieval.jobs.job import TrainingJob

        job = TrainingJob(_config(log, rows), str(work / "models"), run_id="scale")
        job.run()
        markers = {name: artifacts.read_json(job.stages.marker(name)) for name in PIPELINE_STAGES}
        prepare, train = markers["prepare"]["summary"], markers["train"]["summary"]
        out = {"rows": prepare["train_interactions"] + prepare["test_interactions"],
               "examples": prepare["examples"]["count"], "steps": train["steps"],
               "stages": {name: {"seconds": m["seconds"], "peak_rss_mb": m["peak_rss_mb"]}
                          for name, m in markers.items()}}
    else:  # prepare_in_memory (one partition, this process) or prepare_dask_<workers> (streamed, on a local cluster)
        from retrieval.data import engine as engine_lib
        from retrieval.data import handoff, prepare

        workers = int(stage.rsplit("_", 1)[1]) if stage.startswith("prepare_dask") else 0
        config = _config(log, rows, "dask", workers) if workers else _config(log, rows)
        settings = handoff.settings_of(config, work / f"run_{stage}", num_shards=None if workers else 1)
        with engine_lib.open_engine("dask" if workers else "embedded", workers=max(workers, 1)) as engine:
            summary = prepare.run(settings, engine, "auto")
        out = {"rows": summary.train_interactions + summary.test_interactions, "examples": summary.examples["count"]}
    return {**out, "seconds": round(time.perf_counter() - start, 2), "peak_rss_mb": round(peak_rss_mb())}


def _subprocess(stage: str, work: Path, rows: int, items: int) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_scale", f"--stage={stage}", f"--work={work}",
               f"--rows={rows}", f"--items={items}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    if done.returncode:
        raise RuntimeError(f"{stage} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _pipeline_rows(size: int, measured: dict) -> list[dict]:
    """One row per pipeline stage, with its rate: rows/s of prepare, examples/s of train."""
    pipeline = measured["pipeline"]
    rows = []
    for name, stage in pipeline["stages"].items():
        rate = ({"rows_per_s": round(pipeline["rows"] / stage["seconds"])} if name == "prepare" else
                {"examples_per_s": round(pipeline["examples"] / stage["seconds"])} if name == "train" else {})
        rows.append({"name": f"pipeline/{name}", "size": size, "rows": pipeline["rows"], **stage, **rate})
    reference = measured.get("prepare_in_memory", {}).get("peak_rss_mb")
    if reference:
        rows[0]["rss_vs_in_memory"] = round(rows[0]["peak_rss_mb"] / reference, 2)
    rows.append({"name": "pipeline", "size": size, "rows": pipeline["rows"], "examples": pipeline["examples"],
                 "steps": pipeline["steps"], "seconds": pipeline["seconds"], "peak_rss_mb": pipeline["peak_rss_mb"]})
    return rows


def run(smoke: bool, sizes: tuple[int, ...] = SIZES) -> list[dict]:
    """Rows per size (see the module docstring)."""
    sizes, items = (SMOKE_SIZES, SMOKE_ITEMS) if smoke else (sizes, NUM_ITEMS)
    rows = []
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="bench_scale_") as directory:
            sides = ["generate", "pipeline"]
            sides += ["prepare_dask_1", "prepare_dask_2"] if size <= DASK_MAX_ROWS else []
            sides += ["prepare_in_memory"] if size <= IN_MEMORY_MAX_ROWS else []
            measured = {}
            for side in sides:
                measured[side] = _subprocess(side, Path(directory), size, items)
                print(json.dumps({"side": side, "size": size, **measured[side]}), file=sys.stderr, flush=True)
        for side, row in measured.items():
            if side == "pipeline":
                rows += _pipeline_rows(size, measured)
            else:
                rate = {"rows_per_s": round(row["rows"] / row["seconds"])} if side != "generate" else {}
                rows.append({"name": side, "size": size, **row, **rate})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a minute")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated log sizes")
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--items", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        print(json.dumps(_stage(args.stage, Path(args.work), args.rows, args.items)))
    else:
        for result in run(args.smoke, tuple(int(s) for s in args.sizes.split(","))):
            print(json.dumps(result), flush=True)
