"""One command that tunes honestly: with early stopping and no validation data, the run holds out part of the
training data (train.validation_fraction), early-stops on it, and refits on all training data for the best epoch
count (train.refit); the test data take no part in either."""

import math

import pandas as pd

from retrieval.data import prepare
from retrieval.jobs.job import TrainingJob
from tests.jobs.test_pipeline_job import make_config

TUNING = {"train.validation_fraction": 0.1, "train.early_stopping_patience": 2, "train.epochs": 6,
          "gate.min_lift_over_popular": -1.0}


def _rows(frame: pd.DataFrame) -> list:
    return sorted(map(tuple, frame[["user_id", "item_id"]].astype(str).to_numpy()))


def test_sequences_hold_out_each_users_last_training_item_then_refit(log_path, tmp_path):
    job = TrainingJob(make_config(log_path, **TUNING), str(tmp_path), "tuned")
    job.run()
    holdout = job.stages.summary("prepare")["tuning"]
    train = pd.read_parquet(job.paths.train_data)
    tuning_train = pd.read_parquet(prepare.tuning_data(job.paths, "train"))
    validation = pd.read_parquet(prepare.tuning_data(job.paths, "validation"))
    assert holdout["validation_interactions"] == len(validation) == train["user_id"].nunique()  # one per user
    assert _rows(pd.concat([tuning_train, validation])) == _rows(train)  # a split of train: test never enters
    last = train.sort_values("timestamp", kind="stable").groupby("user_id").tail(1)
    assert _rows(last) == _rows(validation)
    summary = job.stages.summary("train")
    tuned = summary["tuning"]
    assert summary["refit"] and tuned["best_epoch"] is not None and "val_recall" in tuned["history"]
    assert (summary["best_epoch"], summary["best_metric"]) == (tuned["best_epoch"], tuned["best_metric"])  # not None
    assert "val_recall" not in summary["history"] and len(summary["history"]["loss"]) == tuned["best_epoch"]
    examples = job.stages.summary("prepare")["examples"]["count"]
    assert summary["steps"] == tuned["best_epoch"] * math.ceil(examples / 256)


def test_sets_hold_out_a_random_share_and_a_given_validation_file_turns_it_off(log_path, tmp_path):
    sets = {**TUNING, "data.order": "none", "data.split": "random", "train.validation_fraction": 0.25,
            "train.refit": False, "train.epochs": 2}
    job = TrainingJob(make_config(log_path, **sets), str(tmp_path), "sets")
    job.run()
    train = pd.read_parquet(job.paths.train_data)
    expected = (train.groupby("user_id").size() * 0.25).astype(int).clip(upper=train.groupby("user_id").size() - 1)
    assert job.stages.summary("prepare")["tuning"]["validation_interactions"] == expected.sum()
    summary = job.stages.summary("train")
    assert summary["refit"] is False and summary["steps"] == summary["tuning"]["steps"]

    config = make_config(log_path, **{**TUNING, "data.validation": True})
    assert prepare.tuning_fraction(config) == 0.0  # leave_last_n's own validation part is used instead
    assert prepare.tuning_fraction(make_config(log_path, **{**TUNING, "train.early_stopping_patience": 0})) == 0.0
