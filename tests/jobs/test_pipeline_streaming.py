"""The training job with the streamed prepare (data.streaming=on): trains from TFRecord shards, publishes, and warm
starts the next streamed run."""

import math

import numpy as np
import pandas as pd

from retrieval.data.vocab import Vocabulary
from retrieval.jobs.job import TrainingJob
from tests.jobs.test_pipeline_job import make_config


def test_streamed_run_trains_from_shards_and_publishes(log_path, tmp_path):
    config = make_config(log_path, **{"data.streaming": "on", "data.num_shards": 4,
                                      "model.objective.log_q": "static"})
    job = TrainingJob(config, str(tmp_path), "s1")
    outcome = job.run()
    assert outcome.published  # the gate also checked the 5% lift over most-popular
    prepare = job.stages.summary("prepare")
    assert prepare["examples"]["shards"] == 4 and prepare["examples"]["count"] > 0 and prepare["examples"]["streamed"]
    steps = config.train.epochs * math.ceil(prepare["examples"]["count"] / config.train.batch_size)
    assert job.stages.summary("train")["steps"] == steps
    assert len(pd.read_parquet(job.paths.test_data)) == prepare["test_interactions"] == 300

    # Warm start from the published streamed run: the streamed prepare keeps the vocabularies stable (same data: the
    # same order, even where today's counts tie differently) and the id rows are copied in before training.
    warm = make_config(log_path, **{"data.streaming": "on", "data.num_shards": 3, "model.objective.log_q": "static",
                                    "publish.warm_start": True, "train.epochs": 1, "train.learning_rate": 0.0,
                                    "gate.max_regression": 1.0, "gate.min_lift_over_popular": -1.0})
    again = TrainingJob(warm, str(tmp_path), "s2")
    again.run()
    for name in ("item_vocab", "user_vocab"):
        assert list(Vocabulary.load(getattr(again.paths, name)).ids) == list(Vocabulary.load(getattr(job.paths,
                                                                                                      name)).ids)
    with np.load(job.paths.root / "id_tables.npz") as old, np.load(again.paths.root / "id_tables.npz") as new:
        np.testing.assert_allclose(new["item"][2:], old["item"][2:], atol=1e-6)


def test_streamed_set_run_trains_from_pair_shards(log_path, tmp_path):
    config = make_config(log_path, **{"data.streaming": "on", "data.num_shards": 3, "data.order": "none",
                                      "data.split": "random", "train.epochs": 1, "gate.min_lift_over_popular": -1.0})
    job = TrainingJob(config, str(tmp_path), "sets")
    job.run()
    prepare = job.stages.summary("prepare")
    assert prepare["order"]["order"] == "none"
    assert prepare["examples"]["count"] == prepare["train_interactions"] == len(pd.read_parquet(
        job.paths.train_data))
    assert sorted(p.name for p in (job.paths.train_data.parent / "examples").glob("set-*.bin")) == [
        "set-00000.bin", "set-00001.bin", "set-00002.bin"]
    assert job.stages.summary("train")["steps"] == math.ceil(prepare["train_interactions"] / config.train.batch_size)


def _user_items_files(log_dir, directory):
    """The synthetic log as a public-style set split: ``train.txt`` / ``test.txt``, one ``user item item ...`` line
    per user, items in id order."""
    frame = pd.read_csv(log_dir / "interactions.csv", dtype={"user_id": str, "item_id": str})
    frame["item"] = pd.factorize(frame["item_id"])[0]
    frame["user"] = pd.factorize(frame["user_id"])[0]
    test = frame.groupby("user").cumcount() % 5 == 4
    paths = {}
    for name, part in (("train", frame[~test]), ("test", frame[test])):
        lines = part.sort_values(["user", "item"]).groupby("user")["item"].apply(lambda s: " ".join(map(str, s)))
        paths[name] = directory / f"{name}.txt"
        paths[name].write_text("\n".join(f"{user} {items}" for user, items in lines.items()) + "\n")
    return paths


def test_public_set_split_and_item2vec_run_streamed(log_path, tmp_path):
    """A user_items train/test pair (split=files) and an Item2Vec run both go through the streamed prepare."""
    files = _user_items_files(log_path, tmp_path)
    config = make_config(log_path, **{"data.streaming": "on", "data.num_shards": 3, "data.format": "user_items",
                                      "data.split": "files", "data.train_path": str(files["train"]),
                                      "data.test_path": str(files["test"]), "data.order": "none",
                                      "data.timestamp_column": "", "model.user_tower.use_example_age": False,
                                      "train.epochs": 1, "gate.min_lift_over_popular": -1.0})
    job = TrainingJob(config, str(tmp_path / "models"), "sets")
    job.run()
    prepare = job.stages.summary("prepare")
    assert prepare["examples"] == {"kind": "set", "count": prepare["train_interactions"], "shards": 3,
                                   "streamed": True}

    from configs.base import override
    from configs.item2vec import get_config

    item2vec = override(get_config(), {"data.train_path": str(log_path / "interactions.csv"),
                                       "data.streaming": "on", "data.num_shards": 3, "item2vec.epochs": 1,
                                       "gate.min_lift_over_popular": -1.0, "gate.floors": ""})
    run = TrainingJob(item2vec, str(tmp_path / "models"), "i2v")
    run.run()
    assert run.stages.summary("prepare")["examples"]["kind"] == "no_examples"
    assert run.stages.summary("train")["vectors"][0] == run.stages.summary("prepare")["items"] + 2
