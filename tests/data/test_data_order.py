"""The order detector: lines sorted by id and sets in random order (whatever their ids) are sets; sequences, whose
adjacent items recur together on other lines, are time; too little evidence keeps file order; the decision follows
data.order and timestamps."""

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


def _random_lines(seed: int, n_users: int = 300, n_items: int = 300, zipf: float = 1.0):
    """Sets in random order: each line a random subset of popular-skewed items, shuffled."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_items + 1) ** zipf
    return [rng.choice(n_items, size=rng.integers(5, 30), replace=False, p=weights / weights.sum())
            for _ in range(n_users)]


def _markov_lines(seed: int, n_users: int = 300, n_items: int = 300, successors: int = 3, jump: float = 0.2):
    """Sequences: a random first item, then one of the last item's few fixed successors (a random item with
    probability ``jump``)."""
    rng = np.random.default_rng(seed)
    following = rng.integers(0, n_items, size=(n_items, successors))
    lines = []
    for _ in range(n_users):
        line = [rng.integers(n_items)]
        for _ in range(rng.integers(5, 30) - 1):
            line.append(rng.integers(n_items) if rng.random() < jump else following[line[-1], rng.integers(successors)])
        lines.append(np.array(line))
    return lines


def _first_appearance(sequences):
    """Renumbers items in order of first appearance in the file (as sequence datasets often are)."""
    flat = np.concatenate(sequences)
    _, first = np.unique(flat, return_index=True)
    new_id = np.empty(flat.max() + 1, np.int64)
    new_id[flat[np.sort(first)]] = np.arange(len(first))
    return [new_id[s] for s in sequences]


def _log(sequences, seed: int = 0) -> pd.DataFrame:
    """The lines as a log without a timestamp column: rows of all users interleaved, each user's in line order."""
    frame = _lines(sequences)  # grouped by user, in line order
    clock = np.random.default_rng(seed).random(len(frame))
    frame["clock"] = clock[np.lexsort((clock, pd.factorize(frame["user_id"])[0]))]  # each user's clocks, ascending
    return frame.sort_values("clock", kind="stable")[["user_id", "item_id"]].reset_index(drop=True)


def test_sets_in_random_order_are_sets_whatever_their_ids():
    sets = _random_lines(0)
    for lines in (sets, _first_appearance(sets)):  # the second: set-splits/ml-1m's look-alike of a sequence file
        decision = order.detect(_lines(lines))
        assert decision.order == "none" and "the order carries no information" in decision.evidence
        assert 0.9 < order.adjacency_test(_lines(lines)).ratio < 1.1


def test_sorted_lines_are_sets():
    decision = order.detect(_lines([np.sort(s) for s in _random_lines(1)]))
    assert decision.order == "none" and "sorted by id" in decision.evidence and "100.0%" in decision.evidence


def test_sequences_are_time_also_with_first_appearance_ids():
    sequences = _first_appearance(_markov_lines(2))
    # The look-alike of sorted lines: new items get the next free id, so lines lean ascending.
    assert np.mean(np.concatenate([np.diff(s) > 0 for s in sequences])) > 0.55
    decision = order.detect(_lines(sequences))
    assert decision.order == "time" and "the order carries information" in decision.evidence
    test = order.adjacency_test(_lines(sequences))
    assert test.ratio > 2 and test.z > 10


def test_on_a_small_catalogue_repeated_means_on_more_other_lines():
    # 40 items, 400 lines: nearly every pair recurs somewhere by chance, so the share of pairs on one other line or
    # more says nothing; the cut rises until at most half of the shuffled pairs pass it.
    sequences, sets = _markov_lines(10, n_users=400, n_items=40), _random_lines(10, n_users=400, n_items=40, zipf=0.0)
    test = order.adjacency_test(_lines(sets))
    assert test.min_others > 1 and test.expected <= order.MAX_SHUFFLED_SHARE and 0.9 < test.ratio < 1.1
    decision = order.detect(_lines(sequences))
    assert decision.order == "time" and "other lines" in decision.evidence
    assert order.detect(_lines(sets)).order == "none"


