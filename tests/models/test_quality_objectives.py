"""SimpleX's cosine contrastive loss and the bilateral softmax loss against direct NumPy computations of their formulas
on small tensors, and both through the in-batch objective (mixed negatives, joint log-Q, accidental hits)."""

import numpy as np
import tensorflow as tf

from retrieval import losses
from retrieval.models.objectives import InBatchNegatives
from retrieval.sampling.frequency import mixture_log_q


def _unit(rng, *shape):
    x = rng.normal(size=shape).astype(np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _negative_sets(ids, extra_ids):
    """Row i's negatives: every column j != i whose id differs from row i's positive id."""
    columns = np.concatenate([ids, extra_ids])
    return [[j for j in range(len(columns)) if j != i and columns[j] != ids[i]] for i in range(len(ids))]


def _ccl_reference(q, c, extra, log_q, extra_log_q, ids, extra_ids, margin, weight):
    columns, all_log_q = np.concatenate([c, extra]), np.concatenate([log_q, extra_log_q])
    out = []
    for i, negatives in enumerate(_negative_sets(ids, extra_ids)):
        s = columns @ q[i]
        inverse_q = np.exp(-all_log_q[negatives])
        push = np.maximum(0.0, s[negatives] - margin)
        out.append((1.0 - s[i]) + weight * np.sum(inverse_q * push) / np.sum(inverse_q))
    return np.array(out)


def _bsl_reference(q, c, extra, log_q, extra_log_q, ids, extra_ids, temperature, weight):
    columns, all_log_q = np.concatenate([c, extra]), np.concatenate([log_q, extra_log_q])
    out = []
    for i, negatives in enumerate(_negative_sets(ids, extra_ids)):
        logits = columns @ q[i] / temperature - all_log_q
        out.append(-logits[i] + weight * np.log(np.sum(np.exp(logits[negatives]))))
    return np.array(out)


def _case(seed=0, batch=6, extras=5, dim=4):
    rng = np.random.default_rng(seed)
    ids = np.array([2, 3, 4, 3, 5, 6][:batch], dtype=np.int32)  # item 3 twice: an in-batch accidental hit
    extra_ids = np.array([7, 2, 8, 9, 4][:extras], dtype=np.int32)  # 2 and 4 are rows' positives: hits
    return (_unit(rng, batch, dim), _unit(rng, batch, dim), _unit(rng, extras, dim),
            np.log(rng.uniform(0.01, 0.5, batch)).astype(np.float32),
            np.log(rng.uniform(0.01, 0.5, extras)).astype(np.float32), ids, extra_ids)


def test_cosine_contrastive_matches_the_formula_with_hits_extras_and_importance_weights():
    q, c, extra, log_q, extra_log_q, ids, extra_ids = _case()
    for margin, weight in ((0.0, 1.0), (-0.3, 5.0), (0.9, 150.0)):
        got = losses.in_batch_cosine_contrastive(q, c, log_q, candidate_ids=ids, margin=margin,
                                                 negative_weight=weight, extra_negatives=extra,
                                                 extra_log_q=extra_log_q, extra_ids=extra_ids).numpy()
        want = _ccl_reference(q, c, extra, log_q, extra_log_q, ids, extra_ids, margin, weight)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cosine_contrastive_without_log_q_is_the_plain_mean_and_ignores_a_common_scale_of_q():
    q, c, extra, log_q, extra_log_q, ids, extra_ids = _case(seed=1)
    plain = losses.in_batch_cosine_contrastive(q, c, None, candidate_ids=ids, margin=-0.2, negative_weight=2.0,
                                               extra_negatives=extra, extra_ids=extra_ids).numpy()
    zeros = np.zeros_like
    np.testing.assert_allclose(plain, _ccl_reference(q, c, extra, zeros(log_q), zeros(extra_log_q), ids, extra_ids,
                                                     -0.2, 2.0), rtol=1e-5, atol=1e-6)
    scaled = [losses.in_batch_cosine_contrastive(q, c, log_q + shift, candidate_ids=ids, margin=-0.2,
                                                 negative_weight=2.0, extra_negatives=extra,
                                                 extra_log_q=extra_log_q + shift, extra_ids=extra_ids).numpy()
              for shift in (0.0, 3.0)]
    np.testing.assert_allclose(scaled[0], scaled[1], rtol=1e-5, atol=1e-6)


def test_bilateral_softmax_matches_the_formula_and_reduces_to_a_softmax_without_the_positive():
    q, c, extra, log_q, extra_log_q, ids, extra_ids = _case(seed=2)
    for temperature, weight in ((0.1, 1.2), (1.0, 1.0), (0.05, 0.8)):
        got = losses.in_batch_bilateral_softmax(q, c, log_q, candidate_ids=ids, temperature=temperature,
                                                negative_weight=weight, extra_negatives=extra,
                                                extra_log_q=extra_log_q, extra_ids=extra_ids).numpy()
        want = _bsl_reference(q, c, extra, log_q, extra_log_q, ids, extra_ids, temperature, weight)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    # No hits, w = 1: the in-batch softmax's loss is log(1 + exp(BSL)) (the positive back in the denominator).
    distinct = np.arange(2, 2 + len(ids), dtype=np.int32)
    bsl = losses.in_batch_bilateral_softmax(q, c, log_q, candidate_ids=distinct, temperature=0.2).numpy()
    softmax = losses.in_batch_softmax(q, c, log_q, candidate_ids=distinct, temperature=0.2).numpy()
    np.testing.assert_allclose(softmax, np.log1p(np.exp(bsl)), rtol=1e-5)


def test_a_row_without_negatives_keeps_only_its_positive_term():
    q, c, *_ = _case()
    one = (q[:1], c[:1])
    cosine = float(np.sum(q[0] * c[0]))
    ccl = losses.in_batch_cosine_contrastive(*one, None, candidate_ids=np.array([2]), margin=0.0).numpy()
    bsl = losses.in_batch_bilateral_softmax(*one, None, candidate_ids=np.array([2]), temperature=0.5).numpy()
    np.testing.assert_allclose(ccl, [1.0 - cosine], rtol=1e-6)
    np.testing.assert_allclose(bsl, [-cosine / 0.5], rtol=1e-6)


class _Table(tf.keras.layers.Layer):
    """An item tower that looks rows up in a fixed table (vocab_size as the objectives read it)."""

    def __init__(self, table):
        super().__init__()
        self.table = tf.constant(table)
        self.vocab_size = table.shape[0]

    def call(self, indices):
        return tf.gather(self.table, indices)


class _FixedSampler:
    """Returns fixed extra negatives and their log expected counts, as CandidateSampler.sample does."""

    def __init__(self, ids, log_q):
        self.ids, self.log_q = tf.constant(ids), tf.constant(log_q)

    def sample(self, labels):
        return self.ids, self.log_q, tf.zeros(tf.shape(labels), tf.float32) - 30.0


def test_in_batch_objective_feeds_the_joint_log_q_of_mixed_negatives_to_both_losses():
    rng = np.random.default_rng(3)
    table = _unit(rng, 12, 4)
    counts = rng.integers(1, 50, size=12).astype(np.float64)
    counts[:2] = 0
    labels = np.array([2, 3, 4, 3, 5], dtype=np.int32)
    extra_ids = np.array([7, 2, 9], dtype=np.int32)
    extra_log_q = np.log([0.3, 0.3, 0.3]).astype(np.float32)
    query = _unit(rng, 5, 4)
    # The expected count per batch of each column: B * count / total from the batch plus the sampler's count.
    per_draw = np.log(counts / counts.sum(), where=counts > 0, out=np.full(12, -np.inf))
    batch_q = per_draw + np.log(len(labels))
    joint = mixture_log_q(tf.constant(batch_q[labels], tf.float32), tf.fill([5], -30.0)).numpy()
    extra_joint = mixture_log_q(tf.constant(batch_q[extra_ids], tf.float32), tf.constant(extra_log_q)).numpy()
    for loss, reference, knob in (("ccl", _ccl_reference, 0.2), ("bsl", _bsl_reference, 0.1)):
        objective = InBatchNegatives(_Table(table), temperature=0.1, log_q="static", counts=counts,
                                     sampler=_FixedSampler(extra_ids, extra_log_q), loss=loss, margin=0.2,
                                     negative_weight=1.3)
        got = objective(tf.constant(query), tf.constant(labels), training=True).numpy()
        want = reference(query, table[labels], table[extra_ids], joint, extra_joint, labels, extra_ids, knob, 1.3)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_gated_user_id_is_added_after_the_mlp_and_unknown_users_keep_only_the_history():
    from retrieval.models.layers import Initializers
    from retrieval.models.towers import UserTower

    init = Initializers(0)
    history_table = tf.keras.layers.Embedding(10, 3, embeddings_initializer=init.embedding())
    tower = UserTower(history_table, 4, init, hidden_units=(5,), user_vocab_size=6, user_id_embedding_dim=2,
                      user_id_gate=0.25)
    users = np.array([2, 5, 1], dtype=np.int32)  # 1 is the unknown-user index
    history = np.array([[2, 3, 0], [4, 0, 0], [5, 6, 7]], dtype=np.int32)
    got = tower({"user": users, "history": history}).numpy()
    table = history_table.embeddings.numpy()
    pooled = np.stack([table[h[h >= 2]].mean(axis=0) for h in history])
    ids = tower.user_id_embedding.embeddings.numpy()[users] * (users >= 2)[:, None]
    assert ids.shape == (3, 4)  # the gated id embedding has the output's width
    np.testing.assert_allclose(got, 0.25 * ids + 0.75 * tower.mlp(pooled).numpy(), rtol=1e-5, atol=1e-6)
