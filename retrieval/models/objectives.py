"""Training objectives of the two-tower model: each maps (user vectors, positive item indices) to per-example losses.

They own the negatives (sampler, batch, catalogue) and the log-Q corrections, and call ``retrieval.losses`` for the
arithmetic; the model reduces the per-example losses by the global batch size. Three sources of negatives, each with
a softmax loss and the binary (logistic) ones:

* ``SampledNegatives``: ``S`` negatives per batch from a ``CandidateSampler``, with their expected counts
  (Jean et al. 2015, section 3; YoutubeDNN). Losses ``sampled_softmax``, ``nce``, ``negative_sampling``,
  ``sampled_logistic``. Candidates come from the item tower, or from an ``OutputTable`` (the classic YoutubeDNN
  softmax weights ``W`` and bias ``b``).
* ``InBatchNegatives``: the other positives of the *global* batch are the negatives (gathered across replicas),
  corrected by how often the item is in a batch: static counts or the frequency estimator (Yi et al. 2019,
  section 4), updated once per training step. Optional mixed negatives (Yang et al. 2020): extra sampled items;
  then every column is corrected by ``log(Q_batch + Q_sampler)`` (``sampling.mixture_log_q``), both expected counts.
  Losses ``in_batch`` (softmax), ``nce``, ``negative_sampling``, ``sampled_logistic`` (the batch as the noise).
* ``FullCatalogue``: every item of the catalogue is a negative (exact; small catalogues). ``full_softmax``,
  ``full_logistic``.

Binary objectives score every candidate on its own, so the constant of the score matters (``retrieval.losses``,
module docstring): they add a ``LogitBias`` to every logit. It is a per-query constant, so it does not change any
ranking and is not exported (the exported ``user . item`` scores rank exactly as the training logits do).

``xla_compatible``: whether the objective can run inside an XLA-compiled training step. TensorFlow's candidate
samplers (``tf.random.*_candidate_sampler``) have no XLA kernel, so objectives that sample negatives cannot.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval import distributed, losses
from retrieval.models.config import OBJECTIVES, taking
from retrieval.models.layers import EmbeddingTable, Initializers
from retrieval.sampling.frequency import FrequencyEstimator, mixture_log_q, static_log_q
from retrieval.sampling.samplers import NUM_RESERVED_IDS, CandidateSampler

BINARY = {name: (o.corrected, o.removes_hits) for name, o in OBJECTIVES.items() if o.binary and "full" not in o.sources}
"""Binary objectives with sampled or in-batch negatives: (subtracts log Q, removes accidental hits)."""


class OutputTable(tf.keras.layers.Layer):
    """The output softmax layer of YoutubeDNN: a weight row ``w_i`` and a bias ``b_i`` per item index."""

    def __init__(self, vocab_size: int, dim: int, init: Initializers, l2_normalize: bool = False,
                 name: str = "output_table"):
        super().__init__(name=name)
        self.vocab_size = int(vocab_size)
        self.l2_normalize = bool(l2_normalize)
        self.weights_table = EmbeddingTable(vocab_size, dim, embeddings_initializer=init.embedding(),
                                            name="softmax_weights")
        self.bias_table = tf.keras.layers.Embedding(vocab_size, 1, embeddings_initializer="zeros",
                                                    name="softmax_bias")

    def call(self, indices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns ``(w [..., d], b [...])`` for ``indices``."""
        w = self.weights_table(indices)
        w = tf.math.l2_normalize(w, axis=-1) if self.l2_normalize else w
        return w, tf.squeeze(self.bias_table(indices), axis=-1)


class LogitBias(tf.keras.layers.Layer):
    """The constant of a binary objective's logit: ``F = s / T + c - log n``, ``c`` learned (starts at 0).

    ``n`` is what a uniform model would need: the number of items for NCE and the logistic losses (``log P = -log
    n`` for a uniform ``P``) and the number of noise samples per row for negative sampling (``log(P / Q) = -log k``
    for uniform ``P`` and noise). Without it a bounded score (a cosine over ``T``) could not reach those values, and
    a learned constant starting at 0 would need thousands of steps to get there. Returned on the score scale,
    ``T (c - log n)``, to be passed as the loss's bias (which is divided by ``T``). The weight is named ``bias``,
    so decoupled weight decay leaves it alone.
    """

    def __init__(self, temperature: float, name: str = "logit_bias"):
        super().__init__(name=name)
        self.temperature = float(temperature)
        self.bias = self.add_weight(name="bias", shape=[], initializer="zeros", trainable=True)

    def call(self, count: Union[int, tf.Tensor]) -> tf.Tensor:
        """``T (c - log count)``, float32 scalar."""
        log_count = tf.math.log(tf.cast(count, tf.float32))
        return self.temperature * (self.bias - log_count)


