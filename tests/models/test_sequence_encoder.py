"""The self-attentive user tower (pooling "self_attention"): its causal mask, its every-position targets and loss
against NumPy references, order sensitivity, and the fallback on set data."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest
import tensorflow as tf

from retrieval import export
from retrieval.data.vocab import Vocabulary
from retrieval.models import build_model, default_config, sequence_encoder
from retrieval.models.layers import Initializers
from retrieval.models.part_settings import SequenceEncoderSettings
from retrieval.models.poolings.mean import MeanPooling
from retrieval.models.sequence_encoder import causal_attention_mask, every_position_targets

V_ITEMS, V_USERS, H = 14, 9, 6


@pytest.fixture(scope="module")
def vocabs():
    rng = np.random.default_rng(0)
    items = Vocabulary.from_ids([f"i{k}" for k in rng.zipf(1.5, 4000) % (V_ITEMS - 2)])
    users = Vocabulary.from_ids([f"u{k}" for k in range(V_USERS - 2)])
    return items, users


def sequential_config(**objective):
    config = default_config()
    config.embedding_dim = 8
    config.item_tower.id_embedding_dim = 8
    config.user_tower.hidden_units = ()
    config.user_tower.pooling = "self_attention"
    config.user_tower.sequence.num_heads = 2
    config.max_history = H
    config.temperature = 0.5
    for key, value in objective.items():
        config.objective[key] = value
    return config


# Most recent first, 0-padded; row 2 has an OOV item (1) inside.
HISTORY = np.array([[5, 7, 3, 9, 0, 0], [4, 4, 6, 2, 8, 11], [12, 1, 6, 0, 0, 0]], np.int32)
LABEL = np.array([10, 5, 13], np.int32)


def batch(history=HISTORY, label=LABEL):
    return {"user": tf.constant([2, 3, 4]), "history": tf.constant(history), "label": tf.constant(label)}


def test_causal_mask_known_answer():
    valid = tf.constant([[True, True, False]])
    expected = np.array([[1, 1, 0],   # position 0 (most recent) reads itself and the older item; not the padding
                         [0, 1, 0],   # position 1 reads itself only: position 0 is more recent
                         [0, 0, 1]],  # padding reads only itself (never read)
                        bool)
    np.testing.assert_array_equal(causal_attention_mask(valid).numpy()[0], expected)


def test_every_position_targets_are_the_next_items():
    targets, where = every_position_targets(tf.constant(HISTORY), tf.constant(LABEL))
    np.testing.assert_array_equal(targets.numpy()[0], [10, 5, 7, 3, 9, 0])
    np.testing.assert_array_equal(where.numpy()[0], [1, 1, 1, 1, 0, 0])
    # Row 2: the OOV item at 1 is neither a position to train (j = 1) nor a target (j = 2).
    np.testing.assert_array_equal(targets.numpy()[2], [13, 12, 1, 6, 0, 0])
    np.testing.assert_array_equal(where.numpy()[2], [1, 0, 0, 0, 0, 0])


def test_a_position_never_reads_more_recent_items(vocabs, monkeypatch):
    """The state at position j depends on the items at j and older, not on the more recent ones (index < j); the
    same check with the causal mask replaced by a padding-only mask fails, so the test sees the mask."""
    model = build_model(sequential_config(), *vocabs)
    changed = HISTORY.copy()
    changed[:, 0] = [13, 13, 13]  # a different most recent item

    def states(history):
        return model.user_tower(batch(history), every_position=True).numpy()

    before, after = states(HISTORY), states(changed)
    np.testing.assert_allclose(after[:, 1:], before[:, 1:], rtol=1e-5, atol=1e-6)
    assert np.abs(after[:, 0] - before[:, 0]).max() > 1e-3
    monkeypatch.setattr(sequence_encoder, "causal_attention_mask",
                        lambda valid: tf.logical_or(valid[:, tf.newaxis, :], tf.eye(tf.shape(valid)[1], dtype=bool)))
    assert np.abs(states(changed)[:, 1:] - states(HISTORY)[:, 1:]).max() > 1e-3


def test_order_matters_and_padding_does_not(vocabs):
    model = build_model(sequential_config(), *vocabs)
    swapped = HISTORY.copy()
    swapped[0, :2] = swapped[0, 1::-1]  # the same items, the two most recent ones swapped
    out, out_swapped = model(batch()).numpy(), model(batch(swapped)).numpy()
    assert np.abs(out[0] - out_swapped[0]).max() > 1e-3  # a mean pooling could not tell these apart
    np.testing.assert_allclose(out[1:], out_swapped[1:], rtol=1e-6)
    shorter = model(batch(HISTORY[:, :4])).numpy()  # the same histories with less padding
    np.testing.assert_allclose(shorter[0], out[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_the_user_vector_is_the_most_recent_state(vocabs):
    model = build_model(sequential_config(), *vocabs)
    every = model.user_tower(batch(), every_position=True).numpy()
    assert every.shape == (3, H, 8)
    np.testing.assert_allclose(model(batch()).numpy(), every[:, 0], rtol=1e-6)
    np.testing.assert_allclose(model.user_vectors(tf.constant([2, 3, 4]), tf.constant(HISTORY)).numpy(), every[:, 0],
                               rtol=1e-6)


# The histories of HISTORY with an unknown item (OOV, 1) in front: an id new since training, below min_item_count.
UNKNOWN_FIRST = np.array([[1, 5, 7, 3, 9, 0], [1, 4, 4, 6, 2, 8], [1, 12, 1, 6, 0, 0]], np.int32)


def test_an_unknown_most_recent_item_reads_the_most_recent_known_state(vocabs):
    """With the most recent item unknown, the user vector is the state at the most recent known item (position 1
    here), not the ``LayerNorm(0)`` of position 0 that every user shared. What holds is the equality with the
    ``every_position`` state at position 1 of the same history with any known item in front (what training scores
    there); it differs from the vector of the history with the unknown item removed only by the position
    embeddings (the unknown item keeps its recency rank): with a constant position table the two are equal."""
    model = build_model(sequential_config(), *vocabs)
    out = model(batch(UNKNOWN_FIRST)).numpy()
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        assert np.abs(out[a] - out[b]).max() > 1e-3  # the bug: three identical vectors
    known_first = UNKNOWN_FIRST.copy()
    known_first[:, 0] = 13
    every = model.user_tower(batch(known_first), every_position=True).numpy()
    np.testing.assert_allclose(out, every[:, 1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.user_vectors(tf.constant([2, 3, 4]), tf.constant(UNKNOWN_FIRST)).numpy(), out,
                               rtol=1e-6)
    removed = np.pad(UNKNOWN_FIRST[:, 1:], [(0, 0), (0, 1)])
    assert np.abs(model(batch(removed)).numpy() - out).max() > 1e-3  # the recency ranks differ by one
    positions = model.user_tower.pooling.positions
    positions.assign(tf.zeros_like(positions))
    np.testing.assert_allclose(model(batch(UNKNOWN_FIRST)).numpy(), model(batch(removed)).numpy(), rtol=1e-5,
                               atol=1e-6)


def test_histories_without_a_known_item_keep_the_empty_history_vector(vocabs):
    """Empty, all-unknown, and known items only past ``max_history`` (cut by the encoder): position 0's state, as
    before the read-out moved (``LayerNorm(0)``, the same for every such user)."""
    model = build_model(sequential_config(), *vocabs)
    empty = np.zeros([3, H], np.int32)
    unknown = np.array([[1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], np.int32)
    beyond = np.pad(np.ones([3, H], np.int32), [(0, 0), (0, 2)], constant_values=5)
    expected = model(batch(empty)).numpy()
    np.testing.assert_allclose(expected, np.repeat(expected[:1], 3, axis=0), rtol=1e-6)
    np.testing.assert_allclose(model.user_tower(batch(empty), every_position=True).numpy()[:, 0], expected, rtol=1e-6)
    for history in (unknown, beyond):
        np.testing.assert_allclose(model(batch(history)).numpy(), expected, rtol=1e-6)


def test_exported_user_tower_reads_past_an_unknown_most_recent_id(vocabs, tmp_path):
    """Through the exported SavedModel (string ids, "" padding, as TF Serving calls it): an id the vocabulary does
    not know in front gives different vectors for different histories, those of the in-memory model."""
    items, users = vocabs
    model = build_model(sequential_config(), items, users)
    export.export_user_tower(model, items, users, tmp_path / "user_tower")
    serve = tf.saved_model.load(str(tmp_path / "user_tower")).signatures[export.SIGNATURE]
    user_ids = ["u0", "u1", "u2", "u3"]
    histories = [["brand-new", "i3", "i5", "i7"], ["brand-new", "i7", "i2", "i9", "i4"], ["brand-new", "i1"],
                 ["brand-new"]]
    padded = [ids + [""] * (H - len(ids)) for ids in histories]
    got = serve(user_id=tf.constant(user_ids), history=tf.constant(padded))["embedding"].numpy()
    indices = np.zeros([len(histories), H], np.int32)
    for row, ids in enumerate(histories):
        indices[row, :len(ids)] = items.lookup(ids)
    assert (indices[:, 0] == 1).all()
    expected = model.user_vectors(tf.constant(users.lookup(user_ids), tf.int32), tf.constant(indices)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    for a, b in [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]:
        assert np.abs(got[a] - got[b]).max() > 1e-3


def test_every_position_loss_matches_numpy_full_softmax(vocabs):
    """The loss is the mean, over every valid position of the batch, of the full softmax cross-entropy of the
    item that followed it (SASRec's per-position objective, with a softmax)."""
    model = build_model(sequential_config(name="full_softmax"), *vocabs)
    assert model.every_position and not model.xla_compatible
    states = model.user_tower(batch(), every_position=True).numpy()
    items = model.item_tower(tf.range(V_ITEMS)).numpy()
    losses = []
    for row in range(len(HISTORY)):
        for j in range(H):
            target = LABEL[row] if j == 0 else HISTORY[row, j - 1]
            if HISTORY[row, j] >= 2 and target >= 2:
                logits = states[row, j] @ items[2:].T / 0.5
                losses.append(np.log(np.exp(logits).sum()) - logits[target - 2])
    assert len(losses) == 4 + 6 + 1
    loss = model.compute_loss(batch(), training=False).numpy()
    np.testing.assert_allclose(loss, np.mean(losses), rtol=1e-5)


def test_every_position_training_reduces_the_loss_with_mixed_negatives(vocabs):
    model = build_model(sequential_config(name="in_batch", num_negatives=4, sampler="uniform"), *vocabs)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05))
    data = tf.data.Dataset.from_tensors(batch()).repeat(30)
    history = model.fit(data, epochs=1, verbose=0).history
    before = build_model(sequential_config(name="in_batch", num_negatives=4, sampler="uniform"), *vocabs)
    assert history["loss"][0] < before.compute_loss(batch(), training=False).numpy()


