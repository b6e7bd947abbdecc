"""Retrieval quality through the real pipeline on every kind of data a user brings, protocol stated beside each number.

Each model row is one run of ``pipelines.train`` (in-process ``TrainingJob``) with a shipped config; the baselines
(most-popular, item-kNN, EASE^R) come from the same run's evaluation, on the same users. Datasets (from
``../shared/datasets/``):

- ``set-splits/ml-1m``, ``set-splits/lastfm``: sets (random per-user holdout, the LightGCN++ split; ``data.order=none``,
  stated: these lines are in no order a detector could tell from time). Tuning on validation only: a run trained on
  ``train.txt`` early-stops on ``valid.txt`` and fixes the number of epochs; the final run trains on train + valid
  for that many epochs and is evaluated on ``test.txt``.
- ``amazon-beauty``: sequences (ICLRec's file, items in time order): leave-last-one-out next-item; the epochs are
  tuned by early stopping on each user's second-to-last item, then the final run trains on all but the last item.
- ``ml-100k``: MovieLens-100K with timestamps, leave-last-one-out next-item, one row per objective variant.
- ``gowalla-shape``: the time budget at Gowalla's size (29,858 users, 40,981 items, ~810k training pairs): synthetic
  planted-cluster sets written as id-sorted ``user item ...`` lines (detected as sets, no flag), a random 80/20
  holdout, the recipe's fixed epochs; its row reports the run's wall time (EASE^R is skipped at this size).

Full-corpus exact ranking, the user's training items excluded, recall@20 with |test items| as the denominator (the
LightGCN code's convention; on leave-one-out data it is HR@20), NDCG@20 with the ideal DCG over min(|test|, 20),
95% bootstrap intervals over users. ``published`` quotes numbers for exactly that split where we found them.

    python -m benchmarks.bench_quality [--datasets=ml-1m,lastfm,amazon-beauty,ml-100k] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from configs.base import override
from retrieval import artifacts
from retrieval.data import synthetic
from retrieval.errors import GateError
from retrieval.jobs import identity
from retrieval.jobs.job import TrainingJob

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
BASELINES = ("most_popular", "item_knn", "ease")
MEASURES = "full-corpus exact ranking; training items excluded; recall denominator |test items|; 95% bootstrap CI"
_LIGHTGCN = "Lee et al., RecSys 2024 (LightGCN++), Table 1, same split and protocol"
PUBLISHED = {
    "ml-1m": f"recall@20 / NDCG@20: BPR-MF 0.2098 / 0.2692, LightGCN 0.2392 / 0.3010, LightGCN++ 0.2616 / 0.3275 "
             f"({_LIGHTGCN})",
    "lastfm": f"recall@20 / NDCG@20: BPR-MF 0.2014 / 0.1891, LightGCN 0.2523 / 0.2427, LightGCN++ 0.2715 / 0.2624 "
              f"({_LIGHTGCN})",
    "amazon-beauty": "HR@20 / NDCG@20: BPR-MF 0.0474 / 0.0192, SASRec 0.0894 / 0.0386, ICLRec 0.1058 / 0.0483 (Chen "
                     "et al., WWW 2022, ICLRec; leave-last-one-out, full ranking, training items excluded)",
    "ml-100k": "none found under exactly this protocol",
    "gowalla-shape": "synthetic data: none",
}
SET_SPLITS = ("ml-1m", "lastfm")
ALL = (*SET_SPLITS, "amazon-beauty", "ml-100k", "gowalla-shape")
GOWALLA_SHAPE = {"num_users": 29_858, "num_items": 40_981, "interactions_per_user": 34.0}

# The shipped recipe for each kind of data (configs/two_tower.py), and the variants compared on ml-100k.
RECIPE = [("two-tower (configs/two_tower.py)", "two_tower", {})]
ML100K_VARIANTS = [
    ("sampled softmax, unigram^0.75 + log-Q", "youtube_dnn", {
        "data.item_features_path": "", "data.user_features_path": "", "model.user_tower.use_example_age": False}),
    ("in-batch, static log-Q", "two_tower", {"model.objective.log_q": "static"}),
    ("in-batch, estimated log-Q", "two_tower", {"model.objective.log_q": "estimated"}),
    ("in-batch, no log-Q", "two_tower", {"model.objective.log_q": "none"}),
    ("Item2Vec (user = mean of history)", "item2vec", {}),
]
MAX_EPOCHS, PATIENCE = 60, 8  # the patience of configs/two_tower.py (see there why 8)


def _config(module: str, settings: dict):
    config = __import__(f"configs.{module}", fromlist=["get_config"]).get_config()
    return override(config, {"eval.ks": (10, 20, 50, 100), "eval.bootstrap": 200, "gate.floors": "",
                             "gate.min_lift_over_popular": -1.0, **settings})


def _run(config, directory: Path, run_id: str) -> tuple[dict, dict, float]:
    """Metrics, the train stage's summary and its seconds."""
    job = TrainingJob(config, str(directory), run_id=run_id)
    try:
        job.run()
    except GateError:
        if identity.validation_scored(config, {}) is None:
            raise  # a tuning run scored on valid.txt is never published; its metrics and summary still count
    return artifacts.read_json(job.paths.metrics), job.stages.summary("train") or {}, job.stages.timings["train"]


