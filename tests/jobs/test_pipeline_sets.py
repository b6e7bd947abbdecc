"""Set data through the training job: id-sorted ``user_items`` lines are detected and learned as sets.

On a planted-cluster dataset written as id-sorted lines (the layout of many public random-holdout splits), the set
path must beat most-popular by a wide margin, while the next-item path forced onto the same lines
(``data.order=time``) learns the id order and does not.
"""

from pathlib import Path

import numpy as np
import pytest

from retrieval import artifacts
from retrieval.data import synthetic
from retrieval.errors import GateError, InputError
from retrieval.jobs.job import TrainingJob


@pytest.fixture(scope="module")
def sorted_lines(tmp_path_factory) -> Path:
    interactions, _, _ = synthetic.generate(num_users=400, num_items=300, interactions_per_user=25,
                                            num_clusters=6, zipf_exponent=0.2, affinity=0.95, seed=5)
    interactions["item"] = interactions["item_id"].str[1:].astype(int)
    path = tmp_path_factory.mktemp("sets") / "train.txt"
    with open(path, "w") as f:
        for user, items in interactions.groupby("user_id", sort=False)["item"]:
            f.write(" ".join([user[1:], *map(str, sorted(items))]) + "\n")
    return path


def _config(path: Path, **extra):
    from configs.base import override
    from configs.two_tower import get_config

    return override(get_config(), {
        "data.train_path": str(path), "data.format": "user_items", "data.split": "random",
        "model.embedding_dim": 16, "model.item_tower.id_embedding_dim": 16, "model.user_tower.hidden_units": (32,),
        "model.max_history": 20, "model.temperature": 0.1, "model.objective.log_q": "static",
        "train.batch_size": 256, "train.warmup_steps": 5, "train.learning_rate": 0.01, "train.epochs": 15,
        "train.log_every_steps": 1000, "eval.ks": (20,), "eval.bootstrap": 0, "eval.baselines": ("most_popular",),
        "index.recall_k": 20, "gate.floors": "recall@20=0.0", "train.validation_fraction": 0.0, **extra})


@pytest.fixture(scope="module")
def set_run(sorted_lines, tmp_path_factory):
    job = TrainingJob(_config(sorted_lines), str(tmp_path_factory.mktemp("out")), "sets")
    return job, job.run()


def test_sorted_lines_are_learned_as_sets_without_a_flag(set_run):
    job, outcome = set_run
    manifest = artifacts.read_json(job.paths.manifest)
    assert manifest["data_order"]["order"] == "none" and manifest["data_order"]["source"] == "detected"
    assert manifest["max_history"] == job.config.model.inference_history == 200  # inference pools more of the set
    assert manifest["inference_part_size"] == 10  # in parts of a training draw's size: max_history 20 * keep 0.5
    metrics = artifacts.read_json(job.paths.metrics)
    assert "order: none" in metrics["protocol"]
    popular = metrics["baseline/most_popular/recall@20"]
    assert outcome.metrics["recall@20"] > 2 * popular and outcome.metrics["recall@20"] > popular + 0.2


def test_next_item_path_on_sorted_lines_does_not_learn_the_users(set_run, sorted_lines, tmp_path):
    _, set_outcome = set_run
    job = TrainingJob(_config(sorted_lines, **{"data.order": "time"}), str(tmp_path), "time")
    try:
        job.run()
    except Exception:  # the gate may refuse it; the metrics are written before the gate
        pass
    metrics = artifacts.read_json(job.paths.metrics)
    assert "order: time" in metrics["protocol"]
    assert metrics["recall@20"] < set_outcome.metrics["recall@20"] - 0.15
    assert metrics["recall@20"] < 1.5 * metrics["baseline/most_popular/recall@20"]


def test_time_splits_refuse_set_data(sorted_lines, tmp_path):
    for split in ("leave_last_n", "temporal"):
        with pytest.raises(InputError, match=f"data.split={split} needs time order.*data.order=time") as error:
            TrainingJob(_config(sorted_lines, **{"data.split": split}), str(tmp_path), split).run()
        assert str(sorted_lines) in str(error.value)


