"""Statistical properties of the corrected objectives on a toy catalogue with Zipf popularity (fixed seeds).

1. Sampled softmax with log-Q: its gradient approaches the full-softmax gradient as the number of samples grows;
   without the correction it stays biased toward popular items.
2. NCE: on a self-normalised model (sum_j exp s_ij = 1, the state NCE drives to) its gradient approaches the
   maximum-likelihood (full-softmax) gradient as the number of noise samples grows (Mnih & Teh 2012, section 2.2);
   negative sampling's does not (it optimises a different objective).
3. Mixed negatives: the mixture correction (``mixture_log_q``) estimates the partition function without bias and
   with less variance than in-batch alone; correcting each column by its own mechanism doubles it.
"""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest
import tensorflow as tf
from absl import logging

from benchmarks.bench_objectives import negative_phase_gradient, self_normalised
from retrieval import losses
from retrieval.sampling import CandidateSampler, mixture_log_q, static_log_q

NUM_ITEMS, DIM, BATCH = 2000, 16, 64
V = NUM_ITEMS + 2
SAMPLE_SIZES = (16, 64, 256, 1024)
DRAWS = 16
HEAD = 20  # the most popular items


@pytest.fixture(scope="module")
def toy():
    rng = np.random.default_rng(0)
    counts = np.r_[0, 0, 1e6 / np.arange(1, NUM_ITEMS + 1)]  # Zipf(1), index 2 most popular
    return dict(
        counts=counts,
        items=tf.constant(rng.normal(scale=0.3, size=(V, DIM)).astype(np.float32)),
        query=tf.constant(rng.normal(size=(BATCH, DIM)).astype(np.float32)),
        labels=tf.constant(rng.choice(V, size=BATCH, p=counts / counts.sum()), tf.int64),
    )


def _negative_phase(toy, loss_fn):
    """Gradient of mean_i(loss_i + s(q_i, y_i)) w.r.t. the queries and per-item biases.

    Adding back the positive score leaves the gradient of log Z (the estimate of log sum_j exp s_ij), the only part
    sampling approximates. Its query part is sum_j p_ij e_j; its bias part is the softmax mass on every item.
    """
    query, bias = toy["query"], tf.zeros([V])
    with tf.GradientTape() as tape:
        tape.watch([query, bias])
        positive = tf.reduce_sum(query * tf.gather(toy["items"], toy["labels"]), 1) + tf.gather(bias, toy["labels"])
        loss = tf.reduce_mean(loss_fn(query, bias) + positive)
    grad_query, grad_bias = tape.gradient(loss, [query, bias])
    return grad_query.numpy().ravel(), tf.convert_to_tensor(grad_bias).numpy()


def _full(toy):
    def loss_fn(query, bias):
        # full_softmax has no bias argument: append the bias as one more embedding dimension with query value 1.
        items = tf.concat([toy["items"], bias[:, None]], axis=1)
        return losses.full_softmax(tf.concat([query, tf.ones([BATCH, 1])], 1), items, toy["labels"])

    return _negative_phase(toy, loss_fn)


def _sampled(toy, sampler, corrected):
    ids, log_q, true_log_q = sampler.sample(toy["labels"])
    if not corrected:
        log_q, true_log_q = tf.zeros_like(log_q), tf.zeros_like(true_log_q)
    items, labels = toy["items"], toy["labels"]
    return _negative_phase(toy, lambda query, bias: losses.sampled_softmax(
        query, tf.gather(items, labels), tf.gather(items, ids), true_log_q, log_q, labels, ids,
        positive_bias=tf.gather(bias, labels), negative_bias=tf.gather(bias, ids)))


