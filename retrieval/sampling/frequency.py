"""Candidate frequencies for the log-Q correction: static (from counts) and estimated while training (Yi et al. 2019).

In-batch softmax uses the batch itself as the proposal, so the ``Q(c)`` that ``retrieval.losses.in_batch_softmax``
subtracts is how often ``c`` shows up in batches. Three scales are in use:

* ``f = count / total``: the probability of one draw (``static_log_q(counts)``). Multiplying every ``Q`` by the same
  factor (``B``, ``total``) adds one constant to every logit of a row, which cancels in the softmax, so this is as
  good as any other scale as long as the batch is the only proposal.
* ``B * f``: the expected number of columns of a batch of ``B`` holding the item (``log(B) + static_log_q(counts)``).
  Exact for mixing with sampled negatives (``mixture_log_q``), where the scales must agree because a common factor
  no longer cancels; duplicates stay separate columns in the in-batch softmax, so this is their expected count.
* ``1 - (1 - f) ** B``: the probability that the item appears at least once in a batch of ``B``
  (``static_log_q(counts, batch_size=B)``; what the frequency estimator of Yi et al. 2019 measures). It equals
  ``B * f`` for items rarer than about one per batch and saturates at 1 for head items, which appear in nearly every
  batch however popular they are, so it corrects the head less than ``B * f`` does.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.errors import InputError

_MERSENNE_PRIME = (1 << 31) - 1


def static_log_q(counts: np.ndarray, batch_size: Optional[int] = None) -> np.ndarray:
    """Log proposal probability of each item from static counts (e.g. ``Vocabulary.counts``).

        f = max(count, 1) / sum(count)
        log_q = log f                            if batch_size is None
        log_q = log(1 - (1 - f) ** batch_size)   otherwise (computed as log(-expm1(B * log1p(-f))))

    Counts below 1 (the reserved ``<pad>``/``<oov>`` entries, items unseen in training) are raised to 1 so every
    correction stays finite; such indices are never labels.

    Args:
      counts: ``[V]`` non-negative counts aligned to the vocabulary.
      batch_size: ``B`` for the per-batch appearance probability; ``None`` for the per-draw probability.

    Returns:
      ``[V]`` float32 log probabilities, to gather by item index (``tf.gather(tf.constant(log_q), ids)``).
    """
    counts = np.asarray(counts, dtype=np.float64).reshape(-1)
    if counts.size == 0 or np.any(counts < 0) or not np.all(np.isfinite(counts)) or counts.sum() <= 0:
        raise InputError("counts must be finite, non-negative and not all zero", field="counts")
    if batch_size is not None and batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}", field="batch_size")
    f = np.maximum(counts, 1.0) / counts.sum()
    f = np.minimum(f, 1.0)
    if batch_size is None:
        return np.log(f).astype(np.float32)
    with np.errstate(divide="ignore"):
        return np.log(-np.expm1(batch_size * np.log1p(-f))).astype(np.float32)


def mixture_log_q(*log_expected_counts: tf.Tensor) -> tf.Tensor:
    """Log expected count of a candidate under the union of several proposals: ``log sum_k Q_k(c)``.

    Mixed negative sampling (Yang et al. 2020) scores each query against in-batch candidates *and* extra sampled
    ones. An item can come from either mechanism, so its expected number of appearances among the candidates is the
    sum of the mechanisms' expected counts; correcting every column with this total (the balance heuristic of
    multiple importance sampling, Veach & Guibas 1995) keeps the estimate of the partition function unbiased and
    bounds a tail item's weight by ``1 / Q_extra``. Each argument must be on the expected-count scale: for the batch
    ``log(B) + static_log_q(counts)`` (or, approximately, the per-batch probability of ``static_log_q(counts, B)`` or
    of ``FrequencyEstimator``), for sampled extras the sampler's log expected count.

    Args:
      *log_expected_counts: tensors of the same shape, one per mechanism, for the same candidates.

    Returns:
      ``log(sum_k exp(log_expected_counts[k]))``, float32, that shape.
    """
    stacked = tf.stack([tf.cast(x, tf.float32) for x in log_expected_counts], axis=0)
    return tf.reduce_logsumexp(stacked, axis=0)


class FrequencyEstimator(tf.keras.layers.Layer):
    """Estimate of the probability that an item appears in a batch, updated while training (Yi et al. 2019,
    Algorithms 2-3, their "streaming frequency estimation"; ``log_q="estimated"``).

    "Sampling-Bias-Corrected Neural Modeling for Large Corpus Item Recommendations" (RecSys 2019), section 4. Two
    arrays over ``H`` hash buckets: ``A[h]`` the global step at which bucket ``h`` was last seen, ``B[h]`` an
    exponential moving average of the number of steps between its occurrences. At step ``t``, for every bucket
    ``h`` hit by the batch:

        B[h] <- (1 - alpha) * B[h] + alpha * (t - A[h])      (Algorithm 2)
        A[h] <- t

    and ``p(y) = 1 / B[h(y)]`` estimates the probability that ``y`` appears in a batch. ``alpha`` trades variance
    (relative standard deviation of ``B`` about ``sqrt(alpha / 2)``) against how fast the estimate follows a change
    of distribution (about ``1 / alpha`` occurrences).

    Choices where the paper leaves room (documented because they change the numbers):

    * One update per bucket per step: a batch holding an item twice, or two items sharing a bucket, updates that
      bucket once (the paper's sequential loop would fold in a zero gap for the second one). The estimate is then
      exactly "the bucket appears in a batch". The update has static shapes and compiles with XLA.
    * First sighting: when ``A[h] == 0`` the bucket takes ``B[h] = t`` (the steps since the start, itself a sample
      of the waiting time) instead of the moving average with an arbitrary initial ``B``, which would bias early
      estimates by a factor ``alpha``. Buckets never seen read as ``B = t + 1`` (not seen in ``t`` steps).
    * Several hash functions (``num_hashes = m``, Algorithm 3): every array is updated, and the estimate is
      ``1 / max_i B_i[h_i(y)]``. A collision can only make a bucket appear more often (smaller ``B``, over-estimated
      ``p``), so the largest ``B`` is the least collided one. Hash 0 is ``id mod H`` (collision-free for contiguous
      indices when ``H >= V``); hash ``i >= 1`` is ``((a_i * id + b_i) mod (2**31 - 1)) mod H`` with fixed
      ``a_i, b_i``.

    State is held in non-trainable variables (``A``, ``B`` of shape ``[m * H]`` and a step counter the layer owns),
    so it is tracked and checkpointed with the model that holds the layer. ``update`` runs inside ``tf.function``;
    under ``tf.distribute`` it all-gathers the replicas' ids, every replica computes the same update for the global
    batch, and the variables (aggregation ``ONLY_FIRST_REPLICA``) keep the first replica's. The estimate then refers
    to the global batch; a per-replica in-batch softmax sees a batch ``R`` times smaller, which for rare items is a
    constant factor that cancels.

    Call ``update(ids)`` once per training step with the batch's candidate ids, then read ``log_probability(ids)``
    (reading after the update keeps first-seen items finite).

    Args:
      num_buckets: ``H`` per hash function; ``>= V`` (the vocabulary size) makes hash 0 collision-free.
      alpha: learning rate of the moving average. Measured on a Zipf(1) stream of 1000 items, batches of 256: with
        ``alpha = 0.001`` every one of the 100 most frequent items is within 4.5% after 20000 steps; with
        ``alpha = 0.01`` the mean error is 3% and it re-converges within 2000 steps of a shift in popularity.
      num_hashes: ``m`` hash functions (Algorithm 3), each with its own ``H`` buckets.
      seed: seeds the constants of hashes ``1..m-1``.
    """

    def __init__(self, num_buckets: int, alpha: float, num_hashes: int = 1, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        if num_buckets < 1 or num_hashes < 1 or not 0.0 < alpha <= 1.0:
            raise InputError(f"need num_buckets >= 1, num_hashes >= 1, 0 < alpha <= 1; got {num_buckets}, "
                             f"{num_hashes}, {alpha}", field="frequency_estimator")
        self.num_buckets = int(num_buckets)
        self.num_hashes = int(num_hashes)
        self.alpha = float(alpha)
        self.seed = int(seed)
        rng = np.random.default_rng(seed)
        self._hash_a = np.concatenate([[1], rng.integers(1, _MERSENNE_PRIME, self.num_hashes - 1)]).astype(np.int64)
        self._hash_b = np.concatenate([[0], rng.integers(0, _MERSENNE_PRIME, self.num_hashes - 1)]).astype(np.int64)
        state = dict(trainable=False, synchronization=tf.VariableSynchronization.ON_WRITE,
                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        size = self.num_hashes * self.num_buckets
        self.step = self.add_weight(name="step", shape=[], dtype=tf.int64, initializer="zeros", **state)
        self.last_step = self.add_weight(name="last_step", shape=[size], dtype=tf.int64, initializer="zeros",
                                         **state)
        self.gap = self.add_weight(name="gap", shape=[size], dtype=tf.float32, initializer="zeros", **state)

    def _slots(self, ids: tf.Tensor) -> tf.Tensor:
        """``[N] -> [N, m]`` flat indices ``i * H + h_i(id)`` into the state arrays."""
        ids = tf.cast(tf.reshape(ids, [-1]), tf.int64)
        if self.num_hashes == 1:
            hashed = ids[:, None]
        else:
            hashed = tf.math.floormod(ids[:, None] * self._hash_a[None, :] + self._hash_b[None, :], _MERSENNE_PRIME)
        buckets = tf.math.floormod(hashed, self.num_buckets)
        return buckets + tf.range(self.num_hashes, dtype=tf.int64)[None, :] * self.num_buckets

    def update(self, ids: tf.Tensor) -> tf.Tensor:
        """Advances the step and folds the batch's ids into the estimate (Algorithm 2). Returns the new step."""
        ids = tf.convert_to_tensor(ids)
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            ids = context.all_gather(tf.reshape(ids, [-1]), axis=0)
        # Duplicate slots (an item twice, or colliding items) compute the same new values from the same old state,
        # so scattering them all is one update per bucket, with static shapes (no tf.unique).
        slots = tf.reshape(self._slots(ids), [-1])
        step = self.step.assign_add(1)
        last = tf.gather(self.last_step, slots)
        elapsed = tf.cast(step - last, tf.float32)
        gap = tf.where(last == 0, elapsed, (1.0 - self.alpha) * tf.gather(self.gap, slots) + self.alpha * elapsed)
        with tf.control_dependencies([self.gap.scatter_update(tf.IndexedSlices(gap, slots))]):
            update = self.last_step.scatter_update(tf.IndexedSlices(tf.fill(tf.shape(slots), step), slots))
        with tf.control_dependencies([update]):
            return tf.identity(step)

    def expected_gap(self, ids: tf.Tensor) -> tf.Tensor:
        """``max_i B_i[h_i(id)]``: estimated steps between occurrences, same shape as ``ids`` (float32)."""
        ids = tf.convert_to_tensor(ids)
        slots = self._slots(ids)
        unseen = tf.cast(self.step + 1, tf.float32)
        gap = tf.where(tf.gather(self.last_step, slots) == 0, unseen, tf.gather(self.gap, slots))
        return tf.reshape(tf.reduce_max(gap, axis=1), tf.shape(ids))

    def probability(self, ids: tf.Tensor) -> tf.Tensor:
        """Estimated probability that each id appears in a batch, ``1 / max_i B_i[h_i(id)]``."""
        return 1.0 / tf.maximum(self.expected_gap(ids), 1.0)

    def log_probability(self, ids: tf.Tensor) -> tf.Tensor:
        """``log probability(ids)``: the ``log_q`` of ``retrieval.losses.in_batch_softmax``."""
        return -tf.math.log(tf.maximum(self.expected_gap(ids), 1.0))

    def call(self, ids: tf.Tensor) -> tf.Tensor:
        """Keras entry point: ``log_probability(ids)`` (no update)."""
        return self.log_probability(ids)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(num_buckets=self.num_buckets, alpha=self.alpha, num_hashes=self.num_hashes, seed=self.seed)
        return config
