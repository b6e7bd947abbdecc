"""configs/sequential.py through the training job: on sequences whose next item follows from the last one, the
self-attentive user tower reads the order a mean pooling cannot; on set data it falls back to mean pooling."""

from pathlib import Path

import numpy as np
import pytest

from retrieval import artifacts
from retrieval.export import load_user_encoder
from retrieval.jobs.job import TrainingJob

USERS, ITEMS, LENGTH, JUMP = 500, 60, 12, 0.3


@pytest.fixture(scope="module")
def chains(tmp_path_factory) -> Path:
    """``user item item ...`` lines in time order: a random first item, then the last item's fixed successor (a seeded
    permutation) with probability 1 - JUMP, else a uniform item. The last item decides the next; the set of items
    does not (it holds a few runs of successors, and the end of each run is a candidate)."""
    rng = np.random.default_rng(0)
    successor = rng.permutation(ITEMS)
    path = tmp_path_factory.mktemp("chains") / "train.txt"
    lines = []
    for user in range(USERS):
        items = [int(rng.integers(ITEMS))]
        for _ in range(LENGTH - 1):
            items.append(int(successor[items[-1]]) if rng.random() > JUMP else int(rng.integers(ITEMS)))
        lines.append(" ".join(map(str, [user, *(item + 1000 for item in items)])))
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(module: str, path: Path, directory: Path, **extra):
    from configs.base import override

    config = __import__(f"configs.{module}", fromlist=["get_config"]).get_config()
    config = override(config, {
        "data.train_path": str(path), "data.format": "user_items", "data.split": "leave_last_n",
        "model.embedding_dim": 16, "model.item_tower.id_embedding_dim": 16,
        "model.user_tower.history_embedding_dim": 16, "model.max_history": 8, "train.batch_size": 64,
        "train.warmup_steps": 5, "train.learning_rate": 0.01, "train.epochs": 15, "train.log_every_steps": 1000,
        "train.early_stopping_patience": 0, "eval.ks": (1, 10), "eval.bootstrap": 0,
        "eval.baselines": ("most_popular",), "index.recall_k": 10, "gate.floors": "recall@1=0.0",
        "gate.min_lift_over_popular": -1.0, **extra})
    job = TrainingJob(config, str(directory), "run")
    return job, job.run()


def test_the_self_attentive_tower_reads_the_order_a_mean_pooling_cannot(chains, tmp_path):
    job, outcome = _run("sequential", chains, tmp_path)
    _, mean = _run("two_tower", chains, tmp_path)
    # About 1 - JUMP of the last items are followed by their successor; a set model must guess which run ended last.
    assert outcome.metrics["recall@1"] > 0.5
    assert outcome.metrics["recall@1"] > mean.metrics["recall@1"] + 0.2
    assert artifacts.read_json(job.paths.manifest)["data_order"]["order"] == "time"
    # Exported through the recipe's signature (history most recent first): the same items in another order give
    # another user vector.
    encoder = load_user_encoder(job.paths.root)
    assert encoder.max_history == 8
    vectors = encoder.encode(["0", "0"], [["1003", "1007"], ["1007", "1003"]])
    assert np.abs(vectors[0] - vectors[1]).max() > 1e-3


def test_set_data_falls_back_to_mean_pooling(chains, tmp_path, caplog):
    _, outcome = _run("sequential", chains, tmp_path, **{"data.order": "none", "data.split": "random"})
    assert "the history is mean-pooled instead" in caplog.text
    assert outcome.metrics["recall@1"] > 0
