"""FrequencyEstimator against a known distribution: Zipf item stream, batches of 256, fixed seeds.

The true per-batch probability of item k is 1 - (1 - p_k)^B (batches are B independent draws from p).
"""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest
import tensorflow as tf

from retrieval.sampling import FrequencyEstimator

NUM_ITEMS, BATCH = 1000, 256
IDS = np.arange(NUM_ITEMS) + 2  # item of popularity rank k has index k + 2


def _zipf(permutation=None):
    p = 1.0 / np.arange(1, NUM_ITEMS + 1)
    p /= p.sum()
    if permutation is None:
        return p
    shifted = np.empty_like(p)
    shifted[permutation] = p  # item permutation[k] gets rank k
    return shifted


def _per_batch(p):
    return 1.0 - (1.0 - p) ** BATCH


def _stream(p, steps, seed):
    return tf.constant(np.random.default_rng(seed).choice(NUM_ITEMS, size=(steps, BATCH), p=p) + 2, tf.int32)


@pytest.fixture(scope="module")
def stream():
    return _stream(_zipf(), 20000, seed=0)


def _train(estimator, batches):
    @tf.function
    def run(batches):
        for t in tf.range(tf.shape(batches)[0]):
            estimator.update(batches[t])

    run(batches)
    return estimator


def _relative_error(estimator, ids, truth):
    return estimator.probability(tf.constant(ids)).numpy() / truth - 1.0


def test_estimate_within_10_percent_for_100_most_frequent_items(stream):
    """alpha = 0.001, 20000 steps, 4096 buckets (no collision): every top-100 item within 10% (measured: 4.5%)."""
    estimator = _train(FrequencyEstimator(num_buckets=4096, alpha=0.001), stream)
    error = _relative_error(estimator, IDS[:100], _per_batch(_zipf())[:100])
    assert np.abs(error).max() < 0.10, np.abs(error).max()
    assert int(estimator.step) == 20000


def test_estimate_follows_a_distribution_shift():
    """alpha = 0.01: 5000 steps of Zipf, then the popularity ranks are permuted.

    The new top-100 items (mostly rare before) reach the pre-shift accuracy (mean relative error < 5%) within 2000
    steps. Items that became rare lag: they are updated only when they appear (Algorithm 2), so their estimate
    stays high for longer.
    """
    before = _zipf()
    permutation = np.random.default_rng(1).permutation(NUM_ITEMS)
    after = _zipf(permutation)
    new_top, old_top = permutation[:100], np.arange(100)
    estimator = _train(FrequencyEstimator(num_buckets=4096, alpha=0.01), _stream(before, 5000, seed=2))
    assert np.abs(_relative_error(estimator, IDS[old_top], _per_batch(before)[old_top])).mean() < 0.05
    assert np.abs(_relative_error(estimator, IDS[new_top], _per_batch(after)[new_top])).mean() > 0.5

    _train(estimator, _stream(after, 2000, seed=3))
    new_error = np.abs(_relative_error(estimator, IDS[new_top], _per_batch(after)[new_top])).mean()
    old_error = np.abs(_relative_error(estimator, IDS[old_top], _per_batch(after)[old_top])).mean()
    assert new_error < 0.05, new_error
    assert old_error > 2 * new_error, (old_error, new_error)


@pytest.fixture(scope="module")
def collided(stream):
    """alpha = 0.01, 5000 steps, 250 buckets per hash for 1000 items, with 1, 2 and 4 hash functions."""
    return {m: _train(FrequencyEstimator(num_buckets=250, alpha=0.01, num_hashes=m), stream[:5000])
            for m in (1, 2, 4)}


def test_collisions_over_estimate_as_the_bucket_probability(collided):
    """One hash (id mod 250): a bucket holds 4 items and its estimate is the probability that any of them is in the
    batch, 1 - prod_i (1 - pi_i) >= pi_k: colliding items are over-estimated, never under-estimated."""
    truth = _per_batch(_zipf())
    error = _relative_error(collided[1], IDS, truth)
    assert error.min() > -0.1 and error.mean() > 1.0, (error.min(), error.mean())
    bucket = IDS % 250
    log_miss = np.zeros(250)
    np.add.at(log_miss, bucket, np.log1p(-truth))
    bucket_probability = -np.expm1(log_miss[bucket])
    vs_bucket = collided[1].probability(tf.constant(IDS)).numpy() / bucket_probability - 1
    assert np.abs(vs_bucket[:100]).mean() < 0.05


def test_more_hashes_reduce_the_collision_error(collided):
    """Yi et al. 2019 Algorithm 3: 1 / max_i B_i (the least collided bucket) shrinks the over-estimate."""
    truth = _per_batch(_zipf())
    error = {m: np.abs(_relative_error(est, IDS, truth)) for m, est in collided.items()}
    assert error[4].mean() < error[2].mean() < error[1].mean()
    assert error[4].mean() < 0.6 * error[1].mean()
    assert error[4][:100].mean() < error[1][:100].mean()
