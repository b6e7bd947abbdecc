"""The order detector: sorted lines are sets; time-ordered lines whose ids were assigned by first appearance and
shuffled lines are not; the decision follows data.order and timestamps."""

import numpy as np
import pandas as pd
import pytest

from retrieval.data import order
from retrieval.errors import InputError


def _lines(sequences) -> pd.DataFrame:
    """Canonical frame of ``user_items`` lines, in file order, timestamp = position in the line."""
    users = np.repeat(np.arange(len(sequences)), [len(s) for s in sequences]).astype(str)
    items = np.concatenate(sequences).astype(str)
    position = np.concatenate([np.arange(len(s)) for s in sequences])
    return pd.DataFrame({"user_id": users, "item_id": items, "timestamp": position})


def _random_lines(seed: int, n_users: int = 200, n_items: int = 500, zipf: float = 0.0):
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_items + 1) ** zipf
    return [rng.choice(n_items, size=rng.integers(5, 30), replace=False, p=weights / weights.sum())
            for _ in range(n_users)]


def _first_appearance(sequences):
    """Renumbers items in order of first appearance in the file (as sequence datasets often are)."""
    flat = np.concatenate(sequences)
    _, first = np.unique(flat, return_index=True)
    new_id = np.empty(flat.max() + 1, np.int64)
    new_id[flat[np.sort(first)]] = np.arange(len(first))
    return [new_id[s] for s in sequences]


def test_sorted_lines_are_sets():
    decision = order.detect(_lines([np.sort(s) for s in _random_lines(0)]))
    assert decision.order == "none" and "100.0%" in decision.evidence


def test_time_ordered_lines_with_first_appearance_ids_are_sequences():
    sequences = _first_appearance(_random_lines(1, n_items=2000, zipf=0.5))
    # The look-alike: new items get the next free id, so the first line is sorted and lines lean ascending.
    assert (np.diff(sequences[0]) > 0).all()
    assert np.mean(np.concatenate([np.diff(s) > 0 for s in sequences])) > 0.6
    assert order.detect(_lines(sequences)).order == "time"


def test_shuffled_lines_are_sequences_and_share_is_measured():
    share, lines = order.sorted_line_share(_lines(_random_lines(2)))
    assert lines > 100 and share < 0.05
    assert order.detect(_lines(_random_lines(2))).order == "time"


def test_mostly_sorted_lines_cross_the_threshold():
    sequences = [np.sort(s) for s in _random_lines(3)]
    for s in sequences[-10:]:  # 5% of the lines broken
        s[:] = s[::-1]
    assert order.detect(_lines(sequences)).order == "none"
    for s in sequences[-40:-10]:  # 20% broken
        s[:] = s[::-1]
    assert order.detect(_lines(sequences)).order == "time"


def test_little_or_non_numeric_evidence_keeps_time():
    assert order.detect(_lines([np.array([1, 2, 3, 4])] * 3)).order == "time"
    frame = _lines([np.sort(s) for s in _random_lines(4)])
    frame["item_id"] = "i" + frame["item_id"]
    assert order.detect(frame).order == "time"


def test_resolve_follows_config_and_timestamps():
    sorted_frame = _lines([np.sort(s) for s in _random_lines(5)])
    assert order.resolve("auto", sorted_frame, "user_items", "f.txt").order == "none"
    assert order.resolve("auto", sorted_frame, "csv", "f.csv").source == "timestamp column"
    assert order.resolve("time", sorted_frame, "user_items", "f.txt").order == "time"
    assert order.resolve("none", sorted_frame.drop(columns="timestamp"), "csv", "f.csv").order == "none"
    with pytest.raises(InputError, match="data.order"):
        order.resolve("sorted", sorted_frame, "user_items", "f.txt")


def test_shuffle_within_users_permutes_each_user_and_is_seeded():
    frame = _lines([np.sort(s) for s in _random_lines(6, n_users=50)])
    shuffled = order.shuffle_within_users(frame, seed=1)
    pd.testing.assert_frame_equal(shuffled.drop(columns="timestamp"), frame.drop(columns="timestamp"))
    for _, group in shuffled.groupby("user_id"):
        assert sorted(group["timestamp"]) == list(range(len(group)))
    assert (shuffled["timestamp"] != frame["timestamp"]).mean() > 0.5
    pd.testing.assert_frame_equal(shuffled, order.shuffle_within_users(frame, seed=1))
