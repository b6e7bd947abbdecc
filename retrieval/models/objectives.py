"""Training objectives of the two-tower model: each maps (user vectors, positive item indices) to per-example losses.

They own the negatives (sampler, batch, catalogue) and the log-Q corrections, and call ``retrieval.losses`` for the
arithmetic; the model reduces the per-example losses by the global batch size.

* ``SampledSoftmax``: ``S`` negatives per batch from a ``CandidateSampler``, corrected by their expected counts
  (Jean et al. 2015, section 3; YoutubeDNN). Candidates come from the item tower, or from an ``OutputTable``
  (the classic YoutubeDNN softmax weights ``W`` and bias ``b``).
* ``InBatchSoftmax``: the other positives of the *global* batch are the negatives (gathered across replicas),
  corrected by the log probability that the item is in a batch: static counts or the streaming estimator (Yi et al.
  2019, section 4), updated once per training step. Optional mixed negatives (Yang et al. 2020): extra sampled items;
  then every column is corrected by ``log(Q_batch + Q_sampler)`` (``sampling.mixture_log_q``), both expected counts.
* ``FullSoftmax``: every item of the catalogue is a negative (exact; small catalogues).

``xla_compatible``: whether the objective can run inside an XLA-compiled training step. TensorFlow's candidate
samplers (``tf.random.*_candidate_sampler``) have no XLA kernel, so objectives that sample negatives cannot.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval import distributed, losses
from retrieval.models.layers import Initializers
from retrieval.sampling.frequency import StreamingFrequencyEstimator, mixture_log_q, static_log_q
from retrieval.sampling.samplers import CandidateSampler


class OutputTable(tf.keras.layers.Layer):
    """The output softmax layer of YoutubeDNN: a weight row ``w_i`` and a bias ``b_i`` per item index."""

    def __init__(self, vocab_size: int, dim: int, init: Initializers, l2_normalize: bool = False,
                 name: str = "output_table"):
        super().__init__(name=name)
        self.vocab_size = int(vocab_size)
        self.l2_normalize = bool(l2_normalize)
        self.weights_table = tf.keras.layers.Embedding(vocab_size, dim, embeddings_initializer=init.embedding(),
                                                       name="softmax_weights")
        self.bias_table = tf.keras.layers.Embedding(vocab_size, 1, embeddings_initializer="zeros",
                                                    name="softmax_bias")

    def call(self, indices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns ``(w [..., d], b [...])`` for ``indices``."""
        w = self.weights_table(indices)
        w = tf.math.l2_normalize(w, axis=-1) if self.l2_normalize else w
        return w, tf.squeeze(self.bias_table(indices), axis=-1)


class SampledSoftmax(tf.keras.layers.Layer):
    """Sampled softmax with shared negatives; ``candidates`` is the item tower or an ``OutputTable``."""

    def __init__(self, candidates: tf.keras.layers.Layer, sampler: CandidateSampler, temperature: float):
        super().__init__(name="sampled_softmax")
        self.xla_compatible = False
        self.candidates = candidates
        self.sampler = sampler
        self.temperature = float(temperature)

    def call(self, query: tf.Tensor, labels: tf.Tensor, training: bool = False) -> tf.Tensor:
        sampled_ids, sampled_log_q, true_log_q = self.sampler.sample(labels)
        positives, negatives = self.candidates(labels), self.candidates(sampled_ids)
        bias = {}
        if isinstance(self.candidates, OutputTable):
            (positives, bias["positive_bias"]), (negatives, bias["negative_bias"]) = positives, negatives
        return losses.sampled_softmax(query, positives, negatives, true_log_q, sampled_log_q, positive_ids=labels,
                                      negative_ids=sampled_ids, temperature=self.temperature, **bias)


