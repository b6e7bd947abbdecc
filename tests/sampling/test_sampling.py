"""Candidate samplers, static and mixture log-Q, and the mechanics of the frequency estimator."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest
import tensorflow as tf

from retrieval.errors import InputError
from retrieval.sampling import CandidateSampler, FrequencyEstimator, mixture_log_q, static_log_q

V = 22  # 20 items + <pad>, <oov>
ITEMS = np.arange(2, V)
COUNTS = np.r_[0, 0, np.arange(V - 2, 0, -1) ** 2]


def _sampler(kind, unique, num_sampled=6, seed=11):
    return CandidateSampler(kind, num_sampled, V, unigrams=COUNTS if kind == "unigram" else None, unique=unique,
                            seed=seed)


@tf.function
def _empirical(sampler, draws):
    """Mean occurrences per draw of every index, and the mean expected count TF reports for every item."""
    items = tf.constant(ITEMS, tf.int64)
    seen = tf.zeros([V], tf.float32)
    expected = tf.zeros([V - 2], tf.float32)
    for _ in tf.range(draws):
        ids, _, true_log_q = sampler.sample(items)
        seen += tf.math.bincount(tf.cast(ids, tf.int32), minlength=V, maxlength=V, dtype=tf.float32)
        expected += tf.exp(true_log_q)
    return seen / tf.cast(draws, tf.float32), expected / tf.cast(draws, tf.float32)


def _distribution(kind):
    """p(item) of each kind over the items 2..V-1 (the shifted index k = item - 2)."""
    k = ITEMS - 2
    if kind == "unigram":
        weights = COUNTS[2:] ** 0.75
        return weights / weights.sum()
    if kind == "log_uniform":
        return np.log((k + 2) / (k + 1)) / np.log(V - 2 + 1)
    return np.full(V - 2, 1.0 / (V - 2))


@pytest.mark.parametrize("kind", ["unigram", "log_uniform", "uniform"])
def test_sampler_expected_counts_match_empirical_counts(kind):
    """With replacement, exp(log_q) is the mean number of occurrences of an item per draw; 0/1 are never drawn."""
    tf.random.set_seed(0)
    draws = 3000
    seen, expected = (x.numpy() for x in _empirical(_sampler(kind, unique=False), tf.constant(draws)))
    assert seen[:2].sum() == 0
    assert seen.sum() == pytest.approx(6.0)
    tolerance = 4.0 * np.sqrt(expected / draws) + 1e-3  # 4 Poisson standard errors of the mean
    assert np.all(np.abs(seen[2:] - expected) < tolerance), np.c_[seen[2:], expected]


@pytest.mark.parametrize("kind", ["unigram", "log_uniform", "uniform"])
def test_sampler_log_q_with_replacement_is_num_sampled_times_p(kind):
    """With unique=False, expected count = S * p(item) with p the kind's distribution over the shifted index."""
    num_sampled = 6
    sampled, sampled_log_q, true_log_q = _sampler(kind, unique=False).sample(tf.constant(ITEMS, tf.int32))
    p = _distribution(kind)
    np.testing.assert_allclose(true_log_q.numpy(), np.log(num_sampled * p), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sampled_log_q.numpy(), np.log(num_sampled * p[sampled.numpy() - 2]), rtol=1e-5,
                               atol=1e-5)
    assert sampled.dtype == tf.int32 and sampled.shape == (num_sampled,)
    assert np.all(sampled.numpy() >= 2)


@pytest.mark.parametrize("kind", ["unigram", "log_uniform"])
def test_sampler_log_q_without_replacement_is_tf_expected_count(kind):
    """With unique=True TF reports, per call, S * p if its first S draws were distinct, else 1 - (1 - p)^n with n
    the number of draws it took to collect S distinct ids (TF's approximation of the inclusion probability, which
    tf.nn.sampled_softmax_loss subtracts, so it is what we return)."""
    tf.random.set_seed(0)
    sampler = _sampler(kind, unique=True)
    p = _distribution(kind)
    distinct_first_draws = 0
    for _ in range(8):
        sampled, sampled_log_q, true_log_q = sampler.sample(tf.constant(ITEMS, tf.int64))
        counts = np.exp(true_log_q.numpy())
        if np.allclose(counts, 6 * p, rtol=1e-5):
            distinct_first_draws += 1
        else:
            tries = np.log(-np.expm1(true_log_q.numpy()[-1])) / np.log1p(-p[-1])  # solve n from the rarest item
            assert tries > 6 and abs(tries - round(tries)) < 1e-2
            np.testing.assert_allclose(counts, -np.expm1(round(tries) * np.log1p(-p)), rtol=1e-4)
        assert len(np.unique(sampled.numpy())) == 6
        np.testing.assert_allclose(sampled_log_q.numpy(), true_log_q.numpy()[sampled.numpy() - 2], rtol=1e-6)
    assert 0 < distinct_first_draws < 8  # both of TF's cases were exercised


def test_sampler_rejects_bad_configuration():
    with pytest.raises(InputError, match="kind"):
        CandidateSampler("zipf", 4, V)
    with pytest.raises(InputError, match="unigrams"):
        CandidateSampler("unigram", 4, V)
    with pytest.raises(InputError, match="entries"):
        CandidateSampler("unigram", 4, V, unigrams=COUNTS[:-1])
    with pytest.raises(InputError, match="positive"):
        CandidateSampler("unigram", 4, V, unigrams=np.r_[COUNTS[:-1], 0])
    with pytest.raises(InputError, match="num_sampled"):
        CandidateSampler("uniform", V - 1, V)
    assert CandidateSampler("uniform", V + 5, V, unique=False).num_sampled == V + 5