def test_set_data_falls_back_to_mean_pooling(vocabs):
    model = build_model(sequential_config(), *vocabs, set_data=True)
    assert isinstance(model.user_tower.pooling, MeanPooling) and not model.every_position
    swapped = HISTORY.copy()
    swapped[0, :2] = swapped[0, 1::-1]
    np.testing.assert_allclose(model(batch()).numpy()[0], model(batch(swapped)).numpy()[0], rtol=1e-5)


def test_item_mask_hides_a_seeded_share_of_the_history_in_training_only():
    init = Initializers(3)
    encoder = sequence_encoder.SelfAttentionEncoder(
        SequenceEncoderSettings(40, num_blocks=0, num_heads=1, dropout=0.0, item_mask=0.25, seed=5), init)
    rng = np.random.default_rng(0)
    embeddings = tf.constant(rng.normal(size=(50, 40, 4)), tf.float32)
    valid = tf.ones([50, 40], tf.bool)
    plain = encoder(embeddings, valid, training=False).numpy()
    # With no blocks the state is LayerNorm(sqrt(d) e + p): the masked positions are those of the mask embedding.
    masked_input = tf.fill([50, 40, 4], 0.0) + encoder.mask_embedding
    as_mask = encoder(masked_input, valid, training=False).numpy()
    trained = encoder(embeddings, valid, training=True).numpy()
    hidden = np.all(np.isclose(trained, as_mask, atol=1e-5), axis=-1)
    kept = np.all(np.isclose(trained, plain, atol=1e-5), axis=-1)
    assert (hidden ^ kept).all()  # every position is either the item's or the mask's
    # 2,000 positions at p = 0.25: binomial sd 19.4; 5 sd
    assert abs(int(hidden.sum()) - 500) < 5 * 19.4
    np.testing.assert_allclose(encoder(embeddings, valid).numpy(), plain)  # inference never masks
