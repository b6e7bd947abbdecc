"""Retrieval quality of every objective through the real pipeline, on public data, protocol stated.

Each row is one run of ``pipelines.train`` (in-process ``TrainingJob``) with the shipped config and the listed
overrides, on MovieLens from ``../shared/datasets/`` (``--dataset=ml-100k`` by default, or ``ml-1m-partial``).
Protocol: leave-last-one-out next-item by timestamp (per user, the last rating is test), full-corpus exact ranking,
the user's training items excluded, recall@20 and NDCG@20 over all test users with 95% bootstrap intervals.
Most-popular and item-kNN come from the same evaluation. ``--smoke`` runs tiny synthetic data for one epoch.

    python -m benchmarks.bench_quality [--dataset=ml-1m-partial] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from configs.base import override
from retrieval import artifacts
from retrieval.data import synthetic
from retrieval.pipeline.job import TrainingJob

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
SOURCES = {"ml-100k": DATASETS / "ml-100k" / "u.data", "ml-1m-partial": DATASETS / "ml-1m-partial" / "ratings.dat"}
PROTOCOL = ("leave-last-one-out next-item by timestamp; full-corpus exact ranking; training items excluded; "
            "mean over test users, 95% bootstrap CI")

# (row name, config module, overrides): the four in-batch variants differ only in the log-Q correction.
VARIANTS = [
    ("sampled softmax, unigram^0.75 + log-Q", "youtube_dnn", {
        "data.item_features_path": "", "data.user_features_path": "", "model.user_tower.use_example_age": False}),
    ("in-batch, static log-Q", "two_tower", {"model.objective.log_q": "static"}),
    ("in-batch, streaming log-Q", "two_tower", {"model.objective.log_q": "streaming"}),
    ("in-batch, no log-Q", "two_tower", {"model.objective.log_q": "none"}),
    ("Item2Vec (user = mean of history)", "item2vec", {}),
]


def _config(module: str, data_path: Path, fmt: str, overrides: dict, smoke: bool):
    config = __import__(f"configs.{module}", fromlist=["get_config"]).get_config()
    settings = {"data.train_path": str(data_path), "data.format": fmt, "data.timestamp_column": "timestamp",
                "eval.ks": (10, 20, 50, 100), "eval.baselines": ("most_popular", "item_knn"), "eval.bootstrap": 200,
                "gate.floors": "", **overrides}
    if smoke:
        epochs_key = "item2vec.epochs" if module == "item2vec" else "train.epochs"
        settings.update({epochs_key: 1, "eval.bootstrap": 0})
        if module == "youtube_dnn":
            settings["model.objective.num_negatives"] = 64
    override(config, settings)
    return config


def _smoke_data(directory: Path) -> Path:
    interactions, _, _ = synthetic.generate(num_users=200, num_items=150, interactions_per_user=15, seed=1)
    path = directory / "interactions.csv"
    interactions.to_csv(path, index=False)
    return path


def run(smoke: bool, dataset: str = "ml-100k") -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if smoke:
            data_path, fmt, dataset = _smoke_data(tmp), "csv", "synthetic-smoke"
        else:
            data_path, fmt = SOURCES[dataset], "movielens"
            if not data_path.exists():
                return [{"dataset": dataset, "skipped": f"file not found: {data_path}"}]
        rows, metrics = [], {}
        for name, module, overrides in VARIANTS:
            config = _config(module, data_path, fmt, overrides, smoke)
            job = TrainingJob(config, str(tmp / f"runs{len(rows)}"), run_id=module)
            start = time.perf_counter()
            job.run()
            seconds = time.perf_counter() - start
            metrics = artifacts.read_json(job.paths.metrics)
            rows.append(_row(dataset, name, metrics, "", seconds, job.stages.timings.get("train")))
        for baseline in ("most_popular", "item_knn"):
            rows.append(_row(dataset, baseline.replace("_", "-"), metrics, f"baseline/{baseline}/", None, None))
    return rows


def _row(dataset: str, name: str, metrics: dict, prefix: str, seconds, train_seconds) -> dict:
    row = {"dataset": dataset, "model": name}
    for metric in ("recall@20", "ndcg@20", "recall@50"):
        row[metric] = round(metrics[prefix + metric], 4)
        low, high = metrics.get(f"{prefix}{metric}_ci_low"), metrics.get(f"{prefix}{metric}_ci_high")
        if low is not None:
            row[f"{metric} 95% CI"] = f"[{low:.4f}, {high:.4f}]"
    row["run_s"] = None if seconds is None else round(seconds, 1)
    row["train_s"] = None if train_seconds is None else round(train_seconds, 1)
    row["protocol"] = PROTOCOL
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic data, one epoch")
    parser.add_argument("--dataset", default="ml-100k", choices=sorted(SOURCES), help="public dataset to use")
    args = parser.parse_args()
    print(json.dumps(run(args.smoke, args.dataset), indent=2))


if __name__ == "__main__":
    main()
