"""Retrieval objectives: sampled softmax, in-batch softmax (with mixed negatives), full softmax and SGNS.

Every function returns the per-example loss ``[B]`` (no reduction; the caller averages or sums) and computes it in
float32 from logits, so the embeddings may be of a lower precision.

Sign convention (all softmax objectives): a candidate ``c`` produced by a proposal ``Q`` enters the softmax with the
corrected logit

    logit(q, c) = s(q, c) / temperature - log Q(c),        s(q, c) = q . c (+ bias(c))

i.e. the correction is *subtracted* and applied *after* the temperature division (it is a property of the sampling,
not of the score scale), to positives and negatives alike. This is the (biased, self-normalised) importance-sampling
estimate of the full softmax of Bengio & Senecal (2008, "Adaptive Importance Sampling to Accelerate Training of a
Neural Probabilistic Language Model") and Jean et al. (2015, "On Using Very Large Target Vocabulary for Neural
Machine Translation", section 3), as in ``tf.nn.sampled_softmax_loss`` (``subtract_log_q``) and TFRS
``SamplingProbablityCorrection``. ``Q(c)`` is the expected count of ``c`` among the candidates (or any
positive multiple of it: a factor common to all candidates adds the same constant to every logit and cancels in the
softmax).

Accidental hits (a negative with the same id as the row's positive) get the logit ``LARGE_NEGATIVE`` in place of
their logit: the shapes never change, so the loss stays a dense, XLA-friendly computation.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.sampling.samplers import NUM_RESERVED_IDS

LARGE_NEGATIVE = float(tf.float32.min) / 100.0
"""Logit given to masked candidates: ``exp`` underflows to 0 and sums with it cannot overflow (as TFRS)."""


def _scores(query: tf.Tensor, candidates: tf.Tensor, temperature: float) -> tf.Tensor:
    """``query @ candidates^T / temperature`` in float32: ``[B, d] x [C, d] -> [B, C]``."""
    return tf.cast(tf.matmul(query, candidates, transpose_b=True), tf.float32) / temperature


def _f32(x: Optional[tf.Tensor]) -> Optional[tf.Tensor]:
    return None if x is None else tf.cast(x, tf.float32)


def _mask_hits(logits: tf.Tensor, row_ids: tf.Tensor, column_ids: tf.Tensor,
               keep: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Sets ``logits[i, j]`` to ``LARGE_NEGATIVE`` where ``column_ids[j] == row_ids[i]``, except where ``keep``."""
    hit = tf.equal(row_ids[:, None], tf.cast(column_ids, row_ids.dtype)[None, :])
    if keep is not None:
        hit = tf.logical_and(hit, tf.logical_not(keep))
    return tf.where(hit, LARGE_NEGATIVE, logits)


def _cross_entropy(logits: tf.Tensor, label_logit: tf.Tensor) -> tf.Tensor:
    """Softmax cross-entropy ``logsumexp_j(logits_ij) - label_logit_i`` (the label column is part of ``logits``)."""
    return tf.reduce_logsumexp(logits, axis=1) - label_logit


