"""Validation sweeps of the two-tower recipe on set data (issue 26, item 2): one run per call, scored on validation
data only, beside EASE^R (and item-kNN, most-popular) on the same validation users.

Data, never the test part:
- ``ml-1m``, ``lastfm``: ``set-splits/<name>/train.txt`` -> early-stopped and scored on ``valid.txt``.
- ``gowalla-shape``: benchmarks/bench_quality.py's synthetic Gowalla-sized sets (``set_split_parts``: each user's
  items dealt, seeded, into 70% train, 10% validation and 20% test); the sweep trains on train and scores on
  validation. ``--final`` trains on train + validation for ``--final`` epochs and scores on the test part;
  ``--final=-1`` runs the shipped config as a user does on that train/test pair (``bench_quality.one_command``: its
  automatic holdout and refit). Test parts: the chosen recipe only.
  EASE^R is skipped there (a 41k x 41k inverse).
- ``--users=N``: screening on the first N users' lines only (subsets of lastfm / ml-1m).

    python -m benchmarks.experiments.sweep_sets --dataset=lastfm --set model.objective.num_negatives=1024 \\
        --set model.objective.sampler=uniform [--max_epochs=40] [--out=rows.jsonl]

Prints one JSON row: validation recall@20 / NDCG@20 of the early-stopped model and of the baselines, best epoch,
wall seconds of the whole run.
"""

from __future__ import annotations

import argparse
import ast
import json
import tempfile
import time
from pathlib import Path

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from benchmarks.bench_quality import _config, _run, one_command, set_split_parts


def run(dataset: str, settings: dict, max_epochs: int, patience: int, users: int, final_epochs: int,
        with_baselines: bool = True) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = set_split_parts(dataset, tmp, users)
        baselines = ("most_popular", "item_knn") if dataset == "gowalla-shape" else ("most_popular", "item_knn", "ease")
        baselines = baselines if with_baselines else ()
        common = {"data.format": "user_items", "data.split": "files", "data.order": "none", "eval.bootstrap": 0,
                  "eval.ks": (20,), "eval.baselines": baselines}
        if final_epochs < 0:  # the one command, as benchmarks/bench_quality.py runs it
            data = one_command(paths["train_valid"], paths["test"])
        elif final_epochs:
            data = {"data.train_path": str(paths["train_valid"]), "data.test_path": str(paths["test"]),
                    "train.epochs": final_epochs, "train.validation_fraction": 0.0}
        else:
            data = {"data.train_path": str(paths["train"]), "data.test_path": str(paths["valid"]),
                    "data.validation_path": str(paths["valid"]), "train.epochs": max_epochs,
                    "train.early_stopping_patience": patience}
        start = time.perf_counter()
        metrics, summary, seconds = _run(_config("two_tower", {**common, **data, **settings}), tmp / "run", "s")
        wall = time.perf_counter() - start
    row = {"dataset": dataset, "part": "test" if final_epochs else "validation", "users": users or "all",
           "settings": settings, "recall@20": round(metrics["recall@20"], 4), "ndcg@20": round(metrics["ndcg@20"], 4),
           "best_epoch": summary.get("best_epoch") or (summary.get("tuning") or {}).get("best_epoch"),
           "train_s": round(seconds["train"], 1), "wall_s": round(wall, 1)}
    for baseline in baselines:
        if f"baseline/{baseline}/recall@20" in metrics:
            row[baseline] = [round(metrics[f"baseline/{baseline}/recall@20"], 4),
                             round(metrics[f"baseline/{baseline}/ndcg@20"], 4)]
    return row


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, choices=("ml-1m", "lastfm", "gowalla-shape"))
    parser.add_argument("--set", action="append", default=[], help="config override key=value (repeatable)")
    parser.add_argument("--max_epochs", type=int, default=40)
    parser.add_argument("--patience", type=int, default=5)
    parser.add_argument("--users", type=int, default=0, help="screen on the first N users only (set splits)")
    parser.add_argument("--final", type=int, default=0,
                        help="train on train + valid for this many epochs -> test (-1: the config's own tuning)")
    parser.add_argument("--no_baselines", action="store_true", help="skip the baselines (same data: same numbers)")
    parser.add_argument("--out", default="", help="append the row to this JSON-lines file")
    args = parser.parse_args()
    settings = {key: _value(value) for key, value in (item.split("=", 1) for item in args.set)}
    row = run(args.dataset, settings, args.max_epochs, args.patience, args.users, args.final,
              not args.no_baselines)
    print(json.dumps(row))
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