def test_set_histories_are_random_subsets_in_the_run(set_run):
    """Train data of a set run carries a random order within users, so 'most recent first, capped' (the history of
    evaluation, recommend and serving) is a random subset, not the largest ids."""
    import pandas as pd

    job, _ = set_run
    train = pd.read_parquet(job.paths.train_data)
    ids = train["item_id"].astype(int).to_numpy()
    newest_first = train.sort_values(["user_id", "timestamp"], ascending=[True, False])
    descending = newest_first.groupby("user_id")["item_id"].apply(
        lambda s: bool((np.diff(s.astype(int).to_numpy()) <= 0).all()))
    assert descending.mean() < 0.1 and len(ids) > 1000


def test_the_served_vector_of_a_long_history_averages_its_parts(set_run):
    """The exported encoder (what evaluation, recommend and the server call) deals 25 items into 3 parts of at most
    10 (max_history 20 * keep 0.5), each pooled as a short history is; the vector is their normalised mean."""
    from retrieval.data.vocab import NUM_RESERVED, Vocabulary
    from retrieval.export import load_user_encoder

    job, _ = set_run
    items = list(Vocabulary.load(job.paths.item_vocab).ids[NUM_RESERVED:NUM_RESERVED + 25])
    user = str(Vocabulary.load(job.paths.user_vocab).ids[NUM_RESERVED])
    encoder = load_user_encoder(job.paths.root)
    parts = encoder.encode([user] * 3, [items[k::3] for k in range(3)])
    expected = parts.mean(axis=0) / np.linalg.norm(parts.mean(axis=0))
    np.testing.assert_allclose(encoder.encode([user], [items])[0], expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(encoder.encode([user], [items[:10]])[0], expected, atol=1e-3)


@pytest.mark.parametrize("max_users", [0, 100])
def test_early_stopping_watches_the_evaluation_protocol_on_validation(sorted_lines, tmp_path, max_users):
    """With a validation file, training early-stops on validation recall@20 computed as the evaluation computes it:
    the best value it logged equals the evaluation of the kept (best) weights on that same file; with a user sample
    (eval.max_users), on the same sampled users."""
    lines = sorted_lines.read_text().splitlines()
    train, valid = tmp_path / "train.txt", tmp_path / "valid.txt"
    train.write_text("\n".join(" ".join(line.split()[:-2]) for line in lines) + "\n")
    valid.write_text("\n".join(" ".join(line.split()[:1] + line.split()[-2:]) for line in lines) + "\n")
    job = TrainingJob(_config(train, **{"data.split": "files", "data.order": "none", "data.test_path": str(valid),
                                        "data.validation_path": str(valid), "train.epochs": 6,
                                        "train.early_stopping_patience": 2, "eval.max_users": max_users}),
                      str(tmp_path / "out"), "early")
    with pytest.raises(GateError, match="data.test_path is the validation data"):  # a tuning run: never published
        job.run()
    summary = job.stages.summary("train")
    assert 1 <= summary["best_epoch"] <= 6
    if not max_users:  # learning is checked on every user; the sample checks that both sides use the same users
        assert summary["best_metric"] > 0.2
    metrics = artifacts.read_json(job.paths.metrics)
    assert ("protocol/user_sample" in metrics) == bool(max_users)
    assert metrics["recall@20"] == pytest.approx(summary["best_metric"], abs=1e-6)


def test_the_teacher_and_the_report_share_one_rp3beta_tuning_on_the_holdout(sorted_lines, tmp_path):
    config = _config(sorted_lines, **{"train.teacher_items": 3, "train.validation_fraction": 0.1,
                                      "train.early_stopping_patience": 2, "train.epochs": 2,
                                      "eval.baselines": ("most_popular", "rp3beta"), "eval.baseline_budget_s": 60.0})
    job = TrainingJob(config, str(tmp_path), "teacher")
    job.run()
    record = artifacts.read_json(job.paths.root / "baseline_tuning.json")
    assert list(record) == ["rp3beta"]  # tuned once, before training, for the teacher; the evaluation read it
    tuned = record["rp3beta"]["tuned"]
    metrics = artifacts.read_json(job.paths.metrics)
    assert metrics["baseline/rp3beta/tuning_seconds"] == tuned["seconds"]
    assert {name: metrics[f"baseline/rp3beta/params/{name}"] for name in tuned["params"]} == tuned["params"]