def sampled_softmax(query: tf.Tensor, positives: tf.Tensor, negatives: tf.Tensor, positive_log_q: tf.Tensor,
                    negative_log_q: tf.Tensor, positive_ids: Optional[tf.Tensor] = None,
                    negative_ids: Optional[tf.Tensor] = None, temperature: float = 1.0,
                    positive_bias: Optional[tf.Tensor] = None,
                    negative_bias: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Sampled softmax with shared negatives and log-Q correction (Jean et al. 2015; YouTube DNN, Covington 2016).

    For query ``i`` with positive ``p_i`` and the shared negatives ``n_1..n_S`` drawn from ``Q``:

        l_i0 = (q_i . p_i + b(p_i)) / T - log Q(p_i)
        l_ij = (q_i . n_j + b(n_j)) / T - log Q(n_j),   l_ij = LARGE_NEGATIVE if ids given and id(n_j) == id(p_i)
        loss_i = -l_i0 + log(exp(l_i0) + sum_j exp(l_ij))

    With ``T = 1`` this is exactly ``tf.nn.sampled_softmax_loss(weights, biases, labels, inputs, ...,
    remove_accidental_hits=True)`` fed the same ``sampled_values`` (``Q`` = TF's expected counts). ``T`` scales the
    score, bias included, and not the correction: ``loss(T) = tf.nn.sampled_softmax_loss(inputs=q / T,
    biases=b / T)``, whereas scaling TF's output logits by ``1/T`` would also scale ``log Q``.

    Args:
      query: ``[B, d]`` query embeddings.
      positives: ``[B, d]`` embedding of each row's positive item (e.g. the output-softmax weight row).
      negatives: ``[S, d]`` embeddings of the shared sampled negatives.
      positive_log_q: ``[B]`` log expected count of each positive under the proposal (``true_log_q`` of a
        ``CandidateSampler``).
      negative_log_q: ``[S]`` log expected count of each negative (``sampled_log_q``).
      positive_ids, negative_ids: ``[B]`` / ``[S]`` item indices; when both are given, accidental hits are masked.
      temperature: ``T > 0``; scores are divided by it before the correction.
      positive_bias, negative_bias: ``[B]`` / ``[S]`` per-item output biases (the classic YoutubeDNN softmax layer
        ``W x + b``); both or neither.

    Returns:
      ``[B]`` float32 per-example loss.
    """
    if (positive_ids is None) != (negative_ids is None):
        raise ValueError("sampled_softmax: pass both positive_ids and negative_ids to mask accidental hits, or none")
    if (positive_bias is None) != (negative_bias is None):
        raise ValueError("sampled_softmax: pass both positive_bias and negative_bias, or none")
    positive_score = tf.cast(tf.reduce_sum(query * positives, axis=1), tf.float32)
    negative_score = tf.cast(tf.matmul(query, negatives, transpose_b=True), tf.float32)
    if positive_bias is not None:
        positive_score += _f32(positive_bias)
        negative_score += _f32(negative_bias)[None, :]
    positive_logit = positive_score / temperature - _f32(positive_log_q)
    negative_logits = negative_score / temperature - _f32(negative_log_q)[None, :]
    if positive_ids is not None:
        negative_logits = _mask_hits(negative_logits, positive_ids, negative_ids)
    logits = tf.concat([positive_logit[:, None], negative_logits], axis=1)
    return _cross_entropy(logits, positive_logit)


def in_batch_softmax(query: tf.Tensor, candidates: tf.Tensor, log_q: Optional[tf.Tensor] = None,
                     candidate_ids: Optional[tf.Tensor] = None, temperature: float = 1.0,
                     sample_weight: Optional[tf.Tensor] = None, extra_negatives: Optional[tf.Tensor] = None,
                     extra_log_q: Optional[tf.Tensor] = None,
                     extra_ids: Optional[tf.Tensor] = None) -> tf.Tensor:
    """In-batch softmax with log-Q correction (Yi et al. 2019) and optional mixed negatives (Yang et al. 2020).

    Row ``i``'s positive is ``candidates[i]``; the other rows' positives, and the ``E`` shared ``extra_negatives``,
    are its negatives. With the candidate columns ``c_1..c_{B+E}`` (batch, then extras):

        l_ij = q_i . c_j / T - log Q(c_j),   l_ij = LARGE_NEGATIVE if ids given, j != i and id(c_j) == id(c_i)
        loss_i = w_i * (-l_ii + log sum_j exp(l_ij))

    This equals TFRS ``tasks.Retrieval(temperature=T, remove_accidental_hits=True)`` with a per-example
    ``CategoricalCrossentropy(from_logits=True)``, ``candidate_sampling_probability = exp(log Q)`` and the extras
    concatenated after the batch candidates; TFRS too divides by ``T`` first and then subtracts ``log p``. (TFRS
    clips ``p`` to ``[1e-6, 1]``; no clipping here, so ``Q`` may be an expected count above 1.)

    What ``Q`` is: for the batch columns, the probability that the item is in a batch (``sampling.static_log_q`` or
    ``sampling.StreamingFrequencyEstimator``); for the extras, the sampler's expected count (``sampled_log_q``).
    A per-column correction by the producing mechanism estimates ``sum_c exp(s_c)`` once per mechanism; for the
    mixture estimate (Yang et al. 2020 mixed negative sampling, balance heuristic) pass for *every* column the log
    of the total expected count ``Q_batch(c) + Q_extra(c)`` (``sampling.mixture_log_q``): on the same count scale,
    so the batch part is ``log(B) + static_log_q(counts)``, not ``log(count/total)``. It keeps the estimate of the
    partition function unbiased (the per-mechanism correction doubles it) and stops tail items, rare in batches,
    from getting huge ``1/Q_batch`` weights.

    Args:
      query: ``[B, d]`` query embeddings.
      candidates: ``[B, d]`` positive candidate of each row.
      log_q: ``[B]`` log proposal probability of each batch candidate, or ``None`` for no correction.
      candidate_ids: ``[B]`` item indices; masks in-batch accidental hits (the same item twice in the batch).
      temperature: ``T > 0``.
      sample_weight: ``[B]`` per-example weights multiplying the loss.
      extra_negatives: ``[E, d]`` shared negatives (mixed negative sampling), or ``None``.
      extra_log_q: ``[E]`` their log expected counts; required with ``extra_negatives`` if ``log_q`` is given.
      extra_ids: ``[E]`` their item indices; masked where equal to a row's positive (needs ``candidate_ids``).

    Returns:
      ``[B]`` float32 per-example (weighted) loss.
    """
    if extra_negatives is None and (extra_log_q is not None or extra_ids is not None):
        raise ValueError("in_batch_softmax: extra_log_q / extra_ids given without extra_negatives")
    if extra_negatives is not None and (log_q is None) != (extra_log_q is None):
        raise ValueError("in_batch_softmax: with extra negatives, correct both columns sets or neither "
                         "(log_q and extra_log_q)")
    if extra_ids is not None and candidate_ids is None:
        raise ValueError("in_batch_softmax: extra_ids need candidate_ids (the rows' positive ids)")
    all_candidates = candidates if extra_negatives is None else tf.concat([candidates, extra_negatives], axis=0)
    logits = _scores(query, all_candidates, temperature)
    if log_q is not None:
        all_log_q = _f32(log_q) if extra_log_q is None else tf.concat([_f32(log_q), _f32(extra_log_q)], axis=0)
        logits -= all_log_q[None, :]
    batch_size = tf.shape(query)[0]
    diagonal = tf.eye(batch_size, tf.shape(logits)[1], dtype=tf.bool)
    if candidate_ids is not None:
        column_ids = candidate_ids
        if extra_negatives is not None:
            # Without extra_ids the extras cannot be compared: give them ids no row has (never a hit).
            extras = extra_ids if extra_ids is not None else tf.fill([tf.shape(extra_negatives)[0]], -1)
            column_ids = tf.concat([candidate_ids, tf.cast(extras, candidate_ids.dtype)], axis=0)
        logits = _mask_hits(logits, candidate_ids, column_ids, keep=diagonal)
    label_logit = tf.linalg.diag_part(logits[:, :batch_size])
    loss = _cross_entropy(logits, label_logit)
    if sample_weight is not None:
        loss *= _f32(sample_weight)
    return loss


def full_softmax(query: tf.Tensor, item_embeddings: tf.Tensor, labels: tf.Tensor, temperature: float = 1.0,
                 num_reserved: int = NUM_RESERVED_IDS) -> tf.Tensor:
    """Exact softmax over the whole catalogue: the objective the sampled losses estimate.

        loss_i = -q_i . e_{y_i} / T + log sum_{j >= num_reserved} exp(q_i . e_j / T)

    Use it for small catalogues and as the reference for sampled objectives. Rows of ``item_embeddings`` are
    vocabulary indices; the reserved rows (``<pad>``, ``<oov>``) are not items and are left out of the sum.

    Args:
      query: ``[B, d]``.
      item_embeddings: ``[V, d]`` embedding of every vocabulary index.
      labels: ``[B]`` int item index of each row's positive (``>= num_reserved``).
      temperature: ``T > 0``.
      num_reserved: leading rows that are not items (2: ``<pad>``, ``<oov>``).

    Returns:
      ``[B]`` float32 per-example loss.
    """
    logits = _scores(query, item_embeddings, temperature)
    reserved = tf.range(tf.shape(logits)[1]) < num_reserved
    logits = tf.where(reserved[None, :], LARGE_NEGATIVE, logits)
    label_logit = tf.gather(logits, labels, axis=1, batch_dims=1)
    return _cross_entropy(logits, label_logit)


def sgns(target: tf.Tensor, context: tf.Tensor, negatives: tf.Tensor) -> tf.Tensor:
    """Skip-gram negative-sampling loss (Mikolov et al. 2013, eq. 4; Item2Vec, Barkan & Koenigstein 2016).

        loss_i = -log sigmoid(u_i . v_i) - sum_k log sigmoid(-u_i . v_ik)

    with ``u`` the target (input) vectors, ``v`` the context (output) vectors and ``v_ik`` the noise items (drawn
    from ``count ** 0.75``). No log-Q correction: NEG is not an estimate of the softmax, its noise distribution is
    part of the objective.

    Args:
      target: ``[B, d]`` target item vectors ``u``.
      context: ``[B, d]`` context item vectors ``v``.
      negatives: ``[B, K, d]`` per-example noise vectors, or ``[K, d]`` shared by the batch.

    Returns:
      ``[B]`` float32 per-example loss.
    """
    positive_logit = tf.cast(tf.reduce_sum(target * context, axis=1), tf.float32)
    if negatives.shape.rank == 2:
        negative_logits = tf.matmul(target, negatives, transpose_b=True)
    else:
        negative_logits = tf.einsum("bd,bkd->bk", target, negatives)
    return sgns_from_logits(positive_logit, tf.cast(negative_logits, tf.float32))


def sgns_from_logits(positive_logit: tf.Tensor, negative_logits: tf.Tensor) -> tf.Tensor:
    """``sgns`` from its logits: ``positive_logit [...]`` (``u . v``) and ``negative_logits [..., K]`` (``u . n_k``)
    -> ``[...]``. -log sigmoid(x) = softplus(-x), stable for large |x|."""
    return tf.nn.softplus(-positive_logit) + tf.reduce_sum(tf.nn.softplus(negative_logits), axis=-1)
