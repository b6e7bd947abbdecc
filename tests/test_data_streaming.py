"""Streamed prepare (retrieval/data/streaming.py): the same splits, vocabularies and examples as the in-memory path,
from CSV or multi-row-group Parquet, on the embedded engine or a local Dask cluster; the TFRecord example shards and
the set-data pair shards."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from configs.base import override
from configs.two_tower import get_config
from retrieval.artifacts import RunPaths, write_json
from retrieval.data import examples as examples_lib
from retrieval.data import readers, splits, streaming, synthetic
from retrieval.data.engine import Embedded, open_engine
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


def settings(path: Path, run_dir: Path, **extra) -> streaming.Settings:
    config = override(get_config(), {"data.train_path": str(path), "data.num_shards": 3, "model.max_history": 6,
                                     **extra})
    return streaming.Settings.from_config(config, run_dir)


def rows(frame: pd.DataFrame) -> set:
    return set(map(tuple, frame[["user_id", "item_id", "timestamp"]].astype(str).to_numpy()))


def example_set(arrays: dict) -> set:
    return {(u, label, tuple(h)) for u, label, h in zip(arrays["user"], arrays["label"], arrays["history"].tolist(),
                                                         strict=True)}


def read_examples(paths: RunPaths) -> dict:
    shards = ExampleShards.load(streaming.examples_dir(paths))
    batches = list(shards.to_dataset(1000, shuffle=False).as_numpy_iterator())
    return {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}


def test_streamed_prepare_equals_the_in_memory_path(log, tmp_path):
    summary = streaming.prepare(settings(log, tmp_path, **{"data.validation": True}), Embedded(), "auto")
    paths = RunPaths(tmp_path)
    reference = splits.leave_last_n_out(readers.read_interactions(log), 1, validation_n=1, policy="keep")
    assert rows(pd.read_parquet(paths.train_data)) == rows(reference.train)
    assert rows(pd.read_parquet(paths.test_data)) == rows(reference.test)
    assert rows(pd.read_parquet(paths.validation_data)) == rows(reference.validation)
    items, users = Vocabulary.load(paths.item_vocab), Vocabulary.load(paths.user_vocab)
    expected_items = Vocabulary.from_ids(reference.train["item_id"].to_numpy())
    assert list(items.ids) == list(expected_items.ids) and list(items.counts) == list(expected_items.counts)
    assert set(users.ids) == set(reference.train["user_id"]) | {"<pad>", "<oov>"}
    train = reference.train
    expected = examples_lib.next_item_examples(users.lookup(train["user_id"]), items.lookup(train["item_id"]),
                                               train["timestamp"].to_numpy(), max_history=6)
    streamed = read_examples(paths)
    assert len(streamed["label"]) == summary["streaming"]["examples"] == len(expected["label"])
    assert example_set(streamed) == example_set(expected)
    assert summary["train_interactions"] == len(train) and not (paths.train_data.parent / "partitions").exists()


def test_parquet_row_groups_are_partitioned_as_separate_pieces(log, tmp_path, monkeypatch):
    frame = pd.read_csv(log, dtype={"user_id": str, "item_id": str})
    frame.to_parquet(tmp_path / "log.parquet", row_group_size=300, index=False)
    monkeypatch.setattr(streaming, "PIECE_ROWS", 500)
    parquet = streaming.prepare(settings(tmp_path / "log.parquet", tmp_path / "p"), Embedded(), "auto")
    csv = streaming.prepare(settings(log, tmp_path / "c"), Embedded(), "auto")
    assert parquet["streaming"]["pieces"] > 1 and {**parquet, "streaming": 0} == {**csv, "streaming": 0}
    for name in ("train_data", "test_data"):
        assert rows(pd.read_parquet(getattr(RunPaths(tmp_path / "p"), name))) == rows(
            pd.read_parquet(getattr(RunPaths(tmp_path / "c"), name)))
    assert example_set(read_examples(RunPaths(tmp_path / "p"))) == example_set(read_examples(RunPaths(tmp_path / "c")))


def test_dask_local_cluster_gives_the_embedded_result(log, tmp_path):
    pytest.importorskip("dask.distributed")
    extra = {"data.split": "random", "data.holdout_fraction": 0.3}
    embedded = streaming.prepare(settings(log, tmp_path / "e", **extra), Embedded(), "auto")
    with open_engine("dask", workers=2, processes=False) as engine:
        clustered = streaming.prepare(settings(log, tmp_path / "d", **extra), engine, "auto")
    assert embedded == clustered
    e, d = RunPaths(tmp_path / "e"), RunPaths(tmp_path / "d")
    for name in ("item_vocab", "user_vocab"):
        assert pd.read_parquet(getattr(e, name)).equals(pd.read_parquet(getattr(d, name)))
    for name in ("train_data", "test_data"):
        assert rows(pd.read_parquet(getattr(e, name))) == rows(pd.read_parquet(getattr(d, name)))
    assert example_set(read_examples(e)) == example_set(read_examples(d))


def test_set_data_writes_pair_shards_whose_histories_are_drawn_per_epoch(log, tmp_path):
    """Set data: each shard's training pairs; one epoch of SetShards holds every known training pair once as a
    target, each history a subset of that user's other training items (never the target), redrawn every epoch; a
    single shard equals the in-memory SetExamples draw."""
    summary = streaming.prepare(settings(log, tmp_path, **{"data.split": "random"}), Embedded(), "none")
    paths = RunPaths(tmp_path)
    train = pd.read_parquet(paths.train_data)
    assert summary["order"]["order"] == "none" and summary["streaming"]["examples"] == len(train)
    assert (train.groupby("user_id")["timestamp"].min() == 0).all()  # positions in a random order, not times
    items, users = Vocabulary.load(paths.item_vocab), Vocabulary.load(paths.user_vocab)
    pairs = pd.DataFrame({"user": users.lookup(train["user_id"]), "label": items.lookup(train["item_id"])})
    owned = pairs.groupby("user")["label"].apply(set).to_dict()
    set_shards = SetShards.load(streaming.examples_dir(paths), max_history=5, history_keep=1.0)
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
    streaming.prepare(settings(log, tmp_path), Embedded(), "auto")
    shards = ExampleShards.load(streaming.examples_dir(RunPaths(tmp_path)), shuffle_buffer=512)

    def labels(seed: int) -> np.ndarray:
        batches = shards.to_dataset(64, shuffle=True, seed=seed).as_numpy_iterator()
        return np.concatenate([b["label"] for b in batches])

    first, again, other = labels(1), labels(1), labels(2)
    assert len(first) == len(shards) and np.array_equal(first, again)
    assert sorted(first) == sorted(other) and not np.array_equal(first, other)
    batch = next(iter(shards.to_dataset(64, repeat=True)))
    assert batch["history"].shape == (64, 6) and batch["label"].dtype.name == "int32"


def test_streaming_auto_follows_the_file_size(log):
    data = get_config().data
    data.train_path = str(log)
    assert not streaming.enabled(data)
    data.streaming_min_mb = 0
    assert streaming.enabled(data)
    data.streaming = "off"
    assert not streaming.enabled(data)