def _timed_run(config, directory: Path) -> tuple[dict, dict]:
    """One run; its metrics and wall/train seconds."""
    start = time.perf_counter()
    metrics, _, train_seconds = _run(config, directory, "timed")
    return metrics, {"epochs": config.train.epochs, "train_s": train_seconds,
                     "run_s": time.perf_counter() - start}


def _tuned_then_final(module: str, overrides: dict, tune: dict, final: dict, directory: Path,
                      smoke: bool) -> tuple[dict, dict]:
    """Early-stops a run on validation data to fix the epochs, then trains the final model for that many."""
    epochs_key = "item2vec.epochs" if module == "item2vec" else "train.epochs"
    if module == "item2vec" or smoke:
        epochs = 1 if smoke else None
    else:
        _, summary, _ = _run(_config(module, {**overrides, **tune, epochs_key: MAX_EPOCHS,
                                              "train.early_stopping_patience": PATIENCE, "eval.baselines": (),
                                              "eval.bootstrap": 0}), directory, "tune")
        epochs = summary.get("best_epoch") or MAX_EPOCHS
    settings = {**overrides, **final, **({epochs_key: epochs} if epochs else {})}
    metrics, _, seconds = _run(_config(module, settings), directory, "final")
    return metrics, {"epochs": epochs, "train_s": seconds}


def _set_split(name: str, tmp: Path) -> tuple[dict, dict, str]:
    folder = DATASETS / "set-splits" / name
    train_valid = tmp / f"{name}-train-valid.txt"
    train_valid.write_text((folder / "train.txt").read_text() + (folder / "valid.txt").read_text())
    common = {"data.format": "user_items", "data.split": "files", "data.order": "none"}
    tune = {**common, "data.train_path": str(folder / "train.txt"), "data.test_path": str(folder / "valid.txt"),
            "data.validation_path": str(folder / "valid.txt")}
    final = {**common, "data.train_path": str(train_valid), "data.test_path": str(folder / "test.txt")}
    return tune, final, ("sets (random per-user holdout, LightGCN++ split): tuned on valid.txt, final model on "
                         "train + valid -> test.txt")


def _sequence(path: Path, fmt: str) -> tuple[dict, dict, str]:
    common = {"data.train_path": str(path), "data.format": fmt, "data.split": "leave_last_n", "data.holdout_n": 1}
    return ({**common, "data.validation": True}, common,
            "sequences, leave-last-one-out next-item (epochs tuned on the second-to-last item)")


def _sorted_lines(directory: Path) -> Path:
    """Gowalla-shaped planted-cluster sets as id-sorted ``user item item ...`` lines."""
    interactions, _, _ = synthetic.generate(**GOWALLA_SHAPE, seed=0)
    items = interactions["item_id"].str[1:].astype(int).to_numpy()
    users = interactions["user_id"].str[1:].astype(int).to_numpy()
    order = np.lexsort((items, users))
    lines = pd.Series(items[order].astype(str)).groupby(users[order]).agg(" ".join)
    path = directory / "gowalla-shape.txt"
    path.write_text("\n".join(lines.index.astype(str) + " " + lines.to_numpy()) + "\n")
    return path