# ----- static and mixture log-Q -----

def test_static_log_q_values():
    counts = np.array([0, 0, 6, 3, 1])
    f = np.array([1, 1, 6, 3, 1]) / 10.0  # zero counts are raised to 1 so the correction stays finite
    np.testing.assert_allclose(static_log_q(counts), np.log(f), rtol=1e-6)
    np.testing.assert_allclose(static_log_q(counts, batch_size=4), np.log(1 - (1 - f) ** 4), rtol=1e-6)
    rare = static_log_q(np.r_[0, 0, 1, np.full(10, 10**7)], batch_size=8)[2]
    assert rare == pytest.approx(np.log(8 * 1 / (10**8 + 1)), rel=1e-5)  # 1-(1-f)^B ~ B f for rare items
    assert static_log_q(counts).dtype == np.float32
    for bad in ([0, 0], [1, -1], [1, np.nan]):
        with pytest.raises(InputError, match="counts"):
            static_log_q(np.array(bad, dtype=float))


def test_mixture_log_q_is_log_of_summed_expected_counts():
    a = np.log(np.array([0.5, 2.0, 1e-6], np.float32))
    b = np.log(np.array([0.25, 1e-3, 0.1], np.float32))
    np.testing.assert_allclose(mixture_log_q(a, b).numpy(), np.log(np.exp(a) + np.exp(b)), rtol=1e-6)


# ----- frequency estimator: mechanics -----

def _reference_estimate(stream, num_buckets, alpha, num_hashes, estimator, query):
    """Yi et al. 2019 Algorithms 2-3 as a plain loop, one update per bucket per step, for comparison."""
    size = num_buckets * num_hashes
    last, gap = np.zeros(size, np.int64), np.zeros(size, np.float64)
    for step, ids in enumerate(stream, start=1):
        for slot in set(estimator._slots(tf.constant(ids)).numpy().ravel().tolist()):
            elapsed = step - last[slot]
            gap[slot] = elapsed if last[slot] == 0 else (1 - alpha) * gap[slot] + alpha * elapsed
            last[slot] = step
    slots = estimator._slots(tf.constant(query)).numpy()
    b = np.where(last[slots] == 0, len(stream) + 1, gap[slots]).max(axis=1)
    return 1.0 / b


def test_estimator_hand_computed_example():
    est = FrequencyEstimator(num_buckets=64, alpha=0.5)
    for ids in ([2, 3], [2], [3, 3], [2]):
        est.update(tf.constant(ids))
    # 2: gap 1 at step 1, then 0.5*1 + 0.5*(2-1) = 1, then 0.5*1 + 0.5*(4-2) = 1.5.
    # 3: gap 1 at step 1, then (duplicate in the batch counts once) 0.5*1 + 0.5*(3-1) = 1.5. 5: unseen in 4 steps.
    np.testing.assert_allclose(est.probability(tf.constant([2, 3, 5])).numpy(), [1 / 1.5, 1 / 1.5, 1 / 5])
    np.testing.assert_allclose(est.log_probability(tf.constant([2, 3])).numpy(), np.log([1 / 1.5, 1 / 1.5]),
                               rtol=1e-6)
    assert int(est.step) == 4


@pytest.mark.parametrize("num_hashes,jit_compile", [(1, False), (3, False), (3, True)])
def test_estimator_in_tf_function_equals_reference_loop(num_hashes, jit_compile):
    """Vectorised in-graph update (also XLA-compiled) == sequential reference, with collisions (8 buckets)."""
    rng = np.random.default_rng(3)
    stream = rng.integers(2, 32, size=(60, 12))
    est = FrequencyEstimator(num_buckets=8, alpha=0.2, num_hashes=num_hashes)
    step = tf.function(est.update, jit_compile=jit_compile)
    for ids in stream:
        step(tf.constant(ids))
    query = np.arange(2, 40)
    expected = _reference_estimate(stream, 8, 0.2, num_hashes, est, query)
    np.testing.assert_allclose(est.probability(tf.constant(query)).numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(est(tf.constant(query)).numpy(), np.log(expected), rtol=1e-5, atol=1e-6)


def test_estimator_is_checkpointed_and_tracked_by_keras_models(tmp_path):
    est = FrequencyEstimator(num_buckets=32, alpha=0.1, num_hashes=2)
    for ids in ([2, 3, 4], [2, 5], [2, 3]):
        est.update(tf.constant(ids))
    path = tf.train.Checkpoint(estimator=est).write(str(tmp_path / "ckpt"))
    restored = FrequencyEstimator(num_buckets=32, alpha=0.1, num_hashes=2)
    tf.train.Checkpoint(estimator=restored).read(path).assert_consumed()
    query = tf.constant([2, 3, 4, 5, 6])
    np.testing.assert_array_equal(restored.probability(query).numpy(), est.probability(query).numpy())
    assert int(restored.step) == 3

    class Holder(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.frequency = FrequencyEstimator(num_buckets=16, alpha=0.1)

    holder = Holder()
    assert len(holder.non_trainable_weights) == 3 and not holder.trainable_weights


def test_estimator_rejects_bad_parameters():
    for kwargs in (dict(num_buckets=0, alpha=0.1), dict(num_buckets=8, alpha=0.0), dict(num_buckets=8, alpha=1.5),
                   dict(num_buckets=8, alpha=0.1, num_hashes=0)):
        with pytest.raises(InputError):
            FrequencyEstimator(**kwargs)
