"""Protocols end to end on arrays: splits from the data layer, cold-start users, unknown and seen test items."""

import numpy as np
import pandas as pd
import pytest

from retrieval.data.histories import item_ids_recent_first
from retrieval.evaluation import csr, evaluator, protocols


def _log():
    # u0: a0 a1 a2 a3; u1: a1 a2 b0 a1 (a repeat); u2 only late (times 8, 9): cold start under a cut-off at 5.
    rows = [("u0", "a0", 0), ("u0", "a1", 1), ("u0", "a2", 2), ("u0", "a3", 6),
            ("u1", "a1", 1), ("u1", "a2", 2), ("u1", "b0", 3), ("u1", "a1", 7),
            ("u2", "a2", 8), ("u2", "new", 9)]
    return pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])


def test_leave_last_one_out_holds_out_each_users_last_item():
    train, test, description = protocols.split(_log(), "leave_last_n", holdout_n=1)
    assert description.startswith("leave-last-one-out next-item")
    assert sorted(map(tuple, test[["user_id", "item_id"]].to_numpy())) == [("u0", "a3"), ("u1", "a1"), ("u2", "new")]


def test_temporal_cutoff_reports_cold_users_and_unknown_items():
    train, test, description = protocols.split(_log(), "temporal", cutoff=5)
    assert description == "temporal cut-off at time 5 (later interactions are test)"
    data = protocols.prepare(train, test, ["a0", "a1", "a2", "b0"])
    assert data.user_ids.tolist() == ["u0", "u1", "u2"]
    # Test: u0 a3 (not in the catalogue), u1 a1, u2 a2, u2 "new" (not in the catalogue).
    assert data.counts["count/test_interactions"] == 4 and data.counts["count/test_interactions_unknown_item"] == 2
    assert data.test.indices.tolist() == [3, 4]  # index = 2 + catalogue position: a1 -> 3, a2 -> 4
    vectors = np.eye(6, dtype=np.float32)
    m = evaluator.evaluate(vectors[:3], vectors, data.train, data.test, [1, 2], popularity=data.popularity,
                           n_bootstrap=0)
    # u1 (history) tests a1, which is in her training items: removed and counted; u2 (no history) tests a2.
    assert m["count/test_pairs_seen_in_train"] == 1 and m["count/test_users_without_rankable_items"] == 1
    assert m["count/eval_users"] == 0 and m["count/cold_start_users"] == 1
    assert "recall@1" not in m and "cold_start/recall@1" in m
    # Most popular for the cold user: a1 and a2 (2 training users each, ties by index) -> a1 first, a2 second.
    assert m["baseline/most_popular/cold_start/recall@1"] == 0.0
    assert m["baseline/most_popular/cold_start/recall@2"] == 1.0


def test_training_items_rankable_when_not_excluded():
    train = csr.from_pairs([0, 0], [2, 3], 1)
    test = csr.from_pairs([0], [2], 1)
    items = np.array([[0, 0], [0, 0], [1, 0], [0.5, 0], [0.1, 0]], np.float32)
    user = np.array([[1.0, 0.0]], np.float32)
    kept = evaluator.evaluate(user, items, train, test, [1], exclude_train=False, baselines=(), n_bootstrap=0)
    assert kept["recall@1"] == 1.0 and kept["count/test_pairs_seen_in_train"] == 0
    dropped = evaluator.evaluate(user, items, train, test, [1], baselines=(), n_bootstrap=0)
    assert dropped["count/test_users_without_rankable_items"] == 1 and dropped["count/eval_users"] == 0


def test_histories_are_most_recent_first_and_empty_for_unknown_users():
    frame = pd.DataFrame({"user_id": ["a", "b", "a", "a"], "item_id": ["x", "y", "z", "w"],
                          "timestamp": [5, 1, 9, 5]})
    got = item_ids_recent_first(frame, ["a", "c", "b"])
    # a: z (t=9), then the two t=5 rows in reverse file order: w (row 3), x (row 0).
    assert [h.tolist() for h in got] == [["z", "w", "x"], [], ["y"]]


def test_misuse_is_rejected():
    with pytest.raises(ValueError, match="unknown protocol"):
        protocols.describe("bootstrap")
    with pytest.raises(ValueError, match="rows"):
        evaluator.evaluate(np.zeros((2, 2)), np.zeros((4, 2)), csr.empty(3), csr.empty(3), [1])
