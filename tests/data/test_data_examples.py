"""Example builders against straightforward per-user loops, subsampling against its formula, tf.data determinism."""

import numpy as np
import pytest

from retrieval.data import next_item_examples, noise_distribution, skipgram_pairs, to_dataset, user_sequences


@pytest.fixture(scope="module")
def log():
    """Random interactions in shuffled order with many timestamp ties, some OOV (1) items and users."""
    rng = np.random.default_rng(0)
    n = 600
    users = rng.integers(1, 25, size=n)
    items = rng.integers(1, 40, size=n)
    times = rng.integers(0, 30, size=n)
    return users, items, times


def _reference_sequences(users, items, times):
    """{user: [items in time order, ties in input order]} with a plain loop."""
    sequences = {}
    for row in sorted(range(len(users)), key=lambda r: (users[r], times[r], r)):
        sequences.setdefault(int(users[row]), []).append(int(items[row]))
    return sequences


def test_user_sequences_csr(log):
    users, items, times = log
    indptr, sequence_items = user_sequences(users, items, times, num_users=30)
    reference = _reference_sequences(users, items, times)
    assert indptr.shape == (31,) and sequence_items.dtype == np.int32
    for u in range(30):
        assert sequence_items[indptr[u]:indptr[u + 1]].tolist() == reference.get(u, [])


def test_next_item_examples_match_a_loop(log):
    users, items, times = log
    max_history = 4
    out = next_item_examples(users, items, times, max_history=max_history, example_age=True)
    expected = []
    for u, sequence in sorted(_reference_sequences(users, items, times).items()):
        for t in range(1, len(sequence)):
            if sequence[t] >= 2:
                past = sequence[max(0, t - max_history):t][::-1]
                expected.append((u, past + [0] * (max_history - len(past)), len(past), sequence[t]))
    assert {k: v.dtype for k, v in out.items()} == {"user": np.int32, "history": np.int32, "history_length": np.int32,
                                                    "label": np.int32, "example_age": np.float32}
    assert out["user"].tolist() == [e[0] for e in expected]
    assert out["history"].tolist() == [e[1] for e in expected]
    assert out["history_length"].tolist() == [e[2] for e in expected]
    assert out["label"].tolist() == [e[3] for e in expected]
    order = np.lexsort((times, users))
    label_times = times[order][np.r_[False, users[order][1:] == users[order][:-1]] & (items[order] >= 2)]
    np.testing.assert_allclose(out["example_age"], (times.max() - label_times) / (times.max() - times.min()),
                               rtol=1e-6)


def test_max_examples_per_user_recent_and_random(log):
    users, items, times = log
    full = next_item_examples(users, items, times, max_history=3)
    recent = next_item_examples(users, items, times, max_history=3, max_examples_per_user=2)
    per_user = {u: np.flatnonzero(full["user"] == u) for u in np.unique(full["user"])}
    keep = np.concatenate([rows[-2:] for rows in per_user.values()])
    assert recent["label"].tolist() == full["label"][np.sort(keep)].tolist()
    assert recent["history"].tolist() == full["history"][np.sort(keep)].tolist()

    a = next_item_examples(users, items, times, max_history=3, max_examples_per_user=2, keep="random", seed=1)
    b = next_item_examples(users, items, times, max_history=3, max_examples_per_user=2, keep="random", seed=1)
    c = next_item_examples(users, items, times, max_history=3, max_examples_per_user=2, keep="random", seed=2)
    assert a["history"].tolist() == b["history"].tolist() != c["history"].tolist()
    assert np.bincount(a["user"]).max() == 2 and len(a["user"]) == len(recent["user"])
    full_rows = {(int(u), tuple(h), int(lab)) for u, h, lab in zip(full["user"], full["history"], full["label"],
                                                                    strict=True)}
    assert {(int(u), tuple(h), int(lab)) for u, h, lab in zip(a["user"], a["history"], a["label"],
                                                              strict=True)} <= full_rows


def _reference_pairs(users, items, times, window):
    pairs = []
    for sequence in _reference_sequences(users, items, times).values():
        sequence = [i for i in sequence if i >= 2]
        for p, target in enumerate(sequence):
            for q, context in enumerate(sequence):
                if p != q and (window is None or abs(p - q) <= window):
                    pairs.append((target, context))
    return sorted(pairs)


