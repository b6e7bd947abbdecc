"""Pooling "decay": a weighted mean of the watched items whose weights fall with each item's age in the history, at
a fixed rate per dimension: the multi-dimensional damped moving average of Mega (Ma et al., ICLR 2023, eq. 2-3) with
its rates fixed, normalised over the valid positions, so that each coordinate of the pooled history reads its own
time scale (some the whole history's taste, as the mean does, others the last few items).

The rates are a fixed bank, spread log-uniformly over ``RATES``, not learned: learning them makes the backward pass
read the gathered history a second time (for the rates' gradient), which took the bundled log's step from 34,000 to
12,900 examples/s for the same holdout recall@20 (0.2880 either way, against the mean's 0.2747; benchmarks/JOURNAL.md,
"Issue 47: a pooling that reads the history's recency"). Fixed, the step is the mean's: the weights are a constant
of the position and the mask.

Written by hand: TensorFlow and TFRS have poolings over positions but none with a bank of decay rates."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from retrieval.models.layers import sum_over_positions
from retrieval.models.poolings.base import HistoryPooling

RATES = (0.01, 1.0)  # the decay rates per position, log-uniform over the pooled vector's coordinates


def decay_rates(width: int) -> np.ndarray:
    """The rates ``lambda`` [width] of the bank: log-uniform from ``RATES[0]`` (half-life 69 positions) to
    ``RATES[1]`` (0.7 positions)."""
    return np.exp(np.linspace(np.log(RATES[0]), np.log(RATES[1]), width))


class DecayPooling(HistoryPooling):
    """``u_d = sum_p a_pd e_pd`` with ``a_pd`` proportional to ``exp(-p lambda_d)`` over the valid positions ``p``
    (0: the most recent item); ``lambda_d = 0`` would be the mean. Any history length works (the weights are a
    function of the position, not a table of them); zeros for an empty history."""

    def build(self, input_shape):
        self.rates = tf.constant(decay_rates(int(input_shape[-1])), dtype=self.compute_dtype)
        super().build(input_shape)

    def call(self, watched: tf.Tensor, mask: tf.Tensor, training=None, every_position: bool = False,
             chunked: bool = False) -> tf.Tensor:
        # exp(-p lambda) <= 1, and a row's shift by its first valid position would cancel in the ratio: no softmax
        # is needed; the floor keeps an empty history (or one whose weights underflow) at zero. The numerator sums
        # over positions as the mean does (in chunks in an XLA-compiled step: layers.sum_over_positions).
        positions = tf.cast(tf.range(tf.shape(watched)[1]), watched.dtype)
        decay = tf.exp(-positions[:, tf.newaxis] * tf.cast(self.rates, watched.dtype)[tf.newaxis, :])  # [H, d]
        valid = tf.cast(mask, watched.dtype)
        weighted = watched * (valid[:, :, tf.newaxis] * decay[tf.newaxis])
        total = sum_over_positions(weighted) if chunked else tf.reduce_sum(weighted, axis=-2)
        weight = tf.linalg.matmul(valid, decay)  # [B, d]: the weights' sums
        return total / tf.maximum(weight, tf.keras.backend.epsilon())


def build(settings: Any, init: Any) -> DecayPooling:
    return DecayPooling(name="decay_pooling")
