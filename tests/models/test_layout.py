"""The exported vectors' width computed without TensorFlow (``retrieval.models.layout``) is the one the built towers
export, for every layout: one id block, the cold head's two, content coordinates (capped by the catalogue's terms),
the output table's bias; the up-front index check reads it."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest

from retrieval.data import content
from retrieval.data.vocab import Vocabulary
from retrieval.errors import InputError
from retrieval.jobs import config_checks
from retrieval.models import build_model, default_config
from retrieval.models.layout import ScoreLayout, score_layout

FEATURES = "genres:multi,year:numeric"


@pytest.fixture(scope="module")
def catalogue():
    rng = np.random.default_rng(0)
    vocab = Vocabulary.from_ids([f"i{k}" for k in rng.integers(0, 10, 300)]).with_catalogue(["c0", "c1", "c2"])
    genres = rng.integers(1, 6, (vocab.size, 2)).astype(np.int32)
    genres[:2] = 0
    return vocab, {"genres": genres, "year": rng.normal(size=vocab.size).astype(np.float32)}


@pytest.mark.parametrize("changes,features,expected", [
    ({}, "", ScoreLayout(8, normalized=True)),
    ({}, FEATURES, ScoreLayout(8, normalized=True)),
    ({"l2_normalize": False}, "", ScoreLayout(8)),
    ({"item_tower.cold_head": True}, FEATURES, ScoreLayout(8, heads=2, normalized=True)),
    ({"item_tower.cold_head": True}, "", ScoreLayout(8, normalized=True)),  # no item table: no cold items, one block
    ({"item_tower.cold_head": True, "item_tower.content_profile_weight": 0.5, "item_tower.content_profile_dim": 4},
     FEATURES, ScoreLayout(8, heads=2, content_width=4, normalized=True)),
    ({"item_tower.cold_head": True, "item_tower.content_profile_weight": 0.5, "item_tower.content_profile_dim": 64},
     FEATURES, "capped"),  # more coordinates asked for than the catalogue has terms: all its terms
    ({"objective.name": "sampled_softmax", "objective.num_negatives": 4, "objective.output_table": True}, "",
     ScoreLayout(8, bias=True, normalized=True)),
])
def test_the_layout_is_the_width_the_towers_export(catalogue, changes, features, expected):
    vocab, tables = catalogue
    config = default_config()
    config.embedding_dim = 8
    config.user_tower.use_example_age = False
    for key, value in changes.items():
        section, _, name = key.rpartition(".")
        setattr(config[section] if section else config, name, value)
    terms = sum(block.width for block in content.layout(tables))
    assert 4 < terms < 64
    if expected == "capped":
        expected = ScoreLayout(8, heads=2, content_width=terms, normalized=True)
    flat = config_checks.Settled({"model": config.to_dict(), "data": {"item_features": features}})
    layout = score_layout(flat, terms)
    assert layout == expected
    if config.objective.output_table:  # its sampler draws from the items' counts: no never-clicked items
        vocab = Vocabulary.from_ids([f"i{k}" for k in range(10)])
    model = build_model(config, vocab, Vocabulary.from_ids(["u0", "u1"]), tables if features else None)
    assert model.catalogue_vectors().shape[1] == layout.dimension
    assert model.metric == layout.metric == ("cosine" if config.l2_normalize and layout.one_block else "ip")
    if expected.content_width:  # before the data is known: the content width at its most
        assert score_layout(flat).content_width == config.item_tower.content_profile_dim


def test_the_index_check_refuses_a_factory_at_the_catalogue_configs_width_before_training():
    """configs/catalogue.py exports 2 x 128 + the content coordinates: PQ128 cannot split that, though it splits 128."""
    from configs.catalogue import get_config

    config = get_config()
    config.data.item_features = FEATURES
    config.index.factory = "PQ128"
    flat = config_checks.Settled(config)
    width = score_layout(flat).dimension
    assert width == 2 * config.model.embedding_dim + config.model.item_tower.content_profile_dim
    problems = list(config_checks._index_factory(flat))
    assert problems and problems[0][0] == "index.factory" and f"dimension {width}" in problems[0][1]
    config.data.item_features = ""  # no item table: one block of 128, which PQ128 splits
    assert not list(config_checks._index_factory(config_checks.Settled(config)))
    config.data.item_features = FEATURES  # after prepare: the catalogue's 6 terms give 2 x 128 + 6 = 262
    config.index.factory = "PQ131"
    assert not list(config_checks._index_factory(config_checks.Settled(config), content_terms=6))
    with pytest.raises(InputError, match="dimension 258"):
        config_checks.check_index(config, 10_000, content_terms=2)
