"""Set examples: every training pair is a target, its history a fresh random subset of the user's other items."""

import numpy as np
import pytest

from retrieval.data.set_examples import SetExamples


@pytest.fixture(scope="module")
def pairs():
    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(2, 42), rng.integers(1, 25, 40))
    items = np.concatenate([rng.choice(np.arange(2, 200), size=n, replace=False)
                            for n in np.bincount(users)[2:]])
    items[5] = 1  # an OOV item is never a target nor in a history
    return users, items


def _batches(examples, epochs=1, **kwargs):
    dataset = examples.to_dataset(64, seed=7, repeat=True, **kwargs)
    size = -(-len(examples) // 64)
    return [{k: v.numpy() for k, v in b.items()} for b in dataset.take(size * epochs)], size


def test_every_pair_is_a_target_once_per_epoch_and_never_in_its_history(pairs):
    users, items = pairs
    examples = SetExamples.from_pairs(users, items, max_history=8)
    assert len(examples) == len(users) - 1
    batches, _ = _batches(examples)
    got = sorted(zip(np.concatenate([b["user"] for b in batches]), np.concatenate([b["label"] for b in batches]),
                     strict=True))
    known = items >= 2
    assert got == sorted(zip(users[known], items[known], strict=True))
    owned = {u: set(items[(users == u) & known]) for u in np.unique(users)}
    for b in batches:
        for user, label, history, length in zip(b["user"], b["label"], b["history"], b["history_length"],
                                                strict=True):
            kept = history[history > 0]
            assert label not in kept
            assert set(kept) <= owned[user] and len(set(kept)) == len(kept) == length
            assert length == min(len(owned[user]) - 1, 8) and (history[length:] == 0).all()


def test_histories_are_redrawn_each_epoch_and_uniform(pairs):
    users, items = pairs
    examples = SetExamples.from_pairs(users, items, max_history=3)
    batches, size = _batches(examples, epochs=40)
    heaviest = np.bincount(users).argmax()
    owned = sorted(set(items[users == heaviest]))
    counts = {item: 0 for item in owned}
    histories = set()
    for b in batches:
        for user, label, history in zip(b["user"], b["label"], b["history"], strict=True):
            if user == heaviest and label == owned[0]:
                histories.add(tuple(sorted(history)))
                for item in history:
                    counts[item] += 1
    assert len(histories) > 30  # fresh subsets, not one fixed window
    observed = np.array([counts[i] for i in owned[1:]])
    expected = 40 * 3 / (len(owned) - 1)
    assert counts[owned[0]] == 0
    # Each other item is in a history with probability 3 / (n - 1): a chi-square bound at p ~ 0.001.
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert chi2 < len(observed) + 5 * np.sqrt(2 * len(observed))


def test_deterministic_under_seed(pairs):
    examples = SetExamples.from_pairs(*pairs, max_history=5)
    first, _ = _batches(examples, epochs=2)
    again, _ = _batches(examples, epochs=2)
    for a, b in zip(first, again, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_history_keep_thins_histories_to_that_share_on_average(pairs):
    users, items = pairs
    full = SetExamples.from_pairs(users, items, max_history=8)
    thinned = SetExamples.from_pairs(users, items, max_history=8, history_keep=0.5)
    (full_batches, _), (thin_batches, _) = _batches(full, epochs=5), _batches(thinned, epochs=5)
    full_length = np.concatenate([b["history_length"] for b in full_batches])
    thin_length = np.concatenate([b["history_length"] for b in thin_batches])
    assert (thin_length <= full_length).all() and (thin_length[full_length > 0] >= 1).all()
    # Stochastic rounding keeps half of each history in expectation.
    np.testing.assert_allclose(thin_length.sum() / full_length.sum(), 0.5, atol=0.03)
    for b in thin_batches:
        assert ((b["history"] > 0).sum(axis=1) == b["history_length"]).all()


def test_teacher_pairs_are_targets_once_per_epoch_with_histories_of_the_users_own_items(pairs):
    users, items = pairs
    plain = SetExamples.from_pairs(users, items, max_history=8)
    # one teacher pair per user, an unknown item and a user without training pairs (dropped)
    teacher_users = np.concatenate([np.unique(users), [2, 500]])
    teacher_items = np.concatenate([1000 + np.unique(users), [1, 7]])
    examples = plain.with_teacher(teacher_users, teacher_items)
    assert len(examples) == len(plain) + len(np.unique(users))
    batches, _ = _batches(examples)
    got = sorted(zip(np.concatenate([b["user"] for b in batches]), np.concatenate([b["label"] for b in batches]),
                     strict=True))
    known = items >= 2
    expected = list(zip(users[known], items[known], strict=True)) + list(zip(np.unique(users), 1000 + np.unique(users),
                                                                             strict=True))
    assert got == sorted(expected)
    owned = {u: set(items[(users == u) & known]) for u in np.unique(users)}
    for b in batches:
        for user, label, history, length in zip(b["user"], b["label"], b["history"], b["history_length"],
                                                strict=True):
            kept = history[history > 0]
            assert set(kept) <= owned[user] and len(set(kept)) == len(kept) == length
            if label >= 1000:  # a teacher target: every one of the user's items may be history, up to the cap
                assert length == min(len(owned[user]), 8)


def test_weighted_teacher_pairs_carry_their_weights_and_clicks_weigh_one(pairs):
    users, items = pairs
    plain = SetExamples.from_pairs(users, items, max_history=8)
    teacher_users = np.unique(users)
    teacher_items = 1000 + teacher_users
    weights = np.linspace(0.1, 1.0, len(teacher_users)).astype(np.float32)
    assert "weight" not in _batches(plain.with_teacher(teacher_users, teacher_items))[0][0]
    batches, _ = _batches(plain.with_teacher(teacher_users, teacher_items, weights))
    label = np.concatenate([b["label"] for b in batches])
    weight = np.concatenate([b["weight"] for b in batches])
    user = np.concatenate([b["user"] for b in batches])
    np.testing.assert_array_equal(weight[label < 1000], 1.0)
    expected = dict(zip(teacher_users, weights, strict=True))
    np.testing.assert_array_equal(weight[label >= 1000], [expected[u] for u in user[label >= 1000]])
