"""Splits: time order with stable ties, held-out alignment, determinism, and no test leakage into training."""

import numpy as np
import pandas as pd
import pytest

from retrieval.data import (
    Vocabulary,
    from_files,
    leave_last_n_out,
    next_item_examples,
    noise_distribution,
    random_holdout,
    synthetic,
    temporal_cutoff,
)
from retrieval.errors import InputError


def _frame(rows):
    users, items, times = zip(*rows, strict=True)
    return pd.DataFrame({"user_id": list(users), "item_id": list(items), "timestamp": np.array(times, np.int64)})


def _pairs(frame):
    return frame[["user_id", "item_id"]].values.tolist()


def test_leave_last_one_out_uses_time_and_keeps_file_order_on_ties():
    frame = _frame([("u", "a", 5), ("u", "b", 9), ("u", "c", 9), ("u", "d", 1), ("v", "a", 1), ("v", "b", 2),
                    ("w", "a", 3)])
    split = leave_last_n_out(frame, policy="keep")
    assert _pairs(split.test) == [["u", "c"], ["v", "b"]]  # c ties with b at 9 and comes later in the file
    assert _pairs(split.train) == [["u", "a"], ["u", "b"], ["u", "d"], ["v", "a"], ["w", "a"]]  # w too short
    assert split.validation is None


def test_leave_last_n_out_with_validation_before_test():
    frame = _frame([("u", f"i{t}", t) for t in range(6)] + [("v", "i0", 0), ("v", "i1", 1), ("v", "i2", 2)])
    split = leave_last_n_out(frame, n=2, validation_n=1, policy="keep")
    assert _pairs(split.test) == [["u", "i4"], ["u", "i5"]]
    assert _pairs(split.validation) == [["u", "i3"]]
    assert _pairs(split.train) == [["u", "i0"], ["u", "i1"], ["u", "i2"], ["v", "i0"], ["v", "i1"], ["v", "i2"]]


def test_leave_last_out_without_timestamps_uses_file_order():
    frame = _frame([("u", "a", 0), ("u", "b", 0), ("u", "c", 0)]).drop(columns="timestamp")
    assert _pairs(leave_last_n_out(frame, policy="keep").test) == [["u", "c"]]


def test_held_out_items_unknown_to_training_are_dropped_or_rejected():
    frame = _frame([("u", "a", 1), ("u", "new", 2), ("v", "a", 1), ("v", "b", 2), ("w", "b", 1), ("w", "a", 2)])
    split = leave_last_n_out(frame)
    assert _pairs(split.test) == [["v", "b"], ["w", "a"]] and split.dropped == {"test": 1}
    split = leave_last_n_out(frame, policy="keep")
    assert _pairs(split.test) == [["u", "new"], ["v", "b"], ["w", "a"]]
    with pytest.raises(InputError, match="'new' does not occur"):
        leave_last_n_out(frame, policy="fail")


def test_temporal_cutoff():
    frame = _frame([("u", "a", 1), ("u", "b", 5), ("v", "b", 2), ("v", "a", 7), ("w", "c", 8)])
    split = temporal_cutoff(frame, cutoff=5)
    assert _pairs(split.train) == [["u", "a"], ["v", "b"]]
    assert _pairs(split.test) == [["u", "b"], ["v", "a"]] and split.dropped == {"test": 1}  # w and c unseen
    assert set(temporal_cutoff(frame, test_fraction=0.4, policy="keep").test["timestamp"]) == {7, 8}
    with pytest.raises(InputError, match="empty train or test"):
        temporal_cutoff(frame, cutoff=100)


def test_random_holdout_is_seeded_and_keeps_training_items():
    interactions, _, _ = synthetic.generate(num_users=60, num_items=40, interactions_per_user=10, seed=3)
    a = random_holdout(interactions, test_fraction=0.3, seed=1, policy="keep")
    b = random_holdout(interactions, test_fraction=0.3, seed=1, policy="keep")
    c = random_holdout(interactions, test_fraction=0.3, seed=2, policy="keep")
    assert _pairs(a.test) == _pairs(b.test) and _pairs(a.test) != _pairs(c.test)
    sizes = interactions.groupby("user_id").size()
    test_sizes = a.test.groupby("user_id").size().reindex(sizes.index, fill_value=0)
    assert (test_sizes == np.minimum(np.floor(0.3 * sizes), sizes - 1)).all()
    assert len(a.train) + len(a.test) == len(interactions)