@pytest.mark.parametrize("cap", [1, 2, 5])
def test_the_most_recent_examples_are_found_in_any_order_past_the_history_cap(cap):
    """NextItemExamples.most_recent on examples in a shuffled order (as the prepare stage writes them), with users
    longer than the history cap (ties in history_length): the same examples as capping them when they were built.
    The unique labels keep every chain unambiguous, as in a log without repeats."""
    from retrieval.data.examples import NextItemExamples

    rng = np.random.default_rng(3)
    lengths = [2, 3, 4, 9, 15, 40]
    users = np.repeat(np.arange(2, 2 + len(lengths)), lengths).astype(np.int32)
    items = (rng.permutation(1000)[:len(users)] + 2).astype(np.int32)
    every = next_item_examples(users, items, max_history=3)
    expected = next_item_examples(users, items, max_history=3, max_examples_per_user=cap)
    order = rng.permutation(len(every["label"]))
    shuffled = NextItemExamples({key: value[order] for key, value in every.items()})
    found = shuffled.most_recent(cap).arrays

    def rows(arrays):
        return sorted(zip(arrays["user"].tolist(), arrays["label"].tolist(), map(tuple, arrays["history"].tolist()),
                          strict=True))

    assert rows(found) == rows(expected) and len(found["label"]) < len(every["label"])


@pytest.mark.parametrize("window", [1, 3, None])
def test_skipgram_pairs_match_a_loop(log, window):
    users, items, times = log
    out = skipgram_pairs(users, items, times, window=window)
    assert out["target"].dtype == out["context"].dtype == np.int32
    assert sorted(zip(out["target"].tolist(), out["context"].tolist(), strict=True)) == _reference_pairs(
        users, items, times, window)


def test_subsampling_keeps_items_with_the_word2vec_probability():
    rng = np.random.default_rng(1)
    counts = np.array([0, 0, 50_000, 5_000, 500, 50], np.int64)
    items = rng.permutation(np.repeat(np.arange(6), counts))
    users = np.zeros(len(items), np.int64)  # one long sequence; window 1 pairs each kept token with neighbours
    threshold = 1e-2
    frequency = counts[2:] / counts.sum()
    p_keep = np.minimum(1.0, np.sqrt(threshold / frequency) + threshold / frequency)
    kept_tokens = []
    for seed in range(3):
        out = skipgram_pairs(users, items, window=1, subsample=threshold, counts=counts, seed=seed)
        first_targets = out["target"][: (len(out["target"]) // 2)]  # forward pairs: one per adjacent kept tokens
        kept_tokens.append(np.bincount(first_targets, minlength=6)[2:])
    observed = np.mean(kept_tokens, axis=0) / counts[2:]
    np.testing.assert_allclose(observed, p_keep, atol=0.02)
    assert p_keep[0] < 0.6 and p_keep[-1] == 1.0  # the frequent item is really thinned, the rare kept
    again = skipgram_pairs(users, items, window=1, subsample=threshold, counts=counts, seed=0)
    first = skipgram_pairs(users, items, window=1, subsample=threshold, counts=counts, seed=0)
    assert np.array_equal(again["target"], first["target"])


def test_noise_distribution():
    counts = np.array([0, 0, 16, 1, 0, 81])
    expected = np.array([0, 0, 8, 1, 0, 27], np.float64)
    np.testing.assert_allclose(noise_distribution(counts, 0.75), expected / expected.sum())
    np.testing.assert_allclose(noise_distribution(counts, 1.0)[2:], np.array([16, 1, 0, 81]) / 98)
    with pytest.raises(ValueError):
        noise_distribution(np.zeros(4))


def _batches(dataset):
    return [{k: v.numpy().tolist() for k, v in batch.items()} for batch in dataset]


def test_to_dataset_is_deterministic_under_a_seed():
    arrays = {"label": np.arange(50, dtype=np.int32), "history": np.arange(100, dtype=np.int32).reshape(50, 2)}
    first = to_dataset(arrays, batch_size=8, seed=7)
    second = to_dataset(arrays, batch_size=8, seed=7)
    epoch = _batches(first)
    assert epoch == _batches(second)
    assert sorted(sum((b["label"] for b in epoch), [])) == list(range(50))
    assert epoch != _batches(to_dataset(arrays, batch_size=8, seed=8))
    assert _batches(first) == epoch  # a non-repeated dataset is one epoch, the same at every iteration
    assert all(h == [2 * lab, 2 * lab + 1] for b in epoch for lab, h in zip(b["label"], b["history"], strict=True))
    unshuffled = _batches(to_dataset(arrays, batch_size=8, shuffle=False, drop_remainder=True))
    assert len(unshuffled) == 6 and unshuffled[0]["label"] == list(range(8))
    repeated = _batches(to_dataset(arrays, batch_size=8, repeat=True, seed=7).take(21))
    assert repeated[:7] == epoch and [len(b["label"]) for b in repeated[:7]] == [8] * 6 + [2]  # epochs never mix
    second_epoch = repeated[7:14]
    assert second_epoch != epoch and sorted(sum((b["label"] for b in second_epoch), [])) == list(range(50))
    assert repeated[14:] != epoch and repeated[14:] != second_epoch
