"""Cold-start items on real data: MovieLens-1M (partial) with titles, genres and years, through the one command.

A seeded 10% of the movies (``data.cold_item_fraction=0.1``, chosen by a hash of the id) lose every training
rating to the test part and stay in the catalogue (``data.item_features_path``: a table written from
``movies.dat``, title words as ``text``, genres as ``multi``, the year as ``categorical``). The shipped
``configs/catalogue.py`` trains on the rest (leave-last-one-out next-item split by time, the automatic holdout and
refit), and the evaluation reports the warm headline and the cold items apart (``retrieval.evaluation.cold_items``):
ranked among the cold items only and in the whole catalogue, beside the content baseline of the same run (TF-IDF
profile cosine) with paired intervals. Each row is one run (one cold draw), and a last row per recipe summarises its
draws (:func:`summary`: each figure's mean and range, and in how many draws each paired interval lies above zero).
``--id_dropout`` lists the item-id dropout shares to compare (the first is the shipped one); ``0.0`` gives the
"without id dropout" row.

    python -m benchmarks.bench_cold_start [--split=test|validation] [--id_dropout=0.15] [--seeds=3]
        [--first_seed=43] [--epochs=0] [--set=key=value ...] [--smoke] [--record]

The seed also draws the cold items. ``--split=validation`` is for choosing: each user's last rating (the test item)
is removed before the run, so the run's own leave-last-one-out "test" is her second-to-last rating, a validation
item, and its figures are validation figures; its draws start at seed 7 (``VALIDATION_SEEDS``). ``--split=test``
(the default) reads the test items on three draws from seed 43 on (``FIRST_SEED``), never a validation draw: seed
42's test items were read during earlier rounds' development (``READ_TEST_SEEDS``), so a report of the shipped
recipe reads fresh draws.

``--epochs`` > 0 sets the epochs; 0 keeps the config's (8, chosen on validation: configs/catalogue.py). The data
(``../shared``) is read in place and the derived files go to a temporary directory.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import pandas as pd

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from benchmarks.record import add_record_flag, record, should_record
from configs import catalogue
from configs.base import override
from retrieval.data import movielens, splits
from retrieval.jobs.job import TrainingJob

DATASET = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "ml-1m-partial"
FIRST_SEED = {"test": 43, "validation": 7}
READ_TEST_SEEDS = (42,)  # test draws read while recipes were being chosen: not fresh, so not the default
VALIDATION_SEEDS = range(FIRST_SEED["validation"], min(READ_TEST_SEEDS))  # draws that choose; a test run refuses them
YEAR = re.compile(r"\s*\((\d{4})\)\s*$")
HEADLINE = ("recall@20", "ndcg@20")
# The year as a category: its popularity and taste effects are not linear in the year (a numeric feature enters the
# tower as one linear input); the content baseline gets the same column as a TF-IDF term.
FEATURES = "title:text,genres:multi,year:categorical"


def item_table(movies: Path, path: Path) -> Path:
    """Writes ``item_id, title, genres, year`` from ``movies.dat`` (the year cut from the title)."""
    items = movielens.read_items(movies)
    years = items["title"].str.extract(YEAR)[0]
    table = pd.DataFrame({"item_id": items["item_id"], "title": items["title"].str.replace(YEAR, "", regex=True),
                          "genres": items["genres"], "year": years})
    table.to_csv(path, index=False)
    return path


def ratings(split: str, workdir: Path, smoke: bool) -> Path:
    """The ratings the runs read, as csv: all of them (``test``), or without each user's last rating
    (``validation``: the one command's leave-last-one-out then holds out the second-to-last); 150 users under
    ``smoke``."""
    table = movielens.read_ratings(DATASET / "ratings.dat")
    if smoke:
        table = table[table["user_id"].isin(table["user_id"].drop_duplicates().head(150))]
    if split == "validation":
        table = splits.leave_last_n_out(table, n=1).train
    path = workdir / f"ratings-{split}.csv"
    table[["user_id", "item_id", "timestamp"]].to_csv(path, index=False)
    return path


def run(dropout: float, seed: int, workdir: Path, data: Path, items: Path, epochs: int, smoke: bool,
        overrides: Optional[dict] = None) -> dict:
    settings = {
        "data.train_path": str(data), "data.format": "csv",
        "data.item_features_path": str(items), "data.item_features": FEATURES,
        "data.cold_item_fraction": 0.1, "model.item_tower.id_dropout": dropout, "seed": seed,
        "eval.bootstrap": 200, "gate.floors": "", "gate.min_lift_over_popular": -1.0, **(overrides or {}),
    }
    if not dropout:  # the cold head learns from the dropped ids (and carries the content term): without them, none
        settings.update({"model.item_tower.cold_head": False, "model.item_tower.content_profile_weight": 0.0})
    if epochs:
        settings["train.epochs"] = epochs
    if smoke:
        settings.update({"train.epochs": 1, "eval.baselines": ("most_popular",), "eval.bootstrap": 20})
    config = override(catalogue.get_config(), settings)
    start = time.monotonic()
    outcome = TrainingJob(config, str(workdir / f"out-{dropout}-{seed}"), f"run-{seed}").run()
    seconds = time.monotonic() - start
    m = outcome.metrics
    from retrieval import artifacts  # the full metrics (the outcome keeps the flat headline)
    full = artifacts.read_json(Path(outcome.run_dir) / "metrics.json")
    row = {"id_dropout": dropout, "seed": seed, "overrides": overrides or {}, "seconds": round(seconds, 1),
           "warm recall@20": m.get("recall@20"), "warm ndcg@20": m.get("ndcg@20"),
           "warm recall@20 CI": [full.get("recall@20_ci_low"), full.get("recall@20_ci_high")]}
    for name in ("ease", "rp3beta", "item_knn"):  # the item-item baselines of the same run, on the warm items
        if f"baseline/{name}/recall@20" in full:
            row[f"warm {name} recall@20 / ndcg@20"] = [full[f"baseline/{name}/{metric}"] for metric in HEADLINE]
    for space, label in (("among_cold/", "cold among cold"), ("", "cold in catalogue")):
        for metric in HEADLINE:
            key = f"cold_items/{space}{metric}"
            row[f"{label} {metric}"] = full.get(key)
            row[f"{label} content {metric}"] = full.get(f"cold_items/{space}content/{metric}")
            paired = f"cold_items/{space}paired/content/{metric}"
            row[f"{label} {metric} minus content"] = [full.get(paired + "_diff"), full.get(paired + "_diff_ci_low"),
                                                      full.get(paired + "_diff_ci_high")]
    among, content = row["cold among cold recall@20"], row["cold among cold content recall@20"]
    row["cold among cold recall@20 / content"] = among / content if among is not None and content else None
    train = artifacts.read_json(Path(outcome.run_dir) / "stages" / "train.json")["summary"]
    row["warm validation recall@20"] = (train.get("tuning") or {}).get("best_metric")  # the automatic holdout
    row["cold test pairs"] = full.get("count/cold_items/test_pairs")
    row["cold users"] = full.get("count/cold_items/eval_users")
    return row


SUMMARISED = ("warm recall@20", "warm ndcg@20", "cold among cold recall@20", "cold among cold content recall@20",
              "cold among cold recall@20 / content", "cold in catalogue recall@20",
              "cold in catalogue content recall@20", "seconds")


def summary(rows: list[dict]) -> list[dict]:
    """One row per id-dropout share over its draws: each of :data:`SUMMARISED` as its mean over the draws with their
    range (``"<figure> mean"``, ``_min``, ``_max``: the results page shows ``mean (min-max)``), and for each paired
    comparison with the content baseline, in how many of the ``draws`` its 95% interval lies above zero."""
    out = []
    for dropout in dict.fromkeys(row["id_dropout"] for row in rows):
        draws = [row for row in rows if row["id_dropout"] == dropout]
        summed = {"split": draws[0]["split"], "id_dropout": dropout, "draws": len(draws),
                  "seeds": ", ".join(str(row["seed"]) for row in draws)}
        for key in SUMMARISED:
            values = [row[key] for row in draws if row.get(key) is not None]
            if values:
                digits = 0 if key == "seconds" else 4
                summed.update({f"{key} mean": round(sum(values) / len(values), digits),
                               f"{key} mean_min": round(min(values), digits),
                               f"{key} mean_max": round(max(values), digits)})
        for label in ("cold among cold", "cold in catalogue"):
            for metric in HEADLINE:
                key = f"{label} {metric} minus content"
                lows = [row[key][1] for row in draws if row.get(key) and row[key][1] is not None]
                summed[f"{key}: draws with the interval above zero"] = sum(low > 0 for low in lows)
        out.append(summed)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--id_dropout", default="0.15", help="comma-separated item-id dropout shares (the "
                        "first: the shipped one; 0.0: without id dropout)")
    parser.add_argument("--seeds", type=int, default=3, help="cold draws per recipe")
    parser.add_argument("--split", choices=tuple(FIRST_SEED), default="test", help="validation: without each "
                        "user's last rating, figures to choose by (module docstring); test: the test items")
    parser.add_argument("--first_seed", type=int, default=0, help="the first cold draw (0: 43 for test, 7 for "
                        "validation; the shipped id_dropout was chosen at 7)")
    parser.add_argument("--epochs", type=int, default=0)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--set", action="append", default=[], help="key=value config overrides (Python literals), "
                        "e.g. --set=model.item_tower.id_dropout=0.3")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    overrides = {key: ast.literal_eval(value) for key, value in (item.split("=", 1) for item in args.set)}
    first = args.first_seed or FIRST_SEED[args.split]
    seeds = range(first, first + args.seeds)
    if args.split == "test" and any(seed in VALIDATION_SEEDS for seed in seeds):
        parser.error(f"seeds {VALIDATION_SEEDS.start}-{VALIDATION_SEEDS.stop - 1} are validation draws (they chose "
                     f"the recipe): a test run reads fresh draws, from {FIRST_SEED['test']} on")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        items = item_table(DATASET / "movies.dat", workdir / "items.csv")
        data = ratings(args.split, workdir, args.smoke)
        for dropout in (float(x) for x in args.id_dropout.split(",")):
            for seed in seeds:
                rows.append({"split": args.split, **run(dropout, seed, workdir, data, items, args.epochs, args.smoke,
                                                        overrides)})
                print(rows[-1], flush=True)
    for row in summary(rows):
        print(row, flush=True)
        rows.append(row)
    if should_record(args):
        record("bench_cold_start", rows, "python -m benchmarks.bench_cold_start " + " ".join(argv or sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
