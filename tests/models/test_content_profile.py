"""Content-profile coordinates (``retrieval.models.content_profile``): the projected TF-IDF vectors against NumPy, and
the cold head's score plus g times the content baseline's cosine for the items placed by their features, in training
too."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest
import tensorflow as tf

from retrieval.data import content
from retrieval.data.vocab import Vocabulary
from retrieval.evaluation import cold_items
from retrieval.evaluation import csr as csr_lib
from retrieval.jobs.config_checks import config_problems
from retrieval.models import build_model, default_config
from retrieval.models.content_profile import ContentProfile
from tests.models.exported_item_tower import embed_with_exported_item_tower

WARM = 10  # items i0..i9 have interactions; c0..c3 are cold catalogue items
DIM = 6


@pytest.fixture(scope="module")
def vocab():
    rng = np.random.default_rng(0)
    warm = Vocabulary.from_ids([f"i{k}" for k in rng.integers(0, WARM, 500)])
    return warm.with_catalogue([f"c{k}" for k in range(4)])


@pytest.fixture(scope="module")
def item_features(vocab):
    rng = np.random.default_rng(1)
    genres = rng.integers(0, 6, (vocab.size, 3)).astype(np.int32)  # 0 missing; repeated codes in a row happen
    genres[:2] = 0
    genres[5] = [2, 2, 4]
    title = rng.integers(0, 9, (vocab.size, 4)).astype(np.int32)
    title[:2] = 0
    kind = rng.integers(1, 4, vocab.size).astype(np.int32)
    kind[:2] = 0
    return {"genres": genres, "title": title, "kind": kind, "year": rng.normal(size=vocab.size).astype(np.float32)}


def model_of(vocab, item_features, weight, dim=64, l2_normalize=True):
    config = default_config()
    config.embedding_dim = DIM
    config.l2_normalize = l2_normalize
    config.item_tower.update({"id_embedding_dim": DIM, "feature_embedding_dim": 3, "id_dropout": 0.3,
                              "cold_head": True, "content_profile_weight": weight, "content_profile_dim": dim})
    config.user_tower.update({"hidden_units": (8,), "use_example_age": False})
    return build_model(config, vocab, Vocabulary.from_ids(["u0", "u1"]), item_features)


@pytest.mark.parametrize("dim", [64, 5])
def test_the_coordinates_are_the_projected_tf_idf_vectors(item_features, dim):
    layer = ContentProfile(item_features, dim, weight=4.0, seed=0)
    vectors = content.content_vectors(item_features)
    basis = content.projection(vectors, dim, seed=0)
    expected = vectors.toarray() @ basis
    assert layer.dim == min(dim, vectors.shape[1])
    np.testing.assert_allclose(layer.encode(item_features).numpy(), expected, atol=1e-5)  # from the codes, in TF
    np.testing.assert_allclose(layer.catalogue.numpy(), expected, atol=1e-5)
    rows = tf.constant([3, 5, 0])
    np.testing.assert_allclose(layer.lookup(rows).numpy(), 2.0 * expected[[3, 5, 0]], atol=1e-5)
    if dim >= vectors.shape[1]:  # all terms kept: the coordinates' dot products are the content cosines
        unit = expected[2:]
        np.testing.assert_allclose(unit @ unit.T, (vectors[2:] @ vectors[2:].T).toarray(), atol=1e-5)


def test_numeric_features_of_several_columns_are_binned_in_the_graph_as_in_numpy():
    rng = np.random.default_rng(4)
    tables = {"size": rng.normal(size=(40, 2)).astype(np.float32), "kind": rng.integers(0, 3, 40).astype(np.int32)}
    tables["size"][3] = 0.0  # missing: no term
    layer = ContentProfile(tables, 64, weight=1.0)
    vectors = content.content_vectors(tables)
    np.testing.assert_allclose(layer.encode(tables).numpy(), vectors.toarray() @ content.projection(vectors, 64),
                               atol=1e-5)


def test_the_exported_item_tower_computes_the_coordinates_from_coded_values(vocab, item_features, tmp_path):
    model = model_of(vocab, item_features, 0.5, dim=5)
    expected = model.catalogue_vectors()  # (builds the towers)
    got = embed_with_exported_item_tower(model, vocab, item_features, tmp_path / "item_tower")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_a_set_models_mean_of_parts_keeps_each_part_of_the_vector_normalised(vocab, item_features):
    model = model_of(vocab, item_features, 0.25)
    model.inference_part_size = 2
    users = model.user_vectors(tf.constant([2]), tf.constant([[3, 5, 12, 7, 9]])).numpy()
    for head in (users[:, :DIM], users[:, DIM:2 * DIM]):
        np.testing.assert_allclose(np.linalg.norm(head, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(users[:, 2 * DIM:], axis=1), 0.5, rtol=1e-5)


def test_the_content_profile_needs_the_cold_head_a_pooled_history_and_the_item_tower():
    from configs.catalogue import get_config

    config = get_config()
    config.model.item_tower.content_profile_weight = 0.3
    assert not [key for key, _ in config_problems(config) if key == "model.item_tower.content_profile_weight"]
    config.model.item_tower.cold_head = False
    assert [message for key, message in config_problems(config)
            if key == "model.item_tower.content_profile_weight"] == [
        "the content profile is the cold head's term: it needs model.item_tower.cold_head"]
    config.model.item_tower.cold_head = True
    config.model.user_tower.pooling = "self_attention"
    config.model.item_tower.content_match = False
    assert any(key == "model.item_tower.content_profile_weight" for key, _ in config_problems(config))
    config.model.user_tower.pooling = "mean"
    config.model.objective.update({"name": "sampled_softmax", "output_table": True})
    assert any(key == "model.item_tower.content_profile_weight" for key, _ in config_problems(config))


def test_the_term_is_the_cold_blocks_and_trains_with_it(vocab, item_features):
    model = model_of(vocab, item_features, 0.7)
    assert model.metric == "ip"
    histories = np.array([[3, 5, 12, 0], [7, 13, 0, 0], [4, 9, 11, 0]], np.int32)
    users = model.user_vectors(tf.constant([2, 3, 1]), tf.constant(histories)).numpy()
    items = model.catalogue_vectors()
    cold = ~vocab.warm[2:]
    train = csr_lib.from_pairs(np.repeat(np.arange(3), 4)[histories.ravel() >= 2], histories.ravel()[
        histories.ravel() >= 2], 3)
    baseline = cold_items.content_scorer(content.content_vectors(item_features), train,
                                         np.arange(vocab.size))(np.arange(3))[:, 2:]
    heads = users[:, :2 * DIM] @ items[:, :2 * DIM].T
    np.testing.assert_allclose(users @ items.T - heads, 0.7 * baseline * cold, atol=1e-5)  # warm items: + 0
    exported = model.item_vectors(tf.constant([12, 13])).numpy()  # cold items: id row OOV, content intact
    np.testing.assert_allclose(exported, items[10:12], rtol=1e-6)
    # In training too, every item placed by its features (12 is cold; a dropped id) carries the term, no other.
    trained = model.item_tower(tf.constant(np.tile(np.arange(2, vocab.size), 20)), training=True).numpy()
    by_features = ~trained[:, :DIM].any(axis=1)
    assert 0 < by_features.sum() < len(trained)
    np.testing.assert_array_equal(trained[:, 2 * DIM:].any(axis=1), by_features)
    assert model({"user": tf.constant([2]), "history": tf.constant(histories[:1])}, training=True).numpy()[
        :, 2 * DIM:].any()