def test_mostly_sorted_lines_cross_the_threshold():
    sequences = [np.sort(s) for s in _random_lines(3)]
    for s in sequences[-15:]:  # 5% of the lines broken: still sorted
        s[:] = s[::-1]
    assert order.detect(_lines(sequences)).order == "none"
    for s in sequences[-60:-15]:  # 20% broken: the adjacency test judges, and sorted order carries id order
        s[:] = s[::-1]
    decision = order.detect(_lines(sequences))
    assert decision.order == "time" and "adjacent pairs" in decision.evidence


def test_too_little_evidence_keeps_file_order():
    few_lines = order.detect(_lines([np.array([1, 2, 3, 4])] * 3))
    assert few_lines.order == "time" and "too little evidence" in few_lines.evidence
    assert "only 3 lines" in few_lines.evidence
    # Hundreds of lines over a vast catalogue: adjacent pairs (almost) never recur, whatever the order.
    rng = np.random.default_rng(4)
    rare = order.detect(_lines([rng.integers(0, 10**6, size=20) for _ in range(300)]))
    assert rare.order == "time" and "too little evidence" in rare.evidence and "repeated" in rare.evidence


def test_the_statistic_is_counted_and_stated_in_the_evidence():
    # Pairs per line, counted once per line: {1,2} {2,3} | {1,2} {1,4} | {3,4}: {1,2} recurs, 2 of 5.
    frame = _lines([np.array([1, 2, 3]), np.array([2, 1, 4]), np.array([3, 4, 3])])
    others = order.other_lines(np.repeat([0, 1, 2], 3), np.array([1, 2, 3, 2, 1, 4, 3, 4, 3]))
    assert sorted(others) == [0, 0, 0, 1, 1]
    test = order.adjacency_test(frame, permutations=0)
    assert (test.observed, test.pairs, test.repeated, test.min_others) == (0.4, 5, 2, 1)
    frame = _lines(_markov_lines(5))
    test, decision = order.adjacency_test(frame), order.detect(frame)
    assert test.lines == 300 and len(test.shuffled) == order.PERMUTATIONS and not test.sampled
    assert test.min_others == 1  # most pairs are rare by chance here: "repeated" means on one other line or more
    assert decision.evidence.startswith(f"adjacent pairs repeated elsewhere {test.observed:.1%} vs {test.expected:.1%}"
                                        f" with each line shuffled ({test.ratio:.2f}x, threshold 1.2x; z={test.z:.1f})"
                                        " over 300 lines")


def test_big_data_is_sampled_by_whole_users_and_seeded():
    frame = _lines(_random_lines(6))
    test = order.adjacency_test(frame, max_interactions=2000)
    assert test.sampled and 1900 < test.interactions <= 2000
    assert test == order.adjacency_test(frame, max_interactions=2000)
    users = frame["user_id"].value_counts()
    assert 0 < test.lines < len(users)


def test_non_numeric_ids_skip_the_sorted_check():
    sets, sequences = _lines(_random_lines(7)), _lines(_markov_lines(7))
    for frame in (sets, sequences):
        frame["item_id"] = "i" + frame["item_id"]
    assert order.detect(sets).order == "none" and order.detect(sequences).order == "time"


def test_resolve_follows_config_timestamps_and_detection(monkeypatch):
    warnings = []
    monkeypatch.setattr(order.logging, "warning", lambda *args: warnings.append(args))
    sorted_frame = _lines([np.sort(s) for s in _random_lines(8)])
    assert order.resolve("auto", sorted_frame, "user_items", "f.txt").order == "none"
    assert order.resolve("auto", sorted_frame, "csv", "f.csv").source == "timestamp column"
    # A log without a timestamp column (users' rows interleaved): detected like lines.
    sequence_log, set_log = _log(_markov_lines(9)), _log(_random_lines(9))
    assert order.resolve("auto", sequence_log, "csv", "f.csv").order == "time"
    decision = order.resolve("auto", set_log, "csv", "f.csv")
    assert decision.order == "none" and decision.source == "detected"
    assert not warnings
    assert order.resolve("time", set_log, "csv", "f.csv").source == "config" and len(warnings) == 1
    assert order.resolve("time", _lines(_random_lines(9)), "user_items", "f.txt").order == "time"
    assert len(warnings) == 2 and "look like sets" in warnings[-1][0]
    assert order.resolve("time", sequence_log, "csv", "f.csv").order == "time" and len(warnings) == 2
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