class SampledNegatives(tf.keras.layers.Layer):
    """Negatives from a candidate sampler, shared by the batch; ``candidates`` is the item tower or an
    ``OutputTable``; ``loss`` is ``sampled_softmax`` or one of ``BINARY`` (``retrieval.losses`` of that name).

    ``nce`` keeps accidental hits (a sampled negative equal to the positive stays a negative: NCE's known answer
    ``log P`` counts them); ``sampled_softmax`` and ``sampled_logistic`` remove them; ``negative_sampling`` keeps
    them as word2vec does.
    """

    def __init__(self, candidates: tf.keras.layers.Layer, sampler: CandidateSampler, temperature: float,
                 loss: str = "sampled_softmax"):
        super().__init__(name=loss)
        if loss not in taking("sampled"):
            raise ValueError(f"unknown sampled loss {loss!r}")
        self.xla_compatible = False
        self.candidates = candidates
        self.sampler = sampler
        self.temperature = float(temperature)
        self.loss = loss
        self.logit_bias = LogitBias(temperature) if loss in BINARY else None
        self._num_items = candidates.vocab_size - NUM_RESERVED_IDS

    def call(self, query: tf.Tensor, labels: tf.Tensor, training: bool = False) -> tf.Tensor:
        sampled_ids, sampled_log_q, true_log_q = self.sampler.sample(labels)
        positives, negatives = self.candidates(labels), self.candidates(sampled_ids)
        bias = {}
        if isinstance(self.candidates, OutputTable):
            (positives, bias["positive_bias"]), (negatives, bias["negative_bias"]) = positives, negatives
        if self.loss == "sampled_softmax":
            return losses.sampled_softmax(query, positives, negatives, true_log_q, sampled_log_q, positive_ids=labels,
                                          negative_ids=sampled_ids, temperature=self.temperature, **bias)
        corrected, remove_hits = BINARY[self.loss]
        shift = self.logit_bias(self._num_items if corrected else self.sampler.num_sampled)
        bias = {key: bias.get(key, 0.0) + shift for key in ("positive_bias", "negative_bias")}
        ids = dict(positive_ids=labels, negative_ids=sampled_ids) if remove_hits else {}
        if not corrected:
            return losses.negative_sampling(query, positives, negatives, temperature=self.temperature, **ids, **bias)
        loss_fn = losses.sampled_logistic if remove_hits else losses.nce
        return loss_fn(query, positives, negatives, true_log_q, sampled_log_q, temperature=self.temperature, **ids,
                       **bias)