def _cosine(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def gradients(toy):
    """Per (S, corrected): cosine of the draw-averaged query gradient with the full one, and the head mass."""
    tf.random.set_seed(0)
    full_query, full_mass = _full(toy)
    result = {"full_head_mass": full_mass[2:2 + HEAD].sum()}
    for size in SAMPLE_SIZES:
        # With replacement: the textbook importance sampler (E[count] = S p). See the module docstring of samplers.
        sampler = CandidateSampler("unigram", size, V, unigrams=toy["counts"], distortion=1.0, unique=False, seed=1)
        for corrected in (True, False):
            draws = [_sampled(toy, sampler, corrected) for _ in range(DRAWS)]
            query = np.mean([g for g, _ in draws], axis=0)
            mass = np.mean([m for _, m in draws], axis=0)
            result[size, corrected] = (_cosine(query, full_query), mass[2:2 + HEAD].sum())
            logging.info("S=%d corrected=%s cosine=%.3f head mass=%.3f (full %.3f)", size, corrected,
                         *result[size, corrected], result["full_head_mass"])
    return result


def test_corrected_sampled_softmax_gradient_approaches_full_softmax(gradients):
    cosines = [gradients[size, True][0] for size in SAMPLE_SIZES]
    assert np.all(np.diff(cosines) > 0), cosines
    assert cosines[-1] > 0.95, cosines  # measured 0.994 at S=1024
    head = gradients[SAMPLE_SIZES[-1], True][1]
    assert head == pytest.approx(gradients["full_head_mass"], rel=0.3)


def test_uncorrected_sampled_softmax_stays_biased_toward_popular_items(gradients):
    cosines = [gradients[size, False][0] for size in SAMPLE_SIZES]
    assert max(cosines) < 0.9, cosines  # measured 0.71..0.81
    assert gradients[SAMPLE_SIZES[-1], True][0] - cosines[-1] > 0.1
    for size in SAMPLE_SIZES:  # softmax mass on the 20 most popular items: full 1%, uncorrected ~40x that
        assert gradients[size, False][1] > 5 * gradients["full_head_mass"]


def test_mixture_correction_is_unbiased_for_mixed_negatives(toy):
    """In-batch candidates drawn from popularity plus 64 uniform extras (Yang et al. 2020), 300 batches.

    Z_i = sum_j exp(q_i . e_j) over the catalogue; the loss gives Zhat_i = exp(loss_i + l_ii), the corrected sum over
    the candidate columns. With duplicates kept as columns the batch's expected count is B f (``log B +
    static_log_q``), the sampler's is E / N.
    """
    rng = np.random.default_rng(5)
    tf.random.set_seed(5)
    num_extra, batches = 64, 300
    items, query = toy["items"].numpy(), toy["query"].numpy()
    popularity = toy["counts"] / toy["counts"].sum()
    z = np.exp(query @ items[2:].T).sum(1).astype(np.float32)
    batch_log_q = (np.log(BATCH) + static_log_q(toy["counts"])).astype(np.float32)
    sampler = CandidateSampler("uniform", num_extra, V, unique=False, seed=3)
    items_t, query_t, batch_log_q_t = tf.constant(items), tf.constant(query), tf.constant(batch_log_q)

    @tf.function
    def zhat_over_z(positives):
        extra_ids, extra_log_q, extra_log_q_of_positives = sampler.sample(positives)
        candidates, extras = tf.gather(items_t, positives), tf.gather(items_t, extra_ids)
        diagonal = tf.reduce_sum(query_t * candidates, 1)
        log_q = tf.gather(batch_log_q_t, positives)
        variants = {
            "in_batch": (log_q, None),
            "per_mechanism": (log_q, extra_log_q),
            "mixture": (mixture_log_q(log_q, extra_log_q_of_positives),
                        mixture_log_q(tf.gather(batch_log_q_t, extra_ids), extra_log_q)),
        }
        ratios = {}
        for name, (column_log_q, extra_column_log_q) in variants.items():
            loss = losses.in_batch_softmax(query_t, candidates, log_q=column_log_q,
                                           extra_negatives=None if extra_column_log_q is None else extras,
                                           extra_log_q=extra_column_log_q)
            ratios[name] = tf.exp(loss + diagonal - column_log_q) / z
        return ratios

    draws = [zhat_over_z(tf.constant(rng.choice(V, size=BATCH, p=popularity))) for _ in range(batches)]
    ratios = {name: np.stack([d[name].numpy() for d in draws]) for name in draws[0]}
    mean = {name: np.mean(r) for name, r in ratios.items()}
    spread = {name: np.std(r, axis=0).mean() for name, r in ratios.items()}
    logging.info("E[Zhat/Z] %s, per-draw std %s", mean, spread)
    assert mean["mixture"] == pytest.approx(1.0, abs=0.05)
    assert mean["in_batch"] == pytest.approx(1.0, abs=0.1)
    assert mean["per_mechanism"] == pytest.approx(2.0, abs=0.1)
    assert spread["mixture"] < 0.5 * spread["in_batch"]


@pytest.fixture(scope="module")
def binary_cosines(toy):
    """Per (loss, S): cosine of the draw-averaged negative phase (as ``_negative_phase``: the loss plus the positive
    score, w.r.t. queries and item biases) with the full-softmax one, on a self-normalised model: each query carries ``c_i = -log sum_j exp(q_i . e_j)`` as one more dimension against a
    constant 1 on every item, so ``s_ij = q_i . e_j + c_i`` and ``sum_j exp s_ij = 1``."""
    tf.random.set_seed(0)
    query, items = self_normalised(toy["query"], toy["items"])
    labels = toy["labels"]

    def gradient(loss_fn):
        return negative_phase_gradient(query, items, labels, loss_fn)

    # full_softmax has no bias argument: the bias is one more item dimension against a query value of 1.
    full = gradient(lambda bias: losses.full_softmax(tf.concat([query, tf.ones([BATCH, 1])], 1),
                                                     tf.concat([items, bias[:, None]], 1), labels))
    result = {}
    for size in SAMPLE_SIZES:
        sampler = CandidateSampler("unigram", size, V, unigrams=toy["counts"], distortion=1.0, unique=False, seed=1)
        for loss in (losses.nce, losses.negative_sampling):
            def sampled(bias, loss=loss, sampler=sampler):
                ids, log_q, true_log_q = sampler.sample(labels)
                log_q_args = () if loss is losses.negative_sampling else (true_log_q, log_q)
                return loss(query, tf.gather(items, labels), tf.gather(items, ids), *log_q_args,
                            positive_bias=tf.gather(bias, labels), negative_bias=tf.gather(bias, ids))

            mean = np.mean([gradient(sampled) for _ in range(DRAWS)], axis=0)
            result[loss.__name__, size] = _cosine(mean, full)
            logging.info("%s S=%d: negative phase, cosine with the full softmax %.3f", loss.__name__, size,
                         result[loss.__name__, size])
    return result


def test_nce_gradient_approaches_the_maximum_likelihood_gradient(binary_cosines):
    cosines = [binary_cosines["nce", size] for size in SAMPLE_SIZES]
    assert np.all(np.diff(cosines) > 0), cosines
    assert cosines[-1] > 0.95, cosines  # measured 0.751 / 0.903 / 0.968 / 0.991 at S = 16 / 64 / 256 / 1024


def test_negative_sampling_gradient_does_not(binary_cosines):
    cosines = [binary_cosines["negative_sampling", size] for size in SAMPLE_SIZES]
    assert max(cosines) < 0.8, cosines  # measured 0.51..0.61: it weights items by the noise, not by the model
