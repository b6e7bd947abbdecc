"""The popularity prior (``retrieval.models.popularity_prior``): the exported inner product is the towers' score plus
``T beta log(1 + c_i)`` (a NumPy reference), 0 at ``beta`` 0; its tuning keeps the best grid value; it applies to
ID-only item towers, where every item's count is known."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest
import tensorflow as tf

from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.jobs import config_checks
from retrieval.models import build_model, default_config
from retrieval.models.popularity_prior import BETAS, PopularityPrior, tune


@pytest.fixture(scope="module")
def model_and_counts():
    rng = np.random.default_rng(0)
    items = Vocabulary.from_ids([f"i{k}" for k in rng.zipf(1.5, 400) % 30])
    config = default_config()
    config.embedding_dim, config.temperature, config.popularity_prior = 8, 0.1, True
    config.user_tower.use_example_age = False
    return build_model(config, items, Vocabulary.from_ids(["u0", "u1", "u2"])), items.counts


def test_the_exported_score_is_the_towers_plus_the_prior(model_and_counts):
    model, counts = model_and_counts
    users, history = tf.constant([2, 3, 4]), tf.constant([[2, 3, 0], [4, 0, 0], [5, 6, 7]])
    indices = tf.range(NUM_RESERVED, len(counts))
    towers = model.user_tower({"user": users, "history": history}).numpy() @ model.item_tower(indices).numpy().T
    assert model.metric == "ip"
    for beta in (0.0, 0.3):
        model.popularity_prior.beta.assign(beta)
        scores = model.user_vectors(users, history).numpy() @ model.item_vectors(indices).numpy().T
        expected = towers + 0.1 * beta * np.log1p(counts[NUM_RESERVED:].astype(np.float64))[None, :]
        np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)
    model.popularity_prior.beta.assign(0.0)
    assert counts[NUM_RESERVED:].min() >= 1 and np.ptp(counts[NUM_RESERVED:]) > 5  # the prior does vary


def test_tune_keeps_the_best_value_and_the_first_of_a_tie():
    prior = PopularityPrior(np.array([0, 0, 3, 1]), temperature=0.1)
    peak = {0.0: 0.10, 0.05: 0.11, 0.1: 0.12, 0.2: 0.12, 0.3: 0.09, 0.5: 0.05}
    read = []

    def evaluate():
        read.append(float(prior.beta.numpy()))
        return {"ndcg@20": peak[round(read[-1], 2)], "recall@20": 0.2}

    beta, points = tune(prior, evaluate, "ndcg@20")
    assert beta == 0.1 and float(prior.beta.numpy()) == pytest.approx(0.1)
    assert [point["beta"] for point in points] == list(BETAS) and len(read) == len(BETAS)
    assert points[2] == {"beta": 0.1, "ndcg@20": 0.12, "recall@20": 0.2}


def test_the_prior_applies_to_id_only_item_towers_and_nowhere_else():
    """With item features (an item a catalogue refresh adds has no count) or the output table (a per-item bias of its
    own) the towers get no prior, and the layout the up-front index check reads says so."""
    from configs.two_tower import get_config
    from retrieval.models.layout import score_layout

    items = Vocabulary.from_ids([f"i{k}" for k in range(10)] * 2)
    genres = np.arange(items.size, dtype=np.int32)[:, None] % 3 + 1
    cases = [({}, None, True), ({"data.item_features": "genres:multi"}, {"genres": genres}, False),
             ({"model.objective.name": "sampled_softmax", "model.objective.num_negatives": 4,
               "model.objective.output_table": True}, None, False)]
    for changes, tables, applies in cases:
        config = get_config()
        config.model.popularity_prior = True
        config.model.user_tower.use_example_age = False
        for key, value in changes.items():
            section, _, name = key.rpartition(".")
            node = config
            for part in section.split("."):
                node = node[part]
            setattr(node, name, value)
        layout = score_layout(config_checks.Settled(config))
        model = build_model(config.model, items, Vocabulary.from_ids(["u0"]), tables)
        assert (model.popularity_prior is not None) == applies
        assert layout.bias == (applies or bool(config.model.objective.output_table))
        assert model.catalogue_vectors().shape[1] == layout.dimension
