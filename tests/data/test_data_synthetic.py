"""Synthetic generator: schema, determinism, planted structure, and the bundled data/ files it reproduces."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from retrieval.data import read_features, read_interactions, synthetic

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def bundled():
    """The default generation (seed 0), the command documented in data/README.md."""
    return synthetic.generate(seed=0)


def test_schema_and_invariants():
    interactions, items, users = synthetic.generate(num_users=80, num_items=60, interactions_per_user=12, seed=4)
    assert list(interactions.columns) == ["user_id", "item_id", "timestamp"]
    assert interactions["timestamp"].dtype == np.int64
    assert not interactions.duplicated(["user_id", "item_id"]).any()
    assert interactions.groupby("user_id")["timestamp"].apply(lambda t: t.is_monotonic_increasing).all()
    assert interactions["user_id"].str.startswith("u").all() and interactions["item_id"].str.startswith("i").all()
    assert set(interactions["item_id"]) <= set(items["item_id"]) and set(interactions["user_id"]) == set(
        users["user_id"])
    assert (items["genres"].str.len() > 0).all() and items["genres"].str.contains("|", regex=False).any()
    assert users["segment"].str.startswith("s").all()


def test_seed_determines_everything():
    a = synthetic.generate(num_users=50, num_items=40, seed=1)
    b = synthetic.generate(num_users=50, num_items=40, seed=1)
    c = synthetic.generate(num_users=50, num_items=40, seed=2)
    assert all(x.equals(y) for x, y in zip(a, b, strict=True))
    assert not a[0].equals(c[0])


def test_planted_structure_beats_popularity_and_vanishes_without_it(bundled):
    check = synthetic.sanity_check(bundled[0])
    assert check["cooccurrence_knn_hr@10"] > 2.5 * check["popularity_hr@10"]
    unstructured, _, _ = synthetic.generate(affinity=0.0, seed=0)
    control = synthetic.sanity_check(unstructured)
    assert control["cooccurrence_knn_hr@10"] < 1.2 * control["popularity_hr@10"]


def test_bundled_files_are_exactly_the_documented_generation(bundled):
    for frame, name in zip(bundled, ("interactions.csv", "items.csv", "users.csv"), strict=True):
        assert (DATA / name).read_text() == frame.to_csv(index=False), f"data/{name} differs from generate(seed=0)"
    interactions = read_interactions(DATA / "interactions.csv")
    assert 100_000 < len(interactions) < 200_000 and (DATA / "interactions.csv").stat().st_size < 5_000_000
    assert read_features(DATA / "items.csv", "item_id", kinds={"genres": "multi"})["genres"].notna().all()


def test_command_line_writes_the_three_files(tmp_path):
    subprocess.run([sys.executable, "-m", "retrieval.data.synthetic", f"--output_dir={tmp_path}", "--seed=3",
                    "--num_users=40", "--num_items=30"], check=True, capture_output=True)
    expected = synthetic.generate(num_users=40, num_items=30, seed=3)
    for frame, name in zip(expected, ("interactions.csv", "items.csv", "users.csv"), strict=True):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / name, dtype=str), frame.astype(str))


def test_chunked_writer_streams_users_in_chunks_each_reproducible_alone(tmp_path):
    total, sample = synthetic.write_chunked(tmp_path, num_users=250, num_items=120, chunk_users=100,
                                            format="parquet", sample_users=150)
    log = read_interactions(tmp_path / "interactions.parquet")
    assert len(log) == total and log["user_id"].nunique() == 250
    assert not log.duplicated(["user_id", "item_id"]).any()
    assert pd.read_csv(tmp_path / "users.csv")["user_id"].tolist() == [f"u{u}" for u in range(250)]
    assert sample["user_id"].nunique() == 150 and len(pd.read_csv(tmp_path / "items.csv")) == 120
    _, chunks = synthetic.generate_chunks(250, 120, chunk_users=100)
    last = list(chunks)[2][0]
    assert log[log["user_id"].isin(last["user_id"])].reset_index(drop=True).equals(last)
