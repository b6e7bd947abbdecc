"""The history poolings' registry (``retrieval/models/poolings``): every registered pooling builds from its module,
the key's rule and meaning follow the registry, and a pooling added as a module plus one registry line is what the
builder's call and the user tower use."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from retrieval.data.vocab import Vocabulary
from retrieval.models import build_model, default_config, poolings
from retrieval.models import config as config_lib
from retrieval.models.layers import Initializers
from retrieval.models.part_settings import SequenceEncoderSettings, UserTowerSettings
from retrieval.models.poolings.base import HistoryPooling
from retrieval.models.towers import UserTower

HISTORY = np.array([[3, 4, 5, 0], [6, 0, 0, 0], [7, 8, 1, 9]], np.int32)


@pytest.mark.parametrize("name", list(poolings.POOLINGS))
def test_every_registered_pooling_builds_from_its_module_and_pools_to_the_towers_width(name):
    layer = poolings.build(name, SequenceEncoderSettings(4), Initializers(0))
    assert isinstance(layer, HistoryPooling)
    config = default_config()
    config.embedding_dim = 8
    config.user_tower.use_example_age = False
    config.user_tower.pooling = name
    model = build_model(config, Vocabulary.from_ids([f"i{k}" for k in range(10)]), Vocabulary.from_ids(["u0"]))
    assert type(model.user_tower.pooling) is type(layer)
    vectors = model({"user": tf.constant([2, 2, 2]), "history": tf.constant(HISTORY)}).numpy()
    assert vectors.shape == (3, 8) and np.isfinite(vectors).all()
    assert model.every_position == (name == "self_attention")


def test_the_pooling_key_takes_its_choices_and_meaning_from_the_registry():
    key = next(key for key in config_lib.MODEL.keys if key.name == "user_tower.pooling")
    assert key.rule.choices == tuple(poolings.POOLINGS)
    assert all(f'"{name}" ({pooling.meaning})' in key.doc for name, pooling in poolings.POOLINGS.items())


class _LastItem(HistoryPooling):
    """A toy pooling: the most recent item's embedding."""

    def call(self, watched, mask, training=None, every_position=False, chunked=False):
        return watched[:, 0]


@pytest.fixture
def last_item_pooling(monkeypatch):
    """Pooling "last_item" registered as a new one is: a module of the package and one line in the registry."""
    module = types.ModuleType(f"{poolings.__name__}.last_item")
    module.build = lambda settings, init: _LastItem(name="last_item")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(poolings.POOLINGS, "last_item", poolings.Pooling("the most recent item", reads_order=True))
    return "last_item"


def test_a_pooling_added_as_a_module_and_a_registry_line_is_built_and_used_by_the_user_tower(last_item_pooling):
    layer = poolings.build(poolings.for_data(last_item_pooling, set_data=False), SequenceEncoderSettings(4),
                           Initializers(0))
    table = tf.keras.layers.Embedding(10, 4, embeddings_initializer="uniform")
    tower = UserTower(table, UserTowerSettings(4), layer, Initializers(0))
    out = tower({"user": tf.constant([0, 0, 0]), "history": tf.constant(HISTORY)}).numpy()
    expected = tower.mlp(table(tf.constant(HISTORY[:, 0]))).numpy()
    np.testing.assert_allclose(out, expected / np.linalg.norm(expected, axis=1, keepdims=True) if tower.l2_normalize
                               else expected, rtol=1e-5, atol=1e-6)


def test_a_pooling_that_reads_the_order_falls_back_to_the_mean_on_set_data(last_item_pooling, caplog):
    assert poolings.for_data(last_item_pooling, set_data=True) == "mean"
    assert "reads the order of a sequence" in caplog.text
    assert poolings.for_data("attention", set_data=True) == "attention"
