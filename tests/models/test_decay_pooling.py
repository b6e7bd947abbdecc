"""Pooling "decay" (``retrieval/models/poolings/decay.py``) against a NumPy reference of Mega's damped average,
normalised over the valid positions."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from retrieval.models.poolings import decay


def _reference(watched: np.ndarray, mask: np.ndarray, rates: np.ndarray) -> np.ndarray:
    out = np.zeros((watched.shape[0], watched.shape[2]))
    for b in range(watched.shape[0]):
        valid = np.flatnonzero(mask[b])
        if not len(valid):
            continue
        weights = np.exp(-valid[:, None] * rates[None, :])  # [valid positions, d]
        out[b] = (weights * watched[b, valid]).sum(0) / weights.sum(0)
    return out


@pytest.mark.parametrize("chunked", [False, True])
def test_the_pooled_history_is_the_damped_average_over_the_valid_positions(chunked):
    rng = np.random.default_rng(0)
    watched = rng.normal(size=(4, 12, 5)).astype(np.float32)
    # the most recent slot unknown (row 2: an id new since training), padding at the end, an empty history (row 3)
    mask = np.zeros((4, 12), bool)
    mask[0], mask[1, :2], mask[2, 1:4] = True, True, True
    pooling = decay.DecayPooling()
    pooled = pooling(tf.constant(watched), tf.constant(mask), chunked=chunked).numpy()
    rates = decay.decay_rates(5)
    np.testing.assert_allclose(rates[[0, -1]], decay.RATES, rtol=1e-6)
    np.testing.assert_allclose(pooled, _reference(watched, mask, rates), rtol=1e-5, atol=1e-6)
    assert not pooled[3].any() and not pooling.trainable_weights


def test_the_slowest_rate_is_near_the_mean_and_the_fastest_near_the_most_recent_valid_item():
    watched = tf.constant(np.arange(2 * 6 * 3, dtype=np.float32).reshape(2, 6, 3))
    mask = tf.constant([[True] * 6, [False, True, True, True, False, False]])
    pooled = decay.DecayPooling()(watched, mask).numpy()
    np.testing.assert_allclose(pooled[:, 0], [watched[0, :, 0].numpy().mean(), watched[1, 1:4, 0].numpy().mean()],
                               rtol=0.02)
    assert abs(pooled[1, 2] - watched[1, 1, 2]) < abs(pooled[1, 2] - watched[1, 3, 2])