class InBatchNegatives(tf.keras.layers.Layer):
    """The global batch as the negatives, with optional log-Q correction and mixed negatives.

    ``loss="in_batch"`` is the in-batch softmax; ``nce``, ``negative_sampling`` and ``sampled_logistic`` use the
    batch as the noise of the binary loss (``losses.in_batch_logistic``). The binary losses do not cancel a scale
    common to every ``Q``, so their static correction is the expected count among a row's noise columns,
    ``(B - 1) count / total`` (``B`` the global batch); the estimated probability (probability of being in a batch)
    approximates it for items rarer than one per batch.

    Args:
      item_tower: embeds item indices.
      temperature: ``T``.
      log_q: "none", "static" (``counts`` required) or "estimated" (``estimator`` required); negative sampling
        takes "none" (it has no correction).
      counts: ``[V]`` training counts for the static correction (per-draw probability ``count / total``; a factor
        common to all columns cancels in the softmax; with mixed negatives or a binary loss it is scaled to the
        expected count per global batch).
      estimator: the frequency estimator, updated with the batch's labels once per training step.
      sampler: extra negatives shared by the batch (mixed negative sampling), or None.
      loss: an objective of ``models.config.OBJECTIVES`` whose sources include "in_batch".
    """

    def __init__(self, item_tower: tf.keras.layers.Layer, temperature: float, log_q: str = "none",
                 counts: Optional[np.ndarray] = None, estimator: Optional[FrequencyEstimator] = None,
                 sampler: Optional[CandidateSampler] = None, loss: str = "in_batch"):
        super().__init__(name="in_batch_softmax" if loss == "in_batch" else f"in_batch_{loss}")
        if loss not in taking("in_batch"):
            raise ValueError(f"unknown in-batch loss {loss!r}")
        if not OBJECTIVES[loss].log_q and log_q != "none":
            raise ValueError(f"{loss} has no log-Q correction: pass log_q='none'")
        self.xla_compatible = sampler is None
        self.item_tower = item_tower
        self.temperature = float(temperature)
        self.log_q_mode = log_q
        self.estimator = estimator
        self.sampler = sampler
        self.loss = loss
        self.logit_bias = LogitBias(temperature) if loss in BINARY else None
        self._num_items = item_tower.vocab_size - NUM_RESERVED_IDS
        self._static_log_q = (tf.Variable(static_log_q(counts), trainable=False, name="static_log_q")
                              if log_q == "static" else None)

    def _batch_log_q(self, ids: tf.Tensor) -> Optional[tf.Tensor]:
        """Log probability that each id appears in a batch (on the scale of its mode), or None."""
        if self.log_q_mode == "static":
            return tf.gather(self._static_log_q, ids)
        if self.log_q_mode == "estimated":
            return self.estimator.log_probability(ids)
        return None

    def call(self, query: tf.Tensor, labels: tf.Tensor, training: bool = False) -> tf.Tensor:
        if training and self.estimator is not None:
            self.estimator.update(labels)
        candidates = self.item_tower(labels)
        log_q = self._batch_log_q(labels)
        log_count = None  # static per-draw probabilities -> expected counts, where a common scale does not cancel
        if self.log_q_mode == "static" and (self.sampler is not None or self.logit_bias is not None):
            batch = distributed.global_batch_size(tf.shape(labels)[0])
            noise_columns = batch if self.logit_bias is None else tf.maximum(batch - 1, 1)
            log_count = tf.math.log(tf.cast(noise_columns, tf.float32))
            log_q += log_count
        extras = []  # columns beyond this replica's batch: other replicas' positives, then sampled negatives
        if self.sampler is not None:
            sampled_ids, sampled_log_q, true_log_q = self.sampler.sample(labels)
            sampled = {"vectors": self.item_tower(sampled_ids), "ids": sampled_ids}
            if log_q is not None:
                # Balance heuristic: each column's Q is its expected count under both mechanisms together.
                sampled_batch_log_q = self._batch_log_q(sampled_ids)
                if log_count is not None:
                    sampled_batch_log_q += log_count
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
        if self.logit_bias is None:
            return losses.in_batch_softmax(query, candidates, log_q, candidate_ids=labels,
                                           temperature=self.temperature, extra_negatives=extra.get("vectors"),
                                           extra_log_q=extra.get("log_q"), extra_ids=extra.get("ids"))
        corrected, remove_hits = BINARY[self.loss]
        noise_per_row = tf.shape(candidates)[0] - 1 + (tf.shape(extra["ids"])[0] if extra else 0)
        shift = self.logit_bias(self._num_items if corrected else tf.maximum(noise_per_row, 1))
        return losses.in_batch_logistic(query, candidates, log_q, candidate_ids=labels if remove_hits else None,
                                        temperature=self.temperature, extra_negatives=extra.get("vectors"),
                                        extra_log_q=extra.get("log_q"),
                                        extra_ids=extra.get("ids") if remove_hits else None, bias=shift)


class FullCatalogue(tf.keras.layers.Layer):
    """Every item index is a negative (reserved rows excluded by the loss): ``loss`` is ``full_softmax`` or
    ``full_logistic`` (with a ``LogitBias``)."""

    def __init__(self, item_tower: tf.keras.layers.Layer, vocab_size: int, temperature: float,
                 loss: str = "full_softmax"):
        super().__init__(name=loss)
        if loss not in taking("full"):
            raise ValueError(f"unknown full-catalogue loss {loss!r}")
        self.xla_compatible = True
        self.item_tower = item_tower
        self.vocab_size = int(vocab_size)
        self.temperature = float(temperature)
        self.logit_bias = LogitBias(temperature) if OBJECTIVES[loss].binary else None

    def call(self, query: tf.Tensor, labels: tf.Tensor, training: bool = False) -> tf.Tensor:
        items = self.item_tower(tf.range(self.vocab_size))
        if self.logit_bias is None:
            return losses.full_softmax(query, items, labels, temperature=self.temperature)
        shift = self.logit_bias(self.vocab_size - NUM_RESERVED_IDS)
        return losses.full_logistic(query, items, labels, temperature=self.temperature, bias=shift)
