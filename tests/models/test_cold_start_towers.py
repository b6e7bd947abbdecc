"""Towers with item features and cold items: id rows, item-id dropout, history features, the exported item tower."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest
import tensorflow as tf

from retrieval.data.vocab import Vocabulary
from retrieval.models import build_model, default_config
from retrieval.models.layers import ItemIdRows
from tests.models.exported_item_tower import embed_with_exported_item_tower

WARM = 10  # items i0..i9 have interactions; c0..c3 are cold catalogue items


@pytest.fixture(scope="module")
def vocab():
    rng = np.random.default_rng(0)
    warm = Vocabulary.from_ids([f"i{k}" for k in rng.integers(0, WARM, 500)])
    return warm.with_catalogue([f"c{k}" for k in range(4)] + ["i1"])


@pytest.fixture(scope="module")
def item_features(vocab):
    rng = np.random.default_rng(1)
    genres = rng.integers(1, 6, (vocab.size, 2)).astype(np.int32)
    genres[:2] = 0
    return {"genres": genres, "year": rng.normal(size=vocab.size).astype(np.float32)}


def model_of(vocab, item_features, dropout=0.0, content_match=False, l2_normalize=True):
    config = default_config()
    config.embedding_dim = 6
    config.l2_normalize = l2_normalize
    config.item_tower.id_embedding_dim = 6
    config.item_tower.feature_embedding_dim = 3
    config.item_tower.id_dropout = dropout
    config.item_tower.content_match = content_match
    config.user_tower.hidden_units = (8,)
    config.user_tower.use_example_age = False
    users = Vocabulary.from_ids(["u0", "u1"])
    return build_model(config, vocab, users, item_features)


def test_id_rows_send_cold_items_to_the_unknown_row(vocab):
    rows = ItemIdRows(vocab.warm)(tf.range(vocab.size)).numpy()
    assert rows[:2].tolist() == [0, 1]
    assert rows[2:2 + WARM].tolist() == list(range(2, 2 + WARM))
    assert rows[2 + WARM:].tolist() == [1] * 4


def test_item_id_dropout_share_and_what_it_never_touches():
    layer = ItemIdRows(np.ones(1000, bool), dropout=0.3, seed=5)
    indices = tf.constant(np.tile(np.arange(1000), 20), tf.int32)
    rows = layer(indices, training=True).numpy()
    dropped = rows != indices.numpy()
    # 19,960 droppable ids at p = 0.3: binomial sd 65; 5 sd
    assert abs(int(dropped.sum()) - 0.3 * 19_960) < 5 * 65
    assert not dropped[np.isin(indices.numpy(), [0, 1])].any()
    assert (rows[dropped] == 1).all()  # a dropped id reads the unknown-id row
    assert not np.array_equal(rows, layer(indices, training=True).numpy())  # a new draw every call
    assert np.array_equal(layer(indices, training=False).numpy(), indices.numpy())


def test_a_cold_item_is_embedded_from_its_features_alone(vocab, item_features):
    model = model_of(vocab, item_features)
    tower = model.item_tower
    cold = tf.constant([2 + WARM, 3 + WARM])
    by_index = tower(cold).numpy()
    through_oov = tower.encode(tf.constant([1, 1]), tower.features(cold)).numpy()
    np.testing.assert_allclose(by_index, through_oov, rtol=1e-6)
    assert not np.allclose(by_index[0], by_index[1])  # different features, different vectors


def test_history_items_add_their_features_so_a_cold_item_moves_the_user(vocab, item_features):
    model = model_of(vocab, item_features)
    base = tf.constant([[2, 3, 0, 0]])
    with_cold = tf.constant([[2, 3, 2 + WARM, 0]])
    with_other_cold = tf.constant([[2, 3, 3 + WARM, 0]])
    user = tf.constant([2])
    vectors = [model.user_vectors(user, history).numpy() for history in (base, with_cold, with_other_cold)]
    assert not np.allclose(vectors[0], vectors[1])
    assert not np.allclose(vectors[1], vectors[2])


HISTORIES = {"user": tf.constant([2, 3, 2]), "history": tf.constant([[3, 2 + WARM, 7, 0], [5, 5, 2, 0], [9, 4, 3, 6]])}


def user_vectors_and_gradients(model, training: bool) -> tuple[np.ndarray, list]:
    """The user tower's vectors of :data:`HISTORIES` and the gradient of a fixed function of them for every weight
    (the same id-dropout draws on every call: TensorFlow's seed is set first)."""
    tf.random.set_seed(0)
    with tf.GradientTape() as tape:
        out = model.user_tower(HISTORIES, training=training)
        loss = tf.reduce_sum(tf.sin(3.0 * out))
    gradients = tape.gradient(loss, model.user_tower.trainable_variables)
    return out.numpy(), [None if g is None else tf.convert_to_tensor(g).numpy() for g in gradients]


def assert_same_vectors_and_gradients(first: tuple, second: tuple) -> None:
    np.testing.assert_allclose(first[0], second[0], rtol=1e-5, atol=1e-6)
    assert len(first[1]) == len(second[1]) > 0
    for one, other in zip(first[1], second[1], strict=True):
        assert (one is None) == (other is None)
        if one is not None:
            np.testing.assert_allclose(one, other, rtol=1e-4, atol=1e-6)
    assert sum(g is not None and np.abs(g).sum() > 0 for g in first[1]) >= 3  # the feature tables' included


@pytest.mark.parametrize("content_match", [False, True])
def test_training_encodes_each_items_features_once_with_the_same_values_and_gradients(vocab, item_features,
                                                                                     monkeypatch, content_match):
    """In training the history's item features are encoded once per vocabulary row and gathered
    (``towers.ENCODE_EVERY_ITEM_ROWS``): the user vectors and every gradient equal those of encoding each slot."""
    from retrieval.models import towers

    model = model_of(vocab, item_features, content_match=content_match, l2_normalize=False)
    per_item = user_vectors_and_gradients(model, training=True)
    monkeypatch.setattr(towers, "ENCODE_EVERY_ITEM_ROWS", 0)
    assert_same_vectors_and_gradients(per_item, user_vectors_and_gradients(model, training=True))


@pytest.mark.parametrize("content_match", [False, True])
@pytest.mark.parametrize("training", [True, False])
def test_the_mean_pooling_pools_the_features_first_with_the_same_values_and_gradients(vocab, item_features,
                                                                                      monkeypatch, content_match,
                                                                                      training):
    """``UserTower.pool_features_first``: the mean of the history's ``E[row] + P f`` is ``mean(E[row]) + P mean(f)``
    (and the content-match term ``W mean(f)``), so mapping the pooled features once per user gives the user vectors
    and every gradient of mapping each slot's and pooling after."""
    from retrieval.models import towers

    model = model_of(vocab, item_features, content_match=content_match, l2_normalize=False)
    pooled_first = user_vectors_and_gradients(model, training)
    monkeypatch.setattr(towers.UserTower, "pool_features_first", False)
    assert_same_vectors_and_gradients(pooled_first, user_vectors_and_gradients(model, training))


def test_dropout_acts_in_training_only(vocab, item_features):
    model = model_of(vocab, item_features, dropout=0.9)
    items = tf.constant(np.arange(2, 2 + WARM), tf.int32)
    inference = model.item_tower(items).numpy()
    np.testing.assert_array_equal(inference, model.item_tower(items, training=False).numpy())
    assert not np.allclose(inference, model.item_tower(items, training=True).numpy())


def test_the_content_match_term_adds_the_same_map_of_item_and_mean_history_features(vocab, item_features):
    model = model_of(vocab, item_features, content_match=True, l2_normalize=False)
    items, users = model.item_tower, model.user_tower
    assert users.content_projection is items.content_projection  # one W, shared
    indices = tf.constant([2, 5, 2 + WARM], tf.int32)  # warm and cold
    vectors = items(indices).numpy()
    w = items.content_projection.kernel.numpy()  # [feature width, d]
    features = items.features(indices).numpy()
    mlp_only = items.mlp(tf.concat([items.id_embedding(items.id_rows(indices)), features], axis=-1)).numpy()
    np.testing.assert_allclose(vectors, mlp_only + features @ w, rtol=1e-5, atol=1e-6)

    history, user = tf.constant([[3, 2 + WARM, 7, 0, 0]]), tf.constant([2])
    with_term = model.user_vectors(user, history).numpy()
    users.content_projection = None
    try:
        without = model.user_vectors(user, history).numpy()
    finally:
        users.content_projection = items.content_projection
    mean_features = items.features(tf.constant([3, 2 + WARM, 7])).numpy().mean(axis=0)  # padding left out
    np.testing.assert_allclose(with_term - without, (mean_features @ w)[None], rtol=1e-5, atol=1e-6)


def test_the_content_match_term_needs_a_pooled_history():
    from configs.catalogue import get_config
    from retrieval.jobs.config_checks import config_problems

    config = get_config()
    config.model.item_tower.content_match = True
    assert not [key for key, _ in config_problems(config) if key == "model.item_tower.content_match"]
    config.model.user_tower.pooling = "self_attention"
    assert any(key == "model.item_tower.content_match" for key, _ in config_problems(config))


@pytest.mark.parametrize("content_match", [False, True])
def test_the_exported_item_tower_reproduces_the_catalogue_vectors(vocab, item_features, tmp_path, content_match):
    model = model_of(vocab, item_features, dropout=0.3, content_match=content_match)
    expected = model.catalogue_vectors()
    got = embed_with_exported_item_tower(model, vocab, item_features, tmp_path / "item_tower")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    unknown = embed_with_exported_item_tower(model, vocab, item_features, tmp_path / "again", ids=["never-seen"],
                                             rows=slice(-1, None))
    np.testing.assert_allclose(unknown, expected[-1:], rtol=1e-5, atol=1e-6)  # the last row is cold: OOV row too


def in_batch_softmax_reference(queries: np.ndarray, items: np.ndarray, temperature: float) -> np.ndarray:
    """Per-example in-batch softmax cross entropy (distinct labels: the positive of row b is column b), in NumPy."""
    logits = queries @ items.T / temperature
    logits -= logits.max(axis=1, keepdims=True)
    return -(np.diag(logits) - np.log(np.exp(logits).sum(axis=1)))


def test_the_cold_head_scores_items_placed_by_features_with_a_second_user_vector(vocab, item_features, tmp_path):
    config = default_config()
    config.embedding_dim = 6
    config.item_tower.update({"id_embedding_dim": 6, "feature_embedding_dim": 3, "id_dropout": 0.3,
                              "cold_head": True, "content_match": True})
    config.user_tower.update({"hidden_units": (8,), "use_example_age": False})
    model = build_model(config, vocab, Vocabulary.from_ids(["u0", "u1"]), item_features)
    assert model.metric == "ip"
    items = model.catalogue_vectors()
    cold = ~vocab.warm[2:]
    assert items.shape[1] == 12
    assert not items[~cold, 6:].any() and not items[cold, :6].any()  # [v, 0] by id, [0, v] by features alone
    np.testing.assert_allclose(np.linalg.norm(items, axis=1), 1.0, rtol=1e-5)
    users = model.user_vectors(tf.constant([2, 3]), tf.constant([[3, 5, 12], [7, 0, 0]])).numpy()
    np.testing.assert_allclose(np.linalg.norm(users[:, :6], axis=1), 1.0, rtol=1e-5)  # each head a unit vector
    np.testing.assert_allclose(np.linalg.norm(users[:, 6:], axis=1), 1.0, rtol=1e-5)
    scores = users @ items.T
    np.testing.assert_allclose(scores[:, ~cold], users[:, :6] @ items[~cold, :6].T, rtol=1e-5)
    np.testing.assert_allclose(scores[:, cold], users[:, 6:] @ items[cold, 6:].T, rtol=1e-5)
    # In training a dropped id moves its item to the second block, as a cold item's.
    tower = model.item_tower
    dropped = tower.encode(tf.ones([1], tf.int32), tower.features(tf.constant([3]))).numpy()
    assert not dropped[:, :6].any() and dropped[:, 6:].any()
    # The exported item tower places new items in the second block too.
    got = embed_with_exported_item_tower(model, vocab, item_features, tmp_path / "item_tower")
    np.testing.assert_allclose(got, items, rtol=1e-5, atol=1e-6)
    # Every item placed by its features alone (the folded item-to-item view's second placement): what the exported
    # tower gives the same features under an id it does not know; a cold item's own vector.
    placed = model.catalogue_vectors(placed_by_features=True)
    as_new = embed_with_exported_item_tower(model, vocab, item_features, tmp_path / "again",
                                            ids=np.full(vocab.size - 2, ""))
    np.testing.assert_allclose(placed, as_new, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(placed[cold], items[cold])
    assert not placed[:, :6].any() and placed[~cold, 6:].any()


def test_the_cold_head_needs_id_dropout():
    from configs.catalogue import get_config
    from retrieval.jobs.config_checks import config_problems

    config = get_config()
    config.model.item_tower.cold_head = True
    assert not [key for key, _ in config_problems(config) if key == "model.item_tower.cold_head"]
    config.model.item_tower.id_dropout = 0.0
    assert any(key == "model.item_tower.cold_head" for key, _ in config_problems(config))
