"""Losses against references: tf.nn.sampled_softmax_loss, TFRS Retrieval, a numpy full softmax, numpy SGNS."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_recommenders as tfrs

from retrieval import losses
from retrieval.sampling import CandidateSampler, static_log_q

V, D, B = 40, 8, 32


@pytest.fixture(scope="module")
def toy():
    """A small vocabulary (so that sampled negatives hit positives), a softmax weight table and biases."""
    rng = np.random.default_rng(0)
    counts = np.r_[0, 0, rng.integers(1, 200, V - 2)]
    return dict(
        counts=counts,
        table=tf.constant(rng.normal(size=(V, D)).astype(np.float32)),
        bias=tf.constant(rng.normal(size=V).astype(np.float32)),
        query=tf.constant(rng.normal(size=(B, D)).astype(np.float32)),
        labels=tf.constant(rng.integers(2, V, B), tf.int64),
    )


def _draw(toy, kind, unique=True, seed=7):
    tf.random.set_seed(0)
    sampler = CandidateSampler(kind, 20, V, unigrams=toy["counts"] if kind == "unigram" else None,
                               unique=unique, seed=seed)
    return sampler.sample(toy["labels"])


def _tf_sampled_softmax(toy, sampled, inputs, biases, remove_accidental_hits=True):
    ids, log_q, true_log_q = sampled
    return tf.nn.sampled_softmax_loss(
        weights=toy["table"], biases=biases, labels=toy["labels"][:, None], inputs=inputs,
        num_sampled=int(ids.shape[0]), num_classes=V, remove_accidental_hits=remove_accidental_hits,
        sampled_values=(tf.cast(ids, tf.int64), tf.exp(true_log_q)[:, None], tf.exp(log_q)))


def _ours_sampled_softmax(toy, sampled, temperature=1.0, with_bias=True, with_ids=True):
    ids, log_q, true_log_q = sampled
    labels, table, bias = toy["labels"], toy["table"], toy["bias"]
    return losses.sampled_softmax(
        toy["query"], tf.gather(table, labels), tf.gather(table, ids), true_log_q, log_q,
        positive_ids=labels if with_ids else None, negative_ids=ids if with_ids else None, temperature=temperature,
        positive_bias=tf.gather(bias, labels) if with_bias else None,
        negative_bias=tf.gather(bias, ids) if with_bias else None)


@pytest.mark.parametrize("kind", ["unigram", "log_uniform", "uniform"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_sampled_softmax_equals_tf_sampled_softmax_loss(toy, kind, with_bias):
    sampled = _draw(toy, kind)
    hits = np.isin(sampled[0].numpy(), toy["labels"].numpy())
    assert hits.any(), "the fixture must produce accidental hits for the masking to be tested"
    biases = toy["bias"] if with_bias else tf.zeros([V])
    expected = _tf_sampled_softmax(toy, sampled, toy["query"], biases)
    actual = _ours_sampled_softmax(toy, sampled, with_bias=with_bias)
    assert actual.shape == (B,)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=0, atol=1e-5)


def test_sampled_softmax_without_ids_keeps_accidental_hits(toy):
    sampled = _draw(toy, "unigram", unique=False)
    expected = _tf_sampled_softmax(toy, sampled, toy["query"], toy["bias"], remove_accidental_hits=False)
    masked = _tf_sampled_softmax(toy, sampled, toy["query"], toy["bias"], remove_accidental_hits=True)
    actual = _ours_sampled_softmax(toy, sampled, with_ids=False)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=0, atol=1e-5)
    assert np.abs(masked.numpy() - expected.numpy()).max() > 1e-2


def test_sampled_softmax_temperature_scales_score_not_correction(toy):
    """loss(T) == tf.nn.sampled_softmax_loss(inputs=q/T, biases=b/T): T divides q.v + b, log Q is subtracted after."""
    sampled = _draw(toy, "unigram")
    temperature = 0.25
    expected = _tf_sampled_softmax(toy, sampled, toy["query"] / temperature, toy["bias"] / temperature)
    actual = _ours_sampled_softmax(toy, sampled, temperature=temperature)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    # Scaling TF's corrected logits (log Q included) by 1/T is a different objective.
    ids, log_q, true_log_q = sampled
    scaled_correction = _ours_sampled_softmax(toy, (ids, log_q / temperature, true_log_q / temperature),
                                              temperature=temperature)
    assert np.abs(scaled_correction.numpy() - actual.numpy()).max() > 1e-2


def test_sampled_softmax_in_tf_function_and_gradient(toy):
    sampled = _draw(toy, "log_uniform")
    eager = _ours_sampled_softmax(toy, sampled)
    graph = tf.function(lambda: _ours_sampled_softmax(toy, sampled))()
    np.testing.assert_allclose(graph.numpy(), eager.numpy(), rtol=1e-6)
    table = tf.Variable(toy["table"])
    ids, log_q, true_log_q = sampled
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(losses.sampled_softmax(toy["query"], tf.gather(table, toy["labels"]),
                                                    tf.gather(table, ids), true_log_q, log_q, toy["labels"], ids))
    grad = tf.convert_to_tensor(tape.gradient(loss, table))
    assert np.all(np.isfinite(grad.numpy()))


def test_sampled_softmax_rejects_half_given_pairs(toy):
    ids, log_q, true_log_q = _draw(toy, "uniform")
    with pytest.raises(ValueError, match="positive_ids and negative_ids"):
        losses.sampled_softmax(toy["query"], toy["query"], tf.gather(toy["table"], ids), true_log_q, log_q,
                               positive_ids=toy["labels"])


# ----- in-batch softmax vs TFRS -----

@pytest.fixture(scope="module")
def batch():
    """A batch whose positives repeat (in-batch accidental hits) and extra negatives, some equal to positives."""
    rng = np.random.default_rng(1)
    ids = rng.integers(2, 14, B)
    extra_ids = np.r_[ids[:3], rng.integers(14, V, 9)]
    log_q = static_log_q(np.r_[0, 0, rng.integers(1, 50, V - 2)], batch_size=B)
    return dict(
        query=tf.constant(rng.normal(size=(B, D)).astype(np.float32)),
        candidates=tf.constant(rng.normal(size=(B, D)).astype(np.float32)),
        ids=tf.constant(ids, tf.int64), log_q=tf.constant(log_q[ids]),
        extra=tf.constant(rng.normal(size=(len(extra_ids), D)).astype(np.float32)),
        extra_ids=tf.constant(extra_ids, tf.int64), extra_log_q=tf.constant(log_q[extra_ids] - 0.7),
        weight=tf.constant(rng.uniform(0.2, 2.0, B).astype(np.float32)),
    )


def _tfrs_per_example(batch, temperature, with_ids, with_extra, with_weight, with_log_q=True):
    task = tfrs.tasks.Retrieval(
        temperature=temperature, remove_accidental_hits=with_ids,
        loss=tf.keras.losses.CategoricalCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE))
    candidates, log_q, ids = batch["candidates"], batch["log_q"], batch["ids"]
    if with_extra:
        candidates = tf.concat([candidates, batch["extra"]], 0)
        log_q = tf.concat([log_q, batch["extra_log_q"]], 0)
        ids = tf.concat([ids, batch["extra_ids"]], 0)
    return task(batch["query"], candidates, sample_weight=batch["weight"] if with_weight else None,
                candidate_sampling_probability=tf.exp(log_q) if with_log_q else None,
                candidate_ids=ids if with_ids else None, compute_metrics=False, compute_batch_metrics=False)


@pytest.mark.parametrize("temperature", [1.0, 0.2])
@pytest.mark.parametrize("with_ids,with_extra,with_weight", [
    (True, False, False), (True, False, True), (True, True, False), (True, True, True), (False, True, False)])
def test_in_batch_softmax_equals_tfrs_retrieval(batch, temperature, with_ids, with_extra, with_weight):
    assert len(np.unique(batch["ids"].numpy())) < B  # in-batch accidental hits exist
    expected = _tfrs_per_example(batch, temperature, with_ids, with_extra, with_weight)
    actual = losses.in_batch_softmax(
        batch["query"], batch["candidates"], log_q=batch["log_q"], candidate_ids=batch["ids"] if with_ids else None,
        temperature=temperature, sample_weight=batch["weight"] if with_weight else None,
        extra_negatives=batch["extra"] if with_extra else None,
        extra_log_q=batch["extra_log_q"] if with_extra else None,
        extra_ids=batch["extra_ids"] if with_extra and with_ids else None)
    assert actual.shape == (B,)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_losses_compile_with_xla(toy, batch):
    sampled = _draw(toy, "unigram")
    eager = _ours_sampled_softmax(toy, sampled)
    compiled = tf.function(lambda: _ours_sampled_softmax(toy, sampled), jit_compile=True)()
    np.testing.assert_allclose(compiled.numpy(), eager.numpy(), rtol=1e-5, atol=1e-5)

    def in_batch():
        return losses.in_batch_softmax(batch["query"], batch["candidates"], batch["log_q"], batch["ids"], 0.5,
                                       batch["weight"], batch["extra"], batch["extra_log_q"], batch["extra_ids"])

    compiled = tf.function(in_batch, jit_compile=True)()
    np.testing.assert_allclose(compiled.numpy(), in_batch().numpy(), rtol=1e-5, atol=1e-5)


def test_in_batch_softmax_uncorrected_and_tfrs_default_sum(batch):
    expected = _tfrs_per_example(batch, 1.0, with_ids=False, with_extra=False, with_weight=False, with_log_q=False)
    actual = losses.in_batch_softmax(batch["query"], batch["candidates"])
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    summed = tfrs.tasks.Retrieval()(batch["query"], batch["candidates"], compute_metrics=False)
    np.testing.assert_allclose(float(tf.reduce_sum(actual)), float(summed), rtol=1e-5)


def test_in_batch_softmax_masks_exactly_the_duplicates(batch):
    """Masking a hit equals dropping that column: compare with a per-row numpy softmax over the kept columns."""
    query, cand, ids, log_q = (batch[k].numpy() for k in ("query", "candidates", "ids", "log_q"))
    logits = query @ cand.T / 0.5 - log_q[None, :]
    expected = []
    for i in range(B):
        keep = (ids != ids[i]) | (np.arange(B) == i)
        row = logits[i, keep]
        expected.append(np.log(np.exp(row - row.max()).sum()) + row.max() - logits[i, i])
    actual = losses.in_batch_softmax(batch["query"], batch["candidates"], batch["log_q"], batch["ids"], 0.5)
    np.testing.assert_allclose(actual.numpy(), np.array(expected), rtol=1e-5, atol=1e-5)


def test_in_batch_softmax_static_log_q_scale_cancels(batch):
    """A factor common to every Q (count/total vs B * count/total) does not change the loss."""
    base = losses.in_batch_softmax(batch["query"], batch["candidates"], batch["log_q"], batch["ids"])
    shifted = losses.in_batch_softmax(batch["query"], batch["candidates"], batch["log_q"] + np.log(1234.0),
                                      batch["ids"])
    np.testing.assert_allclose(shifted.numpy(), base.numpy(), rtol=1e-5, atol=1e-5)


def test_in_batch_softmax_rejects_inconsistent_extras(batch):
    with pytest.raises(ValueError, match="extra_log_q"):
        losses.in_batch_softmax(batch["query"], batch["candidates"], log_q=batch["log_q"],
                                extra_negatives=batch["extra"])
    with pytest.raises(ValueError, match="candidate_ids"):
        losses.in_batch_softmax(batch["query"], batch["candidates"], extra_negatives=batch["extra"],
                                extra_ids=batch["extra_ids"])


# ----- full softmax -----

def test_full_softmax_matches_numpy_and_tf(toy):
    temperature = 0.5
    query, table, labels = toy["query"].numpy(), toy["table"].numpy(), toy["labels"].numpy()
    logits = query @ table[2:].T / temperature  # items only: rows 0/1 are <pad>/<oov>
    top = logits.max(1)
    expected = np.log(np.exp(logits - top[:, None]).sum(1)) + top - logits[np.arange(B), labels - 2]
    actual = losses.full_softmax(toy["query"], toy["table"], toy["labels"], temperature)
    np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-5, atol=1e-5)
    reference = tf.nn.sparse_softmax_cross_entropy_with_logits(labels - 2, logits)
    np.testing.assert_allclose(actual.numpy(), reference.numpy(), rtol=1e-5, atol=1e-5)


def test_sampled_softmax_with_every_item_and_no_correction_is_full_softmax(toy):
    """Sampled softmax whose 'sample' is the whole catalogue with Q = 1 (log Q = 0) is the full softmax."""
    items = tf.range(2, V, dtype=tf.int64)
    labels = toy["labels"]
    full = losses.full_softmax(toy["query"], toy["table"], labels)
    sampled = losses.sampled_softmax(toy["query"], tf.gather(toy["table"], labels), tf.gather(toy["table"], items),
                                     tf.zeros([B]), tf.zeros([V - 2]), labels, items)
    np.testing.assert_allclose(sampled.numpy(), full.numpy(), rtol=1e-5, atol=1e-5)


# ----- SGNS -----

@pytest.mark.parametrize("shared", [False, True])
def test_sgns_matches_numpy_and_sigmoid_cross_entropy(shared):
    rng = np.random.default_rng(2)
    k = 5
    u = rng.normal(size=(B, D)).astype(np.float32)
    v = rng.normal(size=(B, D)).astype(np.float32)
    neg = rng.normal(size=(k, D) if shared else (B, k, D)).astype(np.float32)
    neg_logits = u @ neg.T if shared else np.einsum("bd,bkd->bk", u, neg)
    pos_logits = (u * v).sum(1)

    def log_sigmoid(x):
        return -np.logaddexp(0.0, -x)

    expected = -log_sigmoid(pos_logits) - log_sigmoid(-neg_logits).sum(1)
    actual = losses.sgns(tf.constant(u), tf.constant(v), tf.constant(neg))
    assert actual.shape == (B,)
    np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-5, atol=1e-5)
    logits = np.concatenate([pos_logits[:, None], neg_logits], 1)
    targets = np.zeros_like(logits)
    targets[:, 0] = 1.0
    reference = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(targets, logits), axis=1)
    np.testing.assert_allclose(actual.numpy(), reference.numpy(), rtol=1e-5, atol=1e-5)


# ----- the logistic family: NCE, sampled logistic, negative sampling vs tf.nn.nce_loss; full logistic -----

def _tf_nce(toy, sampled, inputs, biases, remove_accidental_hits):
    ids, log_q, true_log_q = sampled
    return tf.nn.nce_loss(
        weights=toy["table"], biases=biases, labels=toy["labels"][:, None], inputs=inputs,
        num_sampled=int(ids.shape[0]), num_classes=V, remove_accidental_hits=remove_accidental_hits,
        sampled_values=(tf.cast(ids, tf.int64), tf.exp(true_log_q)[:, None], tf.exp(log_q)))


def _ours_binary(loss_fn, toy, sampled, temperature=1.0, with_bias=True, with_ids=True, corrected=True):
    ids, log_q, true_log_q = sampled
    labels, table, bias = toy["labels"], toy["table"], toy["bias"]
    args = (true_log_q, log_q) if corrected else ()
    return loss_fn(toy["query"], tf.gather(table, labels), tf.gather(table, ids), *args,
                   positive_ids=labels if with_ids else None, negative_ids=ids if with_ids else None,
                   temperature=temperature, positive_bias=tf.gather(bias, labels) if with_bias else None,
                   negative_bias=tf.gather(bias, ids) if with_bias else None)


@pytest.mark.parametrize("kind", ["unigram", "log_uniform", "uniform"])
@pytest.mark.parametrize("remove_accidental_hits", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_nce_equals_tf_nce_loss(toy, kind, remove_accidental_hits, with_bias):
    # Unique draws: with duplicate sampled ids TF's compute_accidental_hits masks only one of the copies (it maps
    # each sampled id to one position); ours masks every copy.
    sampled = _draw(toy, kind, unique=True)
    assert np.isin(sampled[0].numpy(), toy["labels"].numpy()).any()  # accidental hits exist
    expected = _tf_nce(toy, sampled, toy["query"], toy["bias"] if with_bias else tf.zeros([V]),
                       remove_accidental_hits)
    actual = _ours_binary(losses.nce, toy, sampled, with_bias=with_bias, with_ids=remove_accidental_hits)
    assert actual.shape == (B,)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_sampled_logistic_is_nce_without_accidental_hits(toy):
    sampled = _draw(toy, "unigram")
    expected = _tf_nce(toy, sampled, toy["query"], toy["bias"], remove_accidental_hits=True)
    actual = _ours_binary(losses.sampled_logistic, toy, sampled)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    kept = _tf_nce(toy, sampled, toy["query"], toy["bias"], remove_accidental_hits=False)
    assert np.abs(kept.numpy() - actual.numpy()).max() > 1e-2  # the hits make a difference here


def test_nce_temperature_scales_score_not_correction(toy):
    sampled = _draw(toy, "log_uniform")
    temperature = 0.25
    expected = _tf_nce(toy, sampled, toy["query"] / temperature, toy["bias"] / temperature, True)
    actual = _ours_binary(losses.nce, toy, sampled, temperature=temperature)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_ids", [False, True])
def test_negative_sampling_is_nce_with_unit_expected_counts(toy, with_ids):
    """NEG = tf.nn.nce_loss fed expected counts of 1 (log Q = 0): the uncorrected logistic loss."""
    ids, log_q, true_log_q = _draw(toy, "unigram")
    ones = (ids, tf.zeros_like(log_q), tf.zeros_like(true_log_q))
    expected = _tf_nce(toy, ones, toy["query"], toy["bias"], remove_accidental_hits=with_ids)
    actual = _ours_binary(losses.negative_sampling, toy, (ids, log_q, true_log_q), with_ids=with_ids,
                          corrected=False)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_sgns_with_shared_negatives_is_negative_sampling(toy):
    ids = tf.constant([3, 9, 17, 30], tf.int64)
    positives, negatives = tf.gather(toy["table"], toy["labels"]), tf.gather(toy["table"], ids)
    np.testing.assert_allclose(losses.sgns(toy["query"], positives, negatives).numpy(),
                               losses.negative_sampling(toy["query"], positives, negatives).numpy(), rtol=1e-6)


def test_nce_rejects_half_given_pairs(toy):
    ids, log_q, true_log_q = _draw(toy, "uniform")
    with pytest.raises(ValueError, match="nce: pass both positive_bias"):
        losses.nce(toy["query"], toy["query"], tf.gather(toy["table"], ids), true_log_q, log_q,
                   positive_bias=tf.zeros([B]))


@pytest.mark.parametrize("bias", ["none", "scalar", "per_item"])
def test_full_logistic_equals_sigmoid_cross_entropy_over_the_catalogue(toy, bias):
    temperature = 0.5
    bias_value = {"none": None, "scalar": tf.constant(-1.3), "per_item": toy["bias"]}[bias]
    scores = tf.matmul(toy["query"], toy["table"], transpose_b=True)
    if bias_value is not None:
        scores += bias_value
    logits = (scores / temperature)[:, 2:]  # items only: rows 0/1 are <pad>/<oov>
    targets = tf.one_hot(toy["labels"] - 2, V - 2)
    expected = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(targets, logits), axis=1)
    actual = losses.full_logistic(toy["query"], toy["table"], toy["labels"], temperature, bias=bias_value)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_sampled_logistic_with_every_item_and_no_correction_is_full_logistic(toy):
    items = tf.range(2, V, dtype=tf.int64)
    labels = toy["labels"]
    full = losses.full_logistic(toy["query"], toy["table"], labels, bias=toy["bias"])
    sampled = losses.sampled_logistic(toy["query"], tf.gather(toy["table"], labels), tf.gather(toy["table"], items),
                                      tf.zeros([B]), tf.zeros([V - 2]), labels, items,
                                      positive_bias=tf.gather(toy["bias"], labels),
                                      negative_bias=tf.gather(toy["bias"], items))
    np.testing.assert_allclose(sampled.numpy(), full.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["nce", "sampled_logistic", "negative_sampling"])
@pytest.mark.parametrize("with_extra", [False, True])
def test_in_batch_logistic_matches_per_row_sigmoid_cross_entropy(batch, variant, with_extra):
    """Reference: per row, tf.nn.sigmoid_cross_entropy_with_logits with label 1 on the row's own column and 0 on
    every other column kept (all of them for NCE and NEG; those with another id for sampled logistic)."""
    temperature, bias = 0.5, -0.7
    corrected, remove_hits = variant != "negative_sampling", variant == "sampled_logistic"
    columns, ids = batch["candidates"].numpy(), batch["ids"].numpy()
    log_q = batch["log_q"].numpy()
    if with_extra:
        columns = np.concatenate([columns, batch["extra"].numpy()])
        ids, log_q = np.r_[ids, batch["extra_ids"].numpy()], np.r_[log_q, batch["extra_log_q"].numpy()]
    logits = (batch["query"].numpy() @ columns.T + bias) / temperature - (log_q if corrected else 0.0)
    weight = batch["weight"].numpy()
    expected = []
    for i in range(B):
        keep = np.arange(len(ids)) != i
        if remove_hits:
            keep &= ids != ids[i]
        row = np.r_[logits[i, i], logits[i, keep]].astype(np.float32)
        labels = np.r_[1.0, np.zeros(keep.sum())].astype(np.float32)
        expected.append(weight[i] * tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels, row)).numpy())
    actual = losses.in_batch_logistic(
        batch["query"], batch["candidates"], log_q=batch["log_q"] if corrected else None,
        candidate_ids=batch["ids"] if remove_hits else None, temperature=temperature, sample_weight=batch["weight"],
        extra_negatives=batch["extra"] if with_extra else None,
        extra_log_q=batch["extra_log_q"] if with_extra and corrected else None,
        extra_ids=batch["extra_ids"] if with_extra and remove_hits else None, bias=bias)
    np.testing.assert_allclose(actual.numpy(), np.array(expected), rtol=1e-5, atol=1e-5)


def test_logistic_losses_compile_with_xla(toy, batch):
    sampled = _draw(toy, "unigram")

    def run():
        return (_ours_binary(losses.nce, toy, sampled), _ours_binary(losses.negative_sampling, toy, sampled,
                                                                     corrected=False),
                losses.full_logistic(toy["query"], toy["table"], toy["labels"], 0.5, bias=-1.0),
                losses.in_batch_logistic(batch["query"], batch["candidates"], batch["log_q"], batch["ids"], 0.5,
                                         batch["weight"], batch["extra"], batch["extra_log_q"], batch["extra_ids"],
                                         bias=-1.0))

    for compiled, eager in zip(tf.function(run, jit_compile=True)(), run(), strict=True):
        np.testing.assert_allclose(compiled.numpy(), eager.numpy(), rtol=1e-5, atol=1e-5)
