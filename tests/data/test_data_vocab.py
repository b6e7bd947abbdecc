"""Vocabulary: reserved rows, frequency order, min-count, lookup/to_ids, Parquet round trip."""

import numpy as np
import pandas as pd
import pytest

from retrieval.data import Vocabulary
from retrieval.errors import InputError

IDS = ["b", "a", "c", "a", "b", "d", "a", "c", "b"]  # counts: a=3, b=3, c=2, d=1


def test_from_ids_orders_by_count_then_id_and_keeps_counts():
    vocab = Vocabulary.from_ids(IDS)
    assert vocab.ids.tolist() == ["<pad>", "<oov>", "a", "b", "c", "d"]
    assert vocab.counts.tolist() == [0, 0, 3, 3, 2, 1]
    assert vocab.counts.dtype == np.int64 and vocab.size == len(vocab) == 6


def test_min_count_sends_rare_ids_to_oov():
    vocab = Vocabulary.from_ids(IDS, min_count=2)
    assert vocab.ids.tolist() == ["<pad>", "<oov>", "a", "b", "c"]
    assert vocab.lookup(["d", "c", "zz"]).tolist() == [1, 4, 1]
    assert vocab.counts[1] == 0


def test_lookup_and_to_ids_are_inverse():
    vocab = Vocabulary.from_ids(IDS)
    indices = vocab.lookup(np.array(IDS, dtype=object))
    assert indices.dtype == np.int64
    assert vocab.to_ids(indices).tolist() == IDS
    assert vocab.to_ids([0, 1]).tolist() == ["<pad>", "<oov>"]
    assert vocab.lookup(pd.Series(["a", "nope"])).tolist() == [2, 1]


def test_save_load_round_trip_is_readable_parquet(tmp_path):
    vocab = Vocabulary.from_ids(IDS)
    path = tmp_path / "vocab" / "items.parquet"
    vocab.save(path)
    table = pd.read_parquet(path)
    assert list(table.columns) == ["index", "id", "count"]
    assert table["id"].tolist()[:3] == ["<pad>", "<oov>", "a"]
    loaded = Vocabulary.load(path)
    assert loaded.ids.tolist() == vocab.ids.tolist()
    assert loaded.counts.tolist() == vocab.counts.tolist()
    assert loaded.lookup(["c"]).tolist() == vocab.lookup(["c"]).tolist()


def test_load_rejects_a_broken_file(tmp_path):
    path = tmp_path / "v.parquet"
    pd.DataFrame({"index": [0, 1], "id": ["x", "<oov>"], "count": [0, 0]}).to_parquet(path)
    with pytest.raises(InputError, match="<pad>"):
        Vocabulary.load(path)
    with pytest.raises(InputError, match="file not found"):
        Vocabulary.load(tmp_path / "missing.parquet")
