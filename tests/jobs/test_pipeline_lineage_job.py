"""Lineages end to end: a run on other data neither replaces nor is compared with the production run, and a tuning
run scored on its validation file is refused by the gate (tiny runs of the real job)."""

import os
import shutil

import pytest

from retrieval import artifacts
from retrieval.data import synthetic
from retrieval.errors import GateError
from retrieval.jobs import identity
from retrieval.jobs.job import TrainingJob
from tests.jobs.test_pipeline_job import make_config


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    interactions, _, _ = synthetic.generate(num_users=200, num_items=100, interactions_per_user=15, num_clusters=4,
                                            seed=5)
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    interactions.to_csv(a / "interactions.csv", index=False)
    shutil.copy(a / "interactions.csv", b / "interactions.csv")  # same contents, another source
    last = interactions.groupby("user_id").tail(1)
    interactions.drop(last.index).to_csv(a / "train.csv", index=False)
    last.to_csv(a / "valid.csv", index=False)
    return a, b


FAST = {"train.epochs": 3, "gate.min_lift_over_popular": -1.0}


def test_runs_on_other_data_publish_to_their_own_lineage(logs, tmp_path):
    a, b = logs
    first = TrainingJob(make_config(a, **FAST), str(tmp_path), "a1")
    first.run()
    model_dir = first.model_dir
    lineage_a = identity.lineage_of(first.config).name
    assert artifacts.read_json(first.paths.manifest)["lineage"]["name"] == lineage_a
    assert os.readlink(model_dir.root / "latest") == "a1" and model_dir.latest_run_id(lineage_a) == "a1"

    # An untrained model on another source: it would regress against a1, but it is not compared with it, and it does
    # not replace it.
    other = TrainingJob(make_config(b, **FAST, **{"train.learning_rate": 0.0, "gate.max_regression": 0.0}),
                        str(tmp_path), "b1")
    other.run()
    lineage_b = identity.lineage_of(other.config).name
    assert lineage_b != lineage_a
    assert os.readlink(model_dir.root / "latest") == "a1" and model_dir.latest_run_id(lineage_b) == "b1"
    published = artifacts.read_json(other.paths.stages / "publish.json")["summary"]
    assert published["production"] is False and published["link"] == f"lineages/{lineage_b}/latest"

    # A tuning run (test file = validation file) passes every metric check and is still refused.
    tuning = make_config(a, **FAST, **{"data.split": "files", "data.train_path": str(a / "train.csv"),
                                       "data.test_path": str(a / "valid.csv"),
                                       "data.validation_path": str(a / "valid.csv")})
    with pytest.raises(GateError, match="data.test_path is the validation data"):
        TrainingJob(tuning, str(tmp_path), "t1").run()
    assert os.readlink(model_dir.root / "latest") == "a1"
