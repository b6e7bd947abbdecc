"""Catalogue refresh without retraining, on the bundled data: how long until 1,000 new items are served.

Trains ``configs/youtube_dnn.py`` (the bundled item table: genres) once into a temporary directory, starts a
``GeneratorHolder`` watching the model directory with the server's default reload interval (5 s, its canary on),
writes a new table (the bundled items minus 10, plus 1,000 new items with genres drawn from the table), and times
``python -m pipelines.refresh`` as a user runs it (a new process: imports, TensorFlow start, embedding, index
self-check, canary, publish; "of which refresh s": the refresh itself, from reading the table to publishing, as its
manifest records it), then the time until the holder serves a request that returns a new item.

    python -m benchmarks.bench_refresh [--new_items=1000] [--repeats=3] [--smoke] [--record]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from benchmarks.record import add_record_flag, record, should_record
from configs import youtube_dnn
from configs.base import override
from retrieval import artifacts
from retrieval.jobs.job import TrainingJob

ROOT = Path(__file__).resolve().parents[1]
RELOAD_INTERVAL_S = 5.0  # pipelines.serve's default --reload_interval_s


def new_table(items: pd.DataFrame, count: int, seed: int, path: Path) -> list[str]:
    """Writes the bundled table minus its first 10 rows plus ``count`` new items; returns the new ids."""
    rng = np.random.default_rng(seed)
    ids = [f"new-{seed}-{k}" for k in range(count)]
    new = pd.DataFrame({"item_id": ids, "genres": rng.choice(items["genres"].to_numpy(), count)})
    pd.concat([items.iloc[10:], new]).to_csv(path, index=False)
    return ids


def run(new_items: int = 1000, repeats: int = 3, smoke: bool = False) -> list[dict]:
    """The rows: one per repeat and their medians (see the module docstring)."""
    from retrieval.serving.reload import GeneratorHolder

    items = pd.read_csv(ROOT / "data" / "items.csv")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp)
        config = override(youtube_dnn.get_config(), {"train.epochs": 1 if smoke else 2,
                                                     "gate.min_lift_over_popular": -1.0})
        TrainingJob(config, str(output), "trained").run()
        model_dir = output / "youtube_dnn"
        holder = GeneratorHolder(model_dir)
        holder.start(RELOAD_INTERVAL_S)
        try:
            for repeat in range(1 if smoke else repeats):
                ids = new_table(items, new_items, repeat, output / f"items-{repeat}.csv")
                start = time.monotonic()
                subprocess.run([sys.executable, "-m", "pipelines.refresh", f"--run_dir={model_dir}",
                                f"--item_features_path={output / f'items-{repeat}.csv'}",
                                "--allow_large_change"],  # 1,000 new items grow the 2,000 by half
                               cwd=ROOT, check=True,
                               capture_output=True, text=True)
                refreshed = time.monotonic()
                manifest = artifacts.read_json(model_dir / "latest" / "manifest.json")
                while ids[0] not in holder.current.index.id_map.item_ids:
                    if time.monotonic() - refreshed > 10 * RELOAD_INTERVAL_S:
                        raise RuntimeError("the holder did not pick the refreshed run up")
                    time.sleep(0.05)
                served = time.monotonic()
                similar = holder.current.similar(ids[0], k=5).item_ids
                rows.append({"new items": new_items, "repeat": repeat,
                             "refresh command s": round(refreshed - start, 2),
                             "of which refresh s": manifest["stage_seconds"]["refresh"],
                             "until served s": round(served - refreshed, 2),
                             "total s": round(served - start, 2), "similar to a new item": len(similar)})
                print(rows[-1], flush=True)
        finally:
            holder.stop()
    return rows + [{"new items": new_items, "repeat": "median",
               "refresh command s": statistics.median(r["refresh command s"] for r in rows),
               "of which refresh s": statistics.median(r["of which refresh s"] for r in rows),
               "until served s": statistics.median(r["until served s"] for r in rows),
               "total s": statistics.median(r["total s"] for r in rows),
               "similar to a new item": rows[0]["similar to a new item"]}]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new_items", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    rows = run(args.new_items, args.repeats, args.smoke)
    print(rows[-1])
    if should_record(args):
        record("bench_refresh", rows, "python -m benchmarks.bench_refresh " + " ".join(argv or sys.argv[1:]),
               note=f"reload interval {RELOAD_INTERVAL_S} s (pipelines.serve's default); target: under 30 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
