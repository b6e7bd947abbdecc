"""Retrieval objectives: the softmax family (sampled, in-batch, full) and the binary logistic family (NCE, negative
sampling, sampled logistic, full logistic; SGNS is negative sampling).

Every function returns the per-example loss ``[B]`` (no reduction; the caller averages or sums) and computes it in
float32 from logits, so the embeddings may be of a lower precision.

Sign convention (all objectives): a candidate ``c`` produced by a proposal ``Q`` enters the loss with the corrected
logit

    G(q, c) = s(q, c) / temperature - log Q(c),        s(q, c) = q . c (+ bias(c))

i.e. the correction is *subtracted* and applied *after* the temperature division (it is a property of the sampling,
not of the score scale), to positives and negatives alike. For the softmax family this is the (biased,
self-normalised) importance-sampling estimate of the full softmax of Bengio & Senecal (2008, "Adaptive Importance
Sampling to Accelerate Training of a Neural Probabilistic Language Model") and Jean et al. (2015, "On Using Very Large
Target Vocabulary for Neural Machine Translation", section 3), as in ``tf.nn.sampled_softmax_loss``
(``subtract_log_q``) and TFRS ``SamplingProbablityCorrection``. ``Q(c)`` is the expected count of ``c`` among the
candidates. In a softmax any positive multiple of it will do (a factor common to all candidates adds the same constant
to every logit and cancels); in the binary family it does not cancel, so ``Q`` must be the expected count itself
(``k * P_noise(c)`` for ``k`` draws), as ``tf.nn.nce_loss`` subtracts.

What the score learns (the table of TensorFlow's "Candidate Sampling Algorithms Reference", 2016), with ``F(x, y)
= s / T`` at the optimum of the expected loss, ``P = P(y | x)`` the data distribution and ``Q`` the expected count:

    full_softmax, sampled_softmax, in_batch_softmax   log P + K(x)   (any per-query constant K: softmax cancels it)
    nce                                              log P          (self-normalised: sum_y exp F = 1)
    negative_sampling (SGNS)                         log (P / Q)    (shifted PMI, Levy & Goldberg 2014)
    sampled_logistic, full_logistic                  log (P / (1 - P))

The binary objectives score each candidate on its own (no normalisation across candidates), so an additive constant
in ``F`` is *not* free: the score must be able to reach ``log P ~ -log(#items)``, which a bounded score (a cosine over
``T``) cannot without a bias. Give them a per-item bias (``positive_bias`` / ``negative_bias``) or at least a
learned scalar one (the two-tower objectives add one, see ``retrieval.models.objectives``).

Accidental hits (a negative with the same id as the row's positive) get the logit ``LARGE_NEGATIVE`` in place of
their logit: the shapes never change, so the loss stays a dense, XLA-friendly computation. In a softmax that column
drops out (``exp`` -> 0); in a logistic loss its term ``softplus(LARGE_NEGATIVE)`` is 0, so it drops out too.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.sampling.samplers import NUM_RESERVED_IDS

LARGE_NEGATIVE = float(tf.float32.min) / 100.0
"""Logit given to masked candidates: ``exp`` underflows to 0 and sums with it cannot overflow (as TFRS)."""


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


def logistic_from_logits(positive_logit: tf.Tensor, negative_logits: tf.Tensor) -> tf.Tensor:
    """The binary logistic loss of every objective of the logistic family (and of SGNS), from its logits.

        loss = -log sigmoid(G+) - sum_k log sigmoid(-G_k) = softplus(-G+) + sum_k softplus(G_k)

    i.e. ``sigmoid_cross_entropy_with_logits`` with label 1 on the positive and 0 on each negative, summed; softplus
    is stable for large ``|G|`` and a masked negative (``LARGE_NEGATIVE``) contributes exactly 0.

    Args:
      positive_logit: ``[...]`` logit of the positive.
      negative_logits: ``[..., K]`` logits of the negatives.

    Returns:
      ``[...]`` float32 loss.
    """
    return tf.nn.softplus(-positive_logit) + tf.reduce_sum(tf.nn.softplus(negative_logits), axis=-1)


# ----- sampled negatives shared by the batch: softmax, NCE, negative sampling, sampled logistic -----

def _sampled_logits(name: str, query: tf.Tensor, positives: tf.Tensor, negatives: tf.Tensor,
                    positive_log_q: Optional[tf.Tensor], negative_log_q: Optional[tf.Tensor],
                    positive_ids: Optional[tf.Tensor], negative_ids: Optional[tf.Tensor], temperature: float,
                    positive_bias: Optional[tf.Tensor],
                    negative_bias: Optional[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
    """``(G+ [B], G [B, S])``: ``(s + b) / T - log Q`` of each row's positive and of the shared negatives, hits
    masked when ids are given, no correction when the log-Qs are ``None``."""
    if (positive_ids is None) != (negative_ids is None):
        raise ValueError(f"{name}: pass both positive_ids and negative_ids to mask accidental hits, or none")
    if (positive_bias is None) != (negative_bias is None):
        raise ValueError(f"{name}: pass both positive_bias and negative_bias, or none")
    positive_score = tf.cast(tf.reduce_sum(query * positives, axis=1), tf.float32)
    negative_score = tf.cast(tf.matmul(query, negatives, transpose_b=True), tf.float32)
    if positive_bias is not None:
        positive_score += _f32(positive_bias)
        negative_score += _f32(negative_bias)
    positive_logit, negative_logits = positive_score / temperature, negative_score / temperature
    if positive_log_q is not None:
        positive_logit -= _f32(positive_log_q)
        negative_logits -= _f32(negative_log_q)[None, :]
    if positive_ids is not None:
        negative_logits = _mask_hits(negative_logits, positive_ids, negative_ids)
    return positive_logit, negative_logits


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

    ``F = s / T`` learns ``log P(y|x) + K(x)``. With ``T = 1`` this is exactly ``tf.nn.sampled_softmax_loss(weights,
    biases, labels, inputs, ..., remove_accidental_hits=True)`` fed the same ``sampled_values`` (``Q`` = TF's
    expected counts). ``T`` scales the score, bias included, and not the correction: ``loss(T) =
    tf.nn.sampled_softmax_loss(inputs=q / T, biases=b / T)``, whereas scaling TF's output logits by ``1/T`` would
    also scale ``log Q``.

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
        ``W x + b``), or scalars; both or neither.

    Returns:
      ``[B]`` float32 per-example loss.
    """
    positive_logit, negative_logits = _sampled_logits(
        "sampled_softmax", query, positives, negatives, positive_log_q, negative_log_q, positive_ids, negative_ids,
        temperature, positive_bias, negative_bias)
    logits = tf.concat([positive_logit[:, None], negative_logits], axis=1)
    return _cross_entropy(logits, positive_logit)