def _smoke_data(directory: Path) -> Path:
    interactions, _, _ = synthetic.generate(num_users=200, num_items=150, interactions_per_user=15, seed=1)
    path = directory / "interactions.csv"
    interactions.to_csv(path, index=False)
    return path


def _row(dataset: str, name: str, metrics: dict, prefix: str, protocol: str, extra: Optional[dict] = None) -> dict:
    row = {"dataset": dataset, "model": name}
    for metric in ("recall@20", "ndcg@20"):
        row[metric] = round(metrics[prefix + metric], 4)
        low, high = metrics.get(f"{prefix}{metric}_ci_low"), metrics.get(f"{prefix}{metric}_ci_high")
        if low is not None:
            row[f"{metric} 95% CI"] = f"[{low:.4f}, {high:.4f}]"
    row["users"] = metrics.get("count/eval_users")
    row.update({k: (round(v, 1) if k.endswith("_s") else v) for k, v in (extra or {}).items()})  # seconds
    row["protocol"] = f"{protocol}; {metrics.get('protocol', '')}; {MEASURES}"
    row["published"] = PUBLISHED.get(dataset, "")
    return row


def run_dataset(dataset: str, tmp: Path, smoke: bool = False) -> list[dict]:
    """Rows of one dataset: the model(s), then the baselines of the last run."""
    if smoke:
        tune, final, protocol = _sequence(_smoke_data(tmp), "csv")
        variants = RECIPE
    elif dataset in SET_SPLITS:
        tune, final, protocol = _set_split(dataset, tmp)
        variants = RECIPE
    elif dataset == "amazon-beauty":
        tune, final, protocol = _sequence(DATASETS / "amazon-beauty" / "Beauty.txt", "user_items")
        variants = RECIPE
    elif dataset == "gowalla-shape":
        final = {"data.train_path": str(_sorted_lines(tmp)), "data.format": "user_items", "data.split": "random",
                 "eval.bootstrap": 0}
        metrics, seconds = _timed_run(_config("two_tower", {**final, "eval.baselines": BASELINES}), tmp)
        rows = [_row(dataset, RECIPE[0][0], metrics, "", "id-sorted sets, random 80/20 holdout, fixed epochs",
                     seconds)]
        return rows + [_row(dataset, b.replace("_", "-"), metrics, f"baseline/{b}/", "same run") for b in BASELINES
                       if f"baseline/{b}/recall@20" in metrics]
    else:
        tune, final, protocol = _sequence(DATASETS / "ml-100k" / "u.data", "movielens")
        variants = ML100K_VARIANTS
    rows, metrics = [], {}
    for index, (name, module, overrides) in enumerate(variants):
        metrics, extra = _tuned_then_final(module, {"eval.baselines": (), **overrides}, tune,
                                           {**final, "eval.baselines": BASELINES if index == len(variants) - 1 else ()},
                                           tmp / f"runs{index}", smoke)
        rows.append(_row(dataset, name, metrics, "", protocol, extra))
    for baseline in BASELINES:
        if f"baseline/{baseline}/recall@20" in metrics:
            rows.append(_row(dataset, baseline.replace("_", "-"), metrics, f"baseline/{baseline}/", protocol,
                             _paired(metrics, baseline)))
    return rows


def _paired(metrics: dict, baseline: str) -> dict:
    """The last model minus ``baseline``, per user on the same users: recall@20 difference, 95% CI, p-value."""
    key = f"paired/{baseline}/recall@20_"
    if key + "diff" not in metrics:
        return {}
    return {"model minus this, recall@20": round(metrics[key + "diff"], 4),
            "its 95% CI": f"[{metrics[key + 'diff_ci_low']:.4f}, {metrics[key + 'diff_ci_high']:.4f}]",
            "p": round(metrics[key + "p_value"], 4)}


def run(smoke: bool, datasets: tuple = ALL) -> list[dict]:
    rows = []
    for dataset in (("synthetic-smoke",) if smoke else datasets):
        with tempfile.TemporaryDirectory() as tmp:
            rows += run_dataset(dataset, Path(tmp), smoke)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic data, one epoch")
    parser.add_argument("--datasets", default=",".join(ALL), help=f"comma-separated subset of {','.join(ALL)}")
    args = parser.parse_args()
    print(json.dumps(run(args.smoke, tuple(args.datasets.split(","))), indent=2))


if __name__ == "__main__":
    main()
