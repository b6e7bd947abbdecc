"""The example shards the prepare stage writes (retrieval/data/prepare.py) as streamed training reads them: the
TFRecord next-item shards and the set-data pair shards (tests/data/test_data_prepare.py: the same data on every path)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from configs.base import override
from configs.two_tower import get_config
from retrieval.artifacts import RunPaths, write_json
from retrieval.data import handoff, prepare, synthetic
from retrieval.data.engine import Embedded
from retrieval.data.set_examples import BLOCK_ROWS, SetExamples, SetShards, write_set_shard
from retrieval.data.shards import ExampleShards
from retrieval.data.vocab import Vocabulary


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> Path:
    interactions, _, _ = synthetic.generate(num_users=120, num_items=80, interactions_per_user=12, num_clusters=4,
                                            seed=5)
    interactions.loc[5, "timestamp"] = interactions.loc[4, "timestamp"]  # a tie in time keeps file order
    path = tmp_path_factory.mktemp("log") / "log.csv"
    interactions.to_csv(path, index=False)
    return path


def run(path: Path, run_dir: Path, order: str = "auto", **extra) -> dict:
    config = override(get_config(), {"data.train_path": str(path), "model.max_history": 6, **extra})
    return prepare.run(handoff.settings_of(config, run_dir, num_shards=3), Embedded(), order).as_dict()


def test_set_data_writes_pair_shards_whose_histories_are_drawn_per_epoch(log, tmp_path):
    """Set data: each shard's training pairs; one epoch of SetShards holds every known training pair once as a
    target, each history a subset of that user's other training items (never the target), redrawn every epoch; a
    single shard equals the in-memory SetExamples draw."""
    summary = run(log, tmp_path, "none", **{"data.split": "random"})
    paths = RunPaths(tmp_path)
    train = pd.read_parquet(paths.train_data)
    assert summary["order"]["order"] == "none" and summary["examples"]["count"] == len(train)
    sizes = pd.read_csv(log, dtype={"user_id": str}).groupby("user_id").size()
    latest = train.groupby("user_id")["timestamp"].max()
    assert (latest < sizes.loc[latest.index]).all()  # positions in a random order, not times
    items, users = Vocabulary.load(paths.item_vocab), Vocabulary.load(paths.user_vocab)
    pairs = pd.DataFrame({"user": users.lookup(train["user_id"]), "label": items.lookup(train["item_id"])})
    owned = pairs.groupby("user")["label"].apply(set).to_dict()
    set_shards = SetShards.load(prepare.examples_dir(paths), max_history=5, history_keep=1.0)
    assert len(set_shards.files) == 3 and len(set_shards) == len(pairs)

    def epoch(seed: int) -> list:
        return list(set_shards.to_dataset(64, shuffle=True, seed=seed).as_numpy_iterator())

    batches = epoch(1)
    drawn = {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}
    assert all(len(b["label"]) == 64 for b in batches[:-1])  # blocks of several shards rebatched
    assert sorted(zip(drawn["user"], drawn["label"], strict=True)) == sorted(zip(pairs["user"], pairs["label"],
                                                                                 strict=True))
    for user, label, history, length in zip(drawn["user"], drawn["label"], drawn["history"],
                                            drawn["history_length"], strict=True):
        assert length == min(len(owned[user]) - 1, 5) and not history[length:].any()
        assert set(history[:length]) <= owned[user] - {label}
    assert not np.array_equal(drawn["history"], np.concatenate([b["history"] for b in epoch(2)]))

    one = tmp_path / "one"
    one.mkdir()
    count = write_set_shard(pairs["user"].to_numpy(), pairs["label"].to_numpy(), one / "set-00000.bin")
    write_json(one / "manifest.json", {"files": ["set-00000.bin"], "num_examples": count})
    single = SetShards.load(one, max_history=5).to_dataset(BLOCK_ROWS, seed=4)
    in_memory = SetExamples.from_pairs(pairs["user"], pairs["label"], 5).to_dataset(BLOCK_ROWS, seed=4)
    for a, b in zip(single.as_numpy_iterator(), in_memory.as_numpy_iterator(), strict=True):
        assert all(np.array_equal(a[key], b[key]) for key in a)


def test_example_shards_cover_every_example_once_per_epoch_in_a_seeded_order(log, tmp_path):
    run(log, tmp_path)
    shards = ExampleShards.load(prepare.examples_dir(RunPaths(tmp_path)), shuffle_buffer=512)

    def labels(seed: int) -> np.ndarray:
        batches = shards.to_dataset(64, shuffle=True, seed=seed).as_numpy_iterator()
        return np.concatenate([b["label"] for b in batches])

    first, again, other = labels(1), labels(1), labels(2)
    assert len(first) == len(shards) and np.array_equal(first, again)
    assert sorted(first) == sorted(other) and not np.array_equal(first, other)
    batch = next(iter(shards.to_dataset(64, repeat=True)))
    assert batch["history"].shape == (64, 6) and batch["label"].dtype.name == "int32"