def test_from_files_with_validation(tmp_path):
    (tmp_path / "train.csv").write_text("user_id,item_id,timestamp\n1,a,1\n2,b,1\n")
    (tmp_path / "test.csv").write_text("user_id,item_id,timestamp\n1,b,3\n")
    (tmp_path / "valid.csv").write_text("user_id,item_id,timestamp\n2,a,2\n")
    split = from_files(tmp_path / "train.csv", tmp_path / "test.csv", tmp_path / "valid.csv")
    assert _pairs(split.test) == [["1", "b"]] and _pairs(split.validation) == [["2", "a"]]
    assert split.dropped == {"test": 0, "validation": 0}


def test_no_test_interaction_reaches_examples_vocabulary_or_frequencies():
    interactions, _, _ = synthetic.generate(num_users=200, num_items=150, interactions_per_user=15, seed=5)
    split = leave_last_n_out(interactions, n=1, validation_n=1, policy="keep")
    held_out = pd.concat([split.test, split.validation])
    assert len(split.train) + len(held_out) == len(interactions)
    assert not set(map(tuple, _pairs(split.train))) & set(map(tuple, _pairs(held_out)))

    items = Vocabulary.from_ids(split.train["item_id"])
    users = Vocabulary.from_ids(split.train["user_id"])
    train_counts = split.train["item_id"].value_counts()
    all_counts = interactions["item_id"].value_counts()
    assert dict(zip(items.ids[2:], items.counts[2:], strict=True)) == train_counts.to_dict()
    assert (all_counts.reindex(train_counts.index) > train_counts).any()  # the test actually removed something
    noise = noise_distribution(items.counts)
    expected = train_counts.reindex(items.ids[2:]).to_numpy() ** 0.75
    np.testing.assert_allclose(noise[2:], expected / expected.sum())

    examples = next_item_examples(users.lookup(split.train["user_id"]), items.lookup(split.train["item_id"]),
                                  split.train["timestamp"].to_numpy(), max_history=50)
    user_ids = users.to_ids(examples["user"])
    held = set(map(tuple, _pairs(held_out)))
    label_pairs = set(zip(user_ids, items.to_ids(examples["label"]), strict=True))
    history_pairs = {(u, i) for u, row in zip(user_ids, items.to_ids(examples["history"]), strict=True)
                     for i in row if i != "<pad>"}
    assert not label_pairs & held and not history_pairs & held
    assert label_pairs | history_pairs == set(map(tuple, _pairs(split.train)))
    assert len(examples["label"]) == len(split.train) - split.train["user_id"].nunique()


def test_prepare_reads_the_split_registry():
    """``splits.SPLITS`` is the one list of splits: preparation's names and time-ordered ones follow it."""
    from retrieval.data import prepare, splits

    assert prepare.SPLITS == tuple(splits.SPLITS) and prepare.TIME_SPLITS == splits.TIME_SPLITS
    for name, protocol in splits.SPLITS.items():
        assert protocol.describe(splits.Holdout()), name


def test_a_holdout_reads_every_split_field_from_its_source_and_has_no_defaults_of_its_own(tmp_path):
    """``Holdout.of`` takes the split's fields from the settings it is given; a field they lack is an error (the
    config's declared defaults are the one place defaults live), and a run's config.json written without a key
    describes its split with the key's declared default."""
    from retrieval import artifacts
    from retrieval.data import splits
    from retrieval.evaluation import loading

    fields = {"holdout_n": 3, "validation": False, "holdout_fraction": 0.3, "temporal_quantile": 0.8, "seed": 5}
    holdout = splits.Holdout.of(fields, partition=True)
    assert (holdout.holdout_n, holdout.holdout_fraction, holdout.seed, holdout.partition) == (3, 0.3, 5, True)
    with pytest.raises(KeyError, match="holdout_n"):
        splits.Holdout.of({name: value for name, value in fields.items() if name != "holdout_n"})
    artifacts.write_json(artifacts.RunPaths(tmp_path).config, {"seed": 1, "data": {"split": "leave_last_n"}})
    assert loading.protocol_of(tmp_path)[1].startswith("leave-last-one-out")  # data.holdout_n's declared 1
