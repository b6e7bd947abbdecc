"""``build_model``: a ``TwoTowerModel`` from the model config, the vocabularies and the optional feature tables."""

from __future__ import annotations

from typing import Mapping, Optional

import ml_collections
import numpy as np
import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.config_keys import Settled
from retrieval.data import content
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.models import config as config_lib
from retrieval.models import poolings
from retrieval.models.layers import EmbeddingTable, Initializers
from retrieval.models.layout import two_tower_layout
from retrieval.models.objectives import FullCatalogue, InBatchNegatives, OutputTable, SampledNegatives
from retrieval.models.part_settings import (
    ItemTowerSettings,
    ObjectiveSettings,
    SequenceEncoderSettings,
    UserTowerSettings,
)
from retrieval.models.towers import ItemTower, UserTower
from retrieval.models.two_tower import TwoTowerModel
from retrieval.sampling.frequency import FrequencyEstimator
from retrieval.sampling.samplers import CandidateSampler


def _sampler(settings: ObjectiveSettings, item_vocab: Vocabulary, num_sampled: int) -> CandidateSampler:
    unigrams = item_vocab.counts if settings.sampler == "unigram" else None
    return CandidateSampler(settings.sampler, num_sampled, item_vocab.size, unigrams=unigrams,
                            distortion=settings.distortion, seed=settings.seed)


def _objective(settings: ObjectiveSettings, candidates: tf.keras.layers.Layer,
               item_vocab: Vocabulary) -> tf.keras.layers.Layer:
    """The objective layer of ``settings`` (``ObjectiveSettings``), scoring ``candidates`` (item tower or output
    table): the one layer of its negatives' source (``config.OBJECTIVES``)."""
    s = settings
    if s.source == "full":
        return FullCatalogue(candidates, item_vocab.size, s.temperature, loss=s.name)
    if s.source == "sampled":
        return SampledNegatives(candidates, _sampler(s, item_vocab, s.num_negatives), s.temperature, loss=s.name)
    # The batch as the negatives: in-batch softmax, or a binary objective with negatives="in_batch".
    estimator = None
    if s.log_q == "estimated":
        estimator = FrequencyEstimator(s.estimator_buckets or item_vocab.size, s.estimator_alpha, s.estimator_hashes,
                                       seed=s.seed, name="frequency_estimator")
    # Mixed negatives: at most every item once (a catalogue smaller than the count asked for is drawn whole, so that
    # configs/sequential.py's 2,048 suit any catalogue).
    mixed = min(s.num_negatives, item_vocab.size - NUM_RESERVED)
    sampler = _sampler(s, item_vocab, mixed) if mixed > 0 else None
    return InBatchNegatives(candidates, s.temperature, s.log_q, counts=item_vocab.counts, estimator=estimator,
                            sampler=sampler, loss=s.name)


def build_model(model_config: ml_collections.ConfigDict, item_vocab: Vocabulary, user_vocab: Vocabulary,
                item_features: Optional[Mapping[str, np.ndarray]] = None,
                user_features: Optional[Mapping[str, np.ndarray]] = None,
                inference_history: Optional[int] = None, inference_part_size: int = 0,
                set_data: bool = False) -> TwoTowerModel:
    """Builds the two-tower model described by ``model_config`` (see ``retrieval.models.default_config``).

    The model is composed of parts, each built from its own settings (``part_settings``): the item tower with the
    layout of the vectors it exports (``layout.two_tower_layout``, computed once from the config and the item table),
    or the output table; the history pooling (``poolings.POOLINGS``); the user tower, handed the item tower's shared
    parts; the objective layer of its negatives' source.

    Args:
      model_config: the ``config.model`` section; its keys' rules, the cross-key ones included, are checked first
        (``config.MODEL.check``: ``InputError`` naming the key).
      item_vocab, user_vocab: vocabularies of the training split (sizes, and item counts for samplers / log-Q).
      item_features, user_features: per-index feature tables aligned to the vocabularies, ``{name: array}``:
        integer ``[V]`` categorical, integer ``[V, M]`` multi-valued (0 = padding), float ``[V]``/``[V, k]`` numeric.
      inference_history: the history cap of inference (the model's ``max_history``: validation, export); default
        ``model_config.max_history``, the training cap (the pipeline passes ``inference_history`` for set data).
      inference_part_size: 0, or the size of the parts inference deals a longer history into (the pipeline passes
        it for set data; see ``TwoTowerModel``).
      set_data: the histories are sets (``data.order=none``): a pooling that reads order falls back to "mean"
        (logged; ``poolings.for_data``).

    Returns:
      An uncompiled ``TwoTowerModel`` (``training.fit`` compiles it).
    """
    c = model_config
    config_lib.MODEL.check(c)
    objective = ObjectiveSettings.from_config(c)
    layout = two_tower_layout(Settled({"model": c}, (config_lib.MODEL,)), bool(item_features),
                              content.term_count(item_features) if item_features else None)
    init = Initializers(c.seed)
    item_tower, output_table = None, None
    if objective.output_table:
        output_table = OutputTable(item_vocab.size, c.embedding_dim, init, l2_normalize=c.l2_normalize)
        item_table = output_table.weights_table
    else:
        item_tower = ItemTower(item_vocab.size, ItemTowerSettings.from_config(c), layout, init,
                               features=item_features, warm=item_vocab.warm)
        item_table = item_tower.id_embedding
    history_embedding = (item_table if c.user_tower.share_item_embeddings else
                         EmbeddingTable(item_vocab.size, c.user_tower.history_embedding_dim,
                                        embeddings_initializer=init.embedding(), name="history_emb"))
    pooling = poolings.build(poolings.for_data(c.user_tower.pooling, set_data), SequenceEncoderSettings.from_config(c),
                             init)
    user_tower = UserTower(history_embedding, UserTowerSettings.from_config(c), pooling, init,
                           item_parts=item_tower.shared_parts if item_tower is not None else None,
                           user_vocab_size=user_vocab.size, features=user_features)
    return TwoTowerModel(user_tower, _objective(objective, item_tower or output_table, item_vocab), layout,
                         item_tower=item_tower, output_table=output_table, temperature=c.temperature,
                         max_history=inference_history or c.max_history, inference_part_size=inference_part_size,
                         every_position=pooling.trains_every_position)
