"""Candidate samplers for sampled softmax: thin wrappers over ``tf.random.*_candidate_sampler``.

A sampler draws ``S`` item indices per training step that every query of the batch shares as negatives (Jean et al.
2015, "On Using Very Large Target Vocabulary for Neural Machine Translation"; Covington et al. 2016, YouTube DNN) and
returns, with them, the *log expected counts* TensorFlow computes for the drawn ids and for the batch's true ids. Those
are the ``log Q`` terms that ``retrieval.losses.sampled_softmax`` subtracts (``logit = s / T - log Q``).

Expected counts, as TensorFlow defines them: with ``unique=False`` the ``S`` draws are independent and the expected
count of item ``j`` is ``S * p(j)`` (exact). With ``unique=True`` the op draws until it has ``S`` distinct ids after
``n`` tries and reports ``1 - (1 - p(j))**n``, or ``S * p(j)`` (which can exceed 1) when ``n == S``: an
approximation of the inclusion probability that treats ``n`` as fixed. For very popular items it is off (in the
tests, an item reported at 0.99 was included in 86% of draws), but it is what ``tf.nn.sampled_softmax_loss``
subtracts. Use ``unique=False`` where the exact expected count matters (it is the textbook importance sampler).

Reserved indices: the vocabulary reserves index 0 (``<pad>``) and 1 (``<oov>``) (``retrieval.data.vocab``). They are never
sampled: every kind samples from ``[0, range_max - 2)`` and shifts the result by 2, so ``range_max`` is the size of
the whole vocabulary and ``unigrams`` is aligned to it (its first two entries are ignored). For ``log_uniform`` the
most probable id is therefore index 2, which matches a vocabulary sorted by decreasing frequency.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.errors import InputError

NUM_RESERVED_IDS = 2
"""Indices ``[0, NUM_RESERVED_IDS)`` are ``<pad>`` and ``<oov>``: never sampled, never a candidate."""

KINDS = ("unigram", "log_uniform", "uniform")


class CandidateSampler:
    """Draws shared negatives for a batch and their log expected counts.

    Args:
      kind: ``"unigram"`` (``tf.random.fixed_unigram_candidate_sampler``: ``p(j) ∝ count(j) ** distortion``, the
        word2vec / YouTube choice), ``"log_uniform"`` (``tf.random.log_uniform_candidate_sampler``: Zipfian over the
        index, ``p(k) = log((k + 2) / (k + 1)) / log(range_max + 1)`` on the shifted index ``k``, which assumes
        indices sorted by decreasing frequency) or ``"uniform"`` (``tf.random.uniform_candidate_sampler``).
      num_sampled: ``S``, negatives per step, shared by every query of the batch.
      range_max: vocabulary size ``V`` including the two reserved indices.
      unigrams: ``[V]`` non-negative counts aligned to the vocabulary (``Vocabulary.counts``); required for
        ``"unigram"``. Entries 0 and 1 are ignored; every other entry must be positive, since an item that can never
        be drawn has ``log Q = -inf`` and would make the corrected logit of that item infinite when it is a label.
      distortion: power applied to ``unigrams`` (0.75 as in word2vec; 1 = popularity, 0 = uniform).
      unique: draw without replacement within a step (TensorFlow's ``unique``).
      seed: op-level seed; with ``tf.random.set_seed`` it makes the draws reproducible.
    """

    def __init__(self, kind: str, num_sampled: int, range_max: int, unigrams: Optional[np.ndarray] = None,
                 distortion: float = 0.75, unique: bool = True, seed: Optional[int] = None):
        if kind not in KINDS:
            raise InputError(f"unknown sampler kind {kind!r}; expected one of {KINDS}", field="kind")
        num_items = int(range_max) - NUM_RESERVED_IDS
        if num_items < 1:
            raise InputError(f"range_max={range_max} leaves no item to sample (indices 0 and 1 are reserved)",
                             field="range_max")
        if num_sampled < 1 or (unique and num_sampled > num_items):
            raise InputError(f"num_sampled={num_sampled} must be in [1, {num_items}] for {num_items} items "
                             f"(unique={unique})", field="num_sampled")
        self.kind = kind
        self.num_sampled = int(num_sampled)
        self.range_max = int(range_max)
        self.distortion = float(distortion)
        self.unique = bool(unique)
        self.seed = seed
        self._unigrams: Optional[list[float]] = None
        if kind == "unigram":
            if unigrams is None:
                raise InputError("kind='unigram' needs unigrams (item counts aligned to the vocabulary)",
                                 field="unigrams")
            counts = np.asarray(unigrams, dtype=np.float64).reshape(-1)
            if counts.shape[0] != self.range_max:
                raise InputError(f"unigrams has {counts.shape[0]} entries, expected range_max={range_max}",
                                 field="unigrams")
            if not np.all(counts[NUM_RESERVED_IDS:] > 0):
                raise InputError("unigram counts of items (index >= 2) must be positive", field="unigrams")
            self._unigrams = counts[NUM_RESERVED_IDS:].tolist()

    def sample(self, true_ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Samples ``S`` shared negatives for a batch of positives.

        Args:
          true_ids: ``[B]`` int item indices of the batch's positives (each ``>= 2``).

        Returns:
          ``(sampled_ids [S], sampled_log_q [S], true_log_q [B])``: sampled indices in the dtype of ``true_ids`` and
          float32 ``log`` of TensorFlow's expected counts for the sampled and the true ids. The sampled ids are not
          filtered against ``true_ids``; pass ids to the loss to mask accidental hits.
        """
        true_ids = tf.convert_to_tensor(true_ids)
        shifted = tf.maximum(tf.cast(true_ids, tf.int64) - NUM_RESERVED_IDS, 0)[:, None]
        common = dict(true_classes=shifted, num_true=1, num_sampled=self.num_sampled, unique=self.unique,
                      range_max=self.range_max - NUM_RESERVED_IDS, seed=self.seed)
        if self.kind == "unigram":
            sampled, true_count, sampled_count = tf.random.fixed_unigram_candidate_sampler(
                unigrams=self._unigrams, distortion=self.distortion, **common)
        elif self.kind == "log_uniform":
            sampled, true_count, sampled_count = tf.random.log_uniform_candidate_sampler(**common)
        else:
            sampled, true_count, sampled_count = tf.random.uniform_candidate_sampler(**common)
        sampled_ids = tf.cast(sampled + NUM_RESERVED_IDS, true_ids.dtype)
        return (tf.stop_gradient(sampled_ids), tf.stop_gradient(tf.math.log(sampled_count)),
                tf.stop_gradient(tf.math.log(true_count[:, 0])))
