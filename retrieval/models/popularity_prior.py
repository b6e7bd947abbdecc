"""A popularity prior on the retrieval score, carried by one more coordinate of the exported vectors.

In-batch softmax with the log-Q correction (Yi et al. 2019) trains the towers' logit ``u . v_i / T`` towards
``log P(i | u) - log P(i)`` up to a per-user constant: the correction takes the item's popularity out of the score,
which is what makes the sampled softmax an unbiased estimate of the full one, but it leaves the ranking without the
prior that the full softmax's logit would carry. Adding part of it back, the logit ``u . v_i / T + beta log(1 + c_i)``
with ``c_i`` the item's training count, is the post-hoc logit adjustment of Menon et al. ("Long-tail learning via
logit adjustment", ICLR 2021: ``f_y(x) - tau log pi_y``) run the other way, towards the head: ``beta`` between 0 (the
towers' own ranking) and 1 gives back part of the prior the correction took out. It is tuned after training, on the automatic holdout, over
:data:`BETAS` (``jobs.tuning``; the cost is one validation ranking per value), and measured there: on Gowalla's
validation draws +0.001 NDCG@20 at ``beta`` 0.1-0.2 with recall@20 unchanged, where the towers' first item is rarer
than RP3beta's (benchmarks/journal/issue-47.md, "five teacher items, and where the NDCG@20 gap sits").

The index keeps one inner product per pair: the exported user vector is ``[u, 1]`` and the item vector
``[v_i, T beta log(1 + c_i)]`` (the score is the logit times ``T``, as the towers' cosine is), so the run's metric is
the inner product. ``beta`` is a non-trainable weight of the model (0 while training, set from the tuning record
before the export: ``jobs.tuning``); the counts are the vocabulary's, the tuning part's while tuning and all training
data's in the refit, as the log-Q correction's are. An item without training interactions gets 0, the prior of an
item clicked never. Written by hand: none of the dependencies has a score prior for an exported index.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import tensorflow as tf

BETAS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)  # the holdout's grid: 0 keeps the towers' own ranking


class PopularityPrior(tf.keras.layers.Layer):
    """``T beta log(1 + c_i)`` of item indices: the score's prior term (module docstring)."""

    def __init__(self, counts: np.ndarray, temperature: float, name: str = "popularity_prior"):
        super().__init__(name=name)
        self.temperature = float(temperature)
        self.log_counts = tf.Variable(np.log1p(np.maximum(np.asarray(counts, np.float64), 0)).astype(np.float32),
                                      trainable=False, name="log_counts")
        self.beta = tf.Variable(0.0, trainable=False, name="beta")

    def call(self, indices: tf.Tensor) -> tf.Tensor:
        """``[N]`` prior terms on the score scale of item indices ``[N]``."""
        return self.temperature * self.beta * tf.gather(self.log_counts, indices)


def tune(prior: PopularityPrior, evaluate: Callable[[], Mapping[str, float]], metric: str) -> tuple[float, list]:
    """The value of :data:`BETAS` with the highest ``metric`` of ``evaluate()`` (the holdout's metrics of the model
    as it stands, e.g. ``ndcg@20``; the first, the smallest, on a tie), and every point read; ``prior.beta`` is left
    at that value."""
    points = []
    for beta in BETAS:
        prior.beta.assign(beta)
        points.append({"beta": beta, **{key: float(value) for key, value in evaluate().items()}})
    best = max(points, key=lambda point: point[metric])  # max keeps the first of equal values
    prior.beta.assign(best["beta"])
    return float(best["beta"]), points