class InBatchSoftmax(tf.keras.layers.Layer):
    """In-batch softmax over the global batch, with optional log-Q correction and mixed negatives.

    Args:
      item_tower: embeds item indices.
      temperature: ``T``.
      log_q: "none", "static" (``counts`` required) or "streaming" (``estimator`` required).
      counts: ``[V]`` training counts for the static correction (per-draw probability ``count / total``; a factor
        common to all columns cancels; with mixed negatives it is scaled to the expected count per global batch).
      estimator: the streaming estimator, updated with the batch's labels once per training step.
      sampler: extra negatives shared by the batch (mixed negative sampling), or None.
    """

    def __init__(self, item_tower: tf.keras.layers.Layer, temperature: float, log_q: str = "none",
                 counts: Optional[np.ndarray] = None, estimator: Optional[StreamingFrequencyEstimator] = None,
                 sampler: Optional[CandidateSampler] = None):
        super().__init__(name="in_batch_softmax")
        self.xla_compatible = sampler is None
        self.item_tower = item_tower
        self.temperature = float(temperature)
        self.log_q_mode = log_q
        self.estimator = estimator
        self.sampler = sampler
        self._static_log_q = (tf.Variable(static_log_q(counts), trainable=False, name="static_log_q")
                              if log_q == "static" else None)

    def _batch_log_q(self, ids: tf.Tensor) -> Optional[tf.Tensor]:
        """Log probability that each id appears in a batch (on the scale of its mode), or None."""
        if self.log_q_mode == "static":
            return tf.gather(self._static_log_q, ids)
        if self.log_q_mode == "streaming":
            return self.estimator.log_probability(ids)
        return None

    def call(self, query: tf.Tensor, labels: tf.Tensor, training: bool = False) -> tf.Tensor:
        if training and self.estimator is not None:
            self.estimator.update(labels)
        candidates = self.item_tower(labels)
        log_q = self._batch_log_q(labels)
        extras = []  # columns beyond this replica's batch: other replicas' positives, then sampled negatives
        if self.sampler is not None:
            sampled_ids, sampled_log_q, true_log_q = self.sampler.sample(labels)
            sampled = {"vectors": self.item_tower(sampled_ids), "ids": sampled_ids}
            if log_q is not None:
                # Balance heuristic: each column's Q is its expected count under both mechanisms together, so both
                # must be expected counts: static per-draw probabilities times the global batch size.
                sampled_batch_log_q = self._batch_log_q(sampled_ids)
                if self.log_q_mode == "static":
                    batch = distributed.global_batch_size(tf.shape(labels)[0])
                    log_batch = tf.math.log(tf.cast(batch, tf.float32))
                    log_q, sampled_batch_log_q = log_q + log_batch, sampled_batch_log_q + log_batch
                sampled["log_q"] = mixture_log_q(sampled_batch_log_q, sampled_log_q)
                log_q = mixture_log_q(log_q, true_log_q)
            extras.append(sampled)
        columns = {"vectors": candidates, "ids": labels}
        if log_q is not None:
            columns["log_q"] = log_q
        others = distributed.gather_other_replicas(columns)
        if others is not None:
            extras.insert(0, others)
        extra = {key: tf.concat([e[key] for e in extras], axis=0) for key in columns} if extras else {}
        return losses.in_batch_softmax(query, candidates, log_q, candidate_ids=labels, temperature=self.temperature,
                                       extra_negatives=extra.get("vectors"), extra_log_q=extra.get("log_q"),
                                       extra_ids=extra.get("ids"))


class FullSoftmax(tf.keras.layers.Layer):
    """Exact softmax over every item index (reserved rows excluded by ``losses.full_softmax``)."""

    def __init__(self, item_tower: tf.keras.layers.Layer, vocab_size: int, temperature: float):
        super().__init__(name="full_softmax")
        self.xla_compatible = True
        self.item_tower = item_tower
        self.vocab_size = int(vocab_size)
        self.temperature = float(temperature)

    def call(self, query: tf.Tensor, labels: tf.Tensor, training: bool = False) -> tf.Tensor:
        items = self.item_tower(tf.range(self.vocab_size))
        return losses.full_softmax(query, items, labels, temperature=self.temperature)