def nce(query: tf.Tensor, positives: tf.Tensor, negatives: tf.Tensor, positive_log_q: tf.Tensor,
        negative_log_q: tf.Tensor, positive_ids: Optional[tf.Tensor] = None, negative_ids: Optional[tf.Tensor] = None,
        temperature: float = 1.0, positive_bias: Optional[tf.Tensor] = None,
        negative_bias: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Noise-contrastive estimation (Gutmann & Hyvärinen 2010, eq. 3; Mnih & Teh 2012, eq. 5-8) with shared negatives.

    A logistic classifier tells the data sample from ``k`` noise samples on the corrected logit ``G``:

        G+ = (q_i . p_i + b(p_i)) / T - log Q(p_i),   G_j = (q_i . n_j + b(n_j)) / T - log Q(n_j)
        loss_i = -log sigmoid(G+) - sum_j log sigmoid(-G_j)

    with ``Q(y) = k P_noise(y)`` the expected count of ``y`` among the negatives. Per candidate ``y`` the expected
    loss is ``-P(y|x) log sigmoid(G) - Q(y) log sigmoid(-G)``, minimised at ``sigmoid(G) = P / (P + Q)``: **F = s / T
    learns log P(y|x)**, self-normalised (``sum_y exp F = 1``) without ever computing the partition function, for any
    ``k``. That needs the score to reach ``log P``: give it a bias (see the module docstring). The analysis counts
    the positive's own id among the negatives; removing those accidental hits (``positive_ids``/``negative_ids``)
    turns NCE into ``sampled_logistic`` (log-odds).

    Exactly ``tf.nn.nce_loss(weights, biases, labels, inputs, ..., remove_accidental_hits=ids given)`` fed the same
    ``sampled_values`` at ``T = 1``; ``T`` scales the score (bias included), not the correction. Arguments as
    ``sampled_softmax``.

    Returns:
      ``[B]`` float32 per-example loss.
    """
    return logistic_from_logits(*_sampled_logits(
        "nce", query, positives, negatives, positive_log_q, negative_log_q, positive_ids, negative_ids, temperature,
        positive_bias, negative_bias))


def sampled_logistic(query: tf.Tensor, positives: tf.Tensor, negatives: tf.Tensor, positive_log_q: tf.Tensor,
                     negative_log_q: tf.Tensor, positive_ids: tf.Tensor, negative_ids: tf.Tensor,
                     temperature: float = 1.0, positive_bias: Optional[tf.Tensor] = None,
                     negative_bias: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Sampled logistic (TensorFlow's "Candidate Sampling Algorithms Reference"): NCE's corrected logit ``G = s / T -
    log Q`` with the positive removed from the negatives (accidental hits masked, so the ids are required).

    A negative equal to the positive is now only counted when the positive is another item, so the noise weight of
    ``y`` is ``Q(y) (1 - P(y|x))`` and the optimum ``sigmoid(G) = P / (P + Q (1 - P))`` gives **F = s / T learns
    log(P / (1 - P))**, the log-odds (what ``full_logistic`` learns exactly). Equal to ``tf.nn.nce_loss(...,
    remove_accidental_hits=True)``. Arguments as ``sampled_softmax``.

    Returns:
      ``[B]`` float32 per-example loss.
    """
    return nce(query, positives, negatives, positive_log_q, negative_log_q, positive_ids, negative_ids, temperature,
               positive_bias, negative_bias)


def negative_sampling(query: tf.Tensor, positives: tf.Tensor, negatives: tf.Tensor,
                      positive_ids: Optional[tf.Tensor] = None, negative_ids: Optional[tf.Tensor] = None,
                      temperature: float = 1.0, positive_bias: Optional[tf.Tensor] = None,
                      negative_bias: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Negative sampling (NEG; Mikolov et al. 2013, eq. 4) with shared negatives: NCE's loss on the *uncorrected*
    logit ``G = (s + b) / T`` (so it takes no log-Q).

        loss_i = -log sigmoid(G(q_i, p_i)) - sum_j log sigmoid(-G(q_i, n_j))

    The optimum ``sigmoid(F) = P / (P + Q)`` gives **F = s / T learns log(P(y|x) / Q(y))**, ``Q = k P_noise`` the
    expected count: the pointwise mutual information shifted by ``log k`` (Levy & Goldberg 2014, "Neural Word
    Embedding as Implicit Matrix Factorization"). The noise distribution is part of the objective, not corrected
    away: with ``count ** 0.75`` noise the scores demote popular items. Without ids accidental hits are kept (as
    word2vec); other arguments as ``sampled_softmax``. ``sgns`` is the same loss for item2vec's per-pair negatives.

    Returns:
      ``[B]`` float32 per-example loss.
    """
    return logistic_from_logits(*_sampled_logits(
        "negative_sampling", query, positives, negatives, None, None, positive_ids, negative_ids, temperature,
        positive_bias, negative_bias))


# ----- the batch as the negatives: in-batch softmax, in-batch logistic -----

def _in_batch_logits(name: str, query: tf.Tensor, candidates: tf.Tensor, log_q: Optional[tf.Tensor],
                     candidate_ids: Optional[tf.Tensor], temperature: float, extra_negatives: Optional[tf.Tensor],
                     extra_log_q: Optional[tf.Tensor], extra_ids: Optional[tf.Tensor],
                     bias: Optional[tf.Tensor] = None) -> tuple[tf.Tensor, tf.Tensor]:
    """``(G [B, B+E], diagonal [B, B+E] bool)``: ``(s + bias) / T - log Q`` of every row against the batch's
    candidates then the extras, hits masked except on the diagonal (each row's positive)."""
    if extra_negatives is None and (extra_log_q is not None or extra_ids is not None):
        raise ValueError(f"{name}: extra_log_q / extra_ids given without extra_negatives")
    if extra_negatives is not None and (log_q is None) != (extra_log_q is None):
        raise ValueError(f"{name}: with extra negatives, correct both columns sets or neither (log_q and extra_log_q)")
    if extra_ids is not None and candidate_ids is None:
        raise ValueError(f"{name}: extra_ids need candidate_ids (the rows' positive ids)")
    all_candidates = candidates if extra_negatives is None else tf.concat([candidates, extra_negatives], axis=0)
    scores = tf.cast(tf.matmul(query, all_candidates, transpose_b=True), tf.float32)
    if bias is not None:
        scores += _f32(bias)
    logits = scores / temperature
    if log_q is not None:
        all_log_q = _f32(log_q) if extra_log_q is None else tf.concat([_f32(log_q), _f32(extra_log_q)], axis=0)
        logits -= all_log_q[None, :]
    diagonal = tf.eye(tf.shape(query)[0], tf.shape(logits)[1], dtype=tf.bool)
    if candidate_ids is not None:
        column_ids = candidate_ids
        if extra_negatives is not None:
            # Without extra_ids the extras cannot be compared: give them ids no row has (never a hit).
            extras = extra_ids if extra_ids is not None else tf.fill([tf.shape(extra_negatives)[0]], -1)
            column_ids = tf.concat([candidate_ids, tf.cast(extras, candidate_ids.dtype)], axis=0)
        logits = _mask_hits(logits, candidate_ids, column_ids, keep=diagonal)
    return logits, diagonal


def _weighted(loss: tf.Tensor, sample_weight: Optional[tf.Tensor]) -> tf.Tensor:
    return loss if sample_weight is None else loss * _f32(sample_weight)


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
    ``sampling.FrequencyEstimator``); for the extras, the sampler's expected count (``sampled_log_q``).
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
    logits, _ = _in_batch_logits("in_batch_softmax", query, candidates, log_q, candidate_ids, temperature,
                                 extra_negatives, extra_log_q, extra_ids)
    label_logit = tf.linalg.diag_part(logits[:, :tf.shape(query)[0]])
    return _weighted(_cross_entropy(logits, label_logit), sample_weight)


def in_batch_logistic(query: tf.Tensor, candidates: tf.Tensor, log_q: Optional[tf.Tensor] = None,
                      candidate_ids: Optional[tf.Tensor] = None, temperature: float = 1.0,
                      sample_weight: Optional[tf.Tensor] = None, extra_negatives: Optional[tf.Tensor] = None,
                      extra_log_q: Optional[tf.Tensor] = None, extra_ids: Optional[tf.Tensor] = None,
                      bias: Optional[tf.Tensor] = None) -> tf.Tensor:
    """The logistic family with the batch as the noise: the other rows' positives (and the extras) are the negative
    samples, drawn from the data's item marginal, with an importance correction by their expected count.

        G_ij = (q_i . c_j + bias_j) / T - log Q(c_j)
        loss_i = w_i * (softplus(-G_ii) + sum_{j != i} softplus(G_ij))

    Row ``i``'s own column is never a negative. Which member of the family it is depends on the arguments, exactly
    as for the sampled ones: ``log_q`` given and no ids is NCE (learns ``log P``), with ``candidate_ids`` (hits
    masked) it is sampled logistic (log-odds), no ``log_q`` is negative sampling (``log P / Q``). ``Q`` must be the
    expected count of the item among a row's ``B - 1`` noise columns (``log(B - 1) + static_log_q(counts)``, or the
    estimate of the probability of being in a batch, which approximates it for items rarer than one per
    batch), summed with the extras' expected count for mixed negatives (``sampling.mixture_log_q``).

    Args:
      query, candidates, log_q, candidate_ids, temperature, sample_weight, extra_negatives, extra_log_q,
        extra_ids: as ``in_batch_softmax``.
      bias: ``[B + E]`` per-column bias, or a scalar, added to the score before the temperature.

    Returns:
      ``[B]`` float32 per-example (weighted) loss.
    """
    logits, diagonal = _in_batch_logits("in_batch_logistic", query, candidates, log_q, candidate_ids, temperature,
                                        extra_negatives, extra_log_q, extra_ids, bias)
    positive_logit = tf.linalg.diag_part(logits[:, :tf.shape(query)[0]])
    negative_logits = tf.where(diagonal, LARGE_NEGATIVE, logits)
    return _weighted(logistic_from_logits(positive_logit, negative_logits), sample_weight)


# ----- every item of the catalogue: full softmax, full logistic -----

def _full_logits(query: tf.Tensor, item_embeddings: tf.Tensor, temperature: float, num_reserved: int,
                 bias: Optional[tf.Tensor] = None) -> tf.Tensor:
    """``(q . e_j + bias_j) / T`` for every vocabulary row ``[B, V]``, the reserved rows set to ``LARGE_NEGATIVE``."""
    scores = tf.cast(tf.matmul(query, item_embeddings, transpose_b=True), tf.float32)
    if bias is not None:
        scores += _f32(bias)
    reserved = tf.range(tf.shape(scores)[1]) < num_reserved
    return tf.where(reserved[None, :], LARGE_NEGATIVE, scores / temperature)


def full_softmax(query: tf.Tensor, item_embeddings: tf.Tensor, labels: tf.Tensor, temperature: float = 1.0,
                 num_reserved: int = NUM_RESERVED_IDS) -> tf.Tensor:
    """Exact softmax over the whole catalogue: the objective the sampled softmax losses estimate.

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
    logits = _full_logits(query, item_embeddings, temperature, num_reserved)
    label_logit = tf.gather(logits, labels, axis=1, batch_dims=1)
    return _cross_entropy(logits, label_logit)


def full_logistic(query: tf.Tensor, item_embeddings: tf.Tensor, labels: tf.Tensor, temperature: float = 1.0,
                  num_reserved: int = NUM_RESERVED_IDS, bias: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Full logistic: every catalogue item is a binary example, label 1 for the positive and 0 for all the others,
    no sampling, no correction (the reference of the logistic family, as ``full_softmax`` is of the softmax one).

        loss_i = sum_{j >= num_reserved} sigmoid_cross_entropy(F_ij, 1[j == y_i]),   F_ij = (q_i . e_j + b_j) / T

    Per item the expected loss is ``-P log sigmoid(F) - (1 - P) log sigmoid(-F)``, so **F learns log(P / (1 -
    P))**, the log-odds (what ``sampled_logistic`` estimates). A constant shift of ``F`` is not free here: pass a
    ``bias`` (per item, or a learned scalar) so that ``F`` can reach ``-log(#items)``.

    Args:
      query, item_embeddings, labels, temperature, num_reserved: as ``full_softmax``.
      bias: ``[V]`` per-item bias, or a scalar, added to the score before the temperature.

    Returns:
      ``[B]`` float32 per-example loss.
    """
    logits = _full_logits(query, item_embeddings, temperature, num_reserved, bias)
    positive_logit = tf.gather(logits, labels, axis=1, batch_dims=1)
    is_label = tf.equal(tf.range(tf.shape(logits)[1])[None, :], tf.cast(labels, tf.int32)[:, None])
    return logistic_from_logits(positive_logit, tf.where(is_label, LARGE_NEGATIVE, logits))


def sgns(target: tf.Tensor, context: tf.Tensor, negatives: tf.Tensor) -> tf.Tensor:
    """Skip-gram negative-sampling loss (Mikolov et al. 2013, eq. 4; Item2Vec, Barkan & Koenigstein 2016):
    ``negative_sampling`` at ``T = 1`` without bias, with per-pair negatives allowed.

        loss_i = -log sigmoid(u_i . v_i) - sum_k log sigmoid(-u_i . v_ik)

    with ``u`` the target (input) vectors, ``v`` the context (output) vectors and ``v_ik`` the noise items (drawn
    from ``count ** 0.75``). No log-Q correction: NEG is not an estimate of the softmax, its noise distribution is
    part of the objective (``u . v`` learns the PMI shifted by ``log k``).

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
    return logistic_from_logits(positive_logit, tf.cast(negative_logits, tf.float32))
