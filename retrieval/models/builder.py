"""``build_model``: a ``TwoTowerModel`` from the model config, the vocabularies and the optional feature tables."""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

import ml_collections
import numpy as np
import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.data.vocab import Vocabulary
from retrieval.errors import InputError
from retrieval.models import config as config_lib
from retrieval.models.layers import EmbeddingTable, Initializers
from retrieval.models.objectives import FullCatalogue, InBatchNegatives, OutputTable, SampledNegatives
from retrieval.models.sequence_encoder import SelfAttentionEncoder
from retrieval.models.tower_settings import ItemTowerSettings, UserTowerSettings
from retrieval.models.towers import ItemTower, UserTower
from retrieval.models.two_tower import TwoTowerModel
from retrieval.sampling.frequency import FrequencyEstimator
from retrieval.sampling.samplers import CandidateSampler


def _check_choice(value: str, choices: Iterable[str], field: str) -> None:
    if value not in choices:
        raise InputError(f"{value!r} is not one of {tuple(choices)}", field=field)


def _sampler(config: ml_collections.ConfigDict, item_vocab: Vocabulary) -> CandidateSampler:
    objective = config.objective
    unigrams = item_vocab.counts if objective.sampler == "unigram" else None
    return CandidateSampler(objective.sampler, objective.num_negatives, item_vocab.size, unigrams=unigrams,
                            distortion=objective.distortion, seed=config.seed)


def _objective(config: ml_collections.ConfigDict, candidates: tf.keras.layers.Layer,
               item_vocab: Vocabulary) -> tf.keras.layers.Layer:
    """The objective layer named by ``config.objective.name``, scoring ``candidates`` (item tower or output table):
    the one layer of its negatives' source (``config.OBJECTIVES``)."""
    objective = config.objective
    source = config_lib.negatives_of(objective.name, objective.negatives)
    if source == "full":
        return FullCatalogue(candidates, item_vocab.size, config.temperature, loss=objective.name)
    if source == "sampled":
        if objective.num_negatives < 1:
            raise InputError(f"{objective.name} with sampled negatives needs num_negatives >= 1",
                             field="model.objective.num_negatives")
        return SampledNegatives(candidates, _sampler(config, item_vocab), config.temperature, loss=objective.name)
    # The batch as the negatives: in-batch softmax, or a binary objective with negatives="in_batch".
    _check_choice(objective.log_q, config_lib.LOG_Q_MODES, "model.objective.log_q")
    log_q = objective.log_q if config_lib.OBJECTIVES[objective.name].log_q else "none"  # NEG has no correction
    estimator = None
    if log_q == "estimated":
        estimator = FrequencyEstimator(objective.estimator_buckets or item_vocab.size,
                                                objective.estimator_alpha, objective.estimator_hashes,
                                                seed=config.seed, name="frequency_estimator")
    sampler = _sampler(config, item_vocab) if objective.num_negatives > 0 else None
    return InBatchNegatives(candidates, config.temperature, log_q, counts=item_vocab.counts, estimator=estimator,
                            sampler=sampler, loss=objective.name)


def build_model(model_config: ml_collections.ConfigDict, item_vocab: Vocabulary, user_vocab: Vocabulary,
                item_features: Optional[Mapping[str, np.ndarray]] = None,
                user_features: Optional[Mapping[str, np.ndarray]] = None,
                inference_history: Optional[int] = None, inference_part_size: int = 0,
                set_data: bool = False) -> TwoTowerModel:
    """Builds the two-tower model described by ``model_config`` (see ``retrieval.models.default_config``).

    Args:
      model_config: the ``config.model`` section.
      item_vocab, user_vocab: vocabularies of the training split (sizes, and item counts for samplers / log-Q).
      item_features, user_features: per-index feature tables aligned to the vocabularies, ``{name: array}``:
        integer ``[V]`` categorical, integer ``[V, M]`` multi-valued (0 = padding), float ``[V]``/``[V, k]`` numeric.
      inference_history: the history cap of inference (the model's ``max_history``: validation, export); default
        ``model_config.max_history``, the training cap (the pipeline passes ``inference_history`` for set data).
      inference_part_size: 0, or the size of the parts inference deals a longer history into (the pipeline passes
        it for set data; see ``TwoTowerModel``).
      set_data: the histories are sets (``data.order=none``): pooling "self_attention", which reads order, falls
        back to "mean" (logged).

    Returns:
      An uncompiled ``TwoTowerModel`` (``training.fit`` compiles it).
    """
    c = model_config
    _check_choice(c.user_tower.pooling, config_lib.POOLINGS, "model.user_tower.pooling")
    if c.temperature <= 0:
        raise InputError(f"temperature must be positive, got {c.temperature}", field="model.temperature")
    _check_choice(c.objective.name, config_lib.OBJECTIVES, "model.objective.name")
    _check_choice(c.objective.sampler, config_lib.SAMPLERS, "model.objective.sampler")
    _check_choice(c.objective.negatives, config_lib.NEGATIVES, "model.objective.negatives")
    if c.objective.output_table and not config_lib.samples_negatives(c.objective.name, c.objective.negatives):
        raise InputError("output_table is the YoutubeDNN output layer of an objective with sampled negatives; use "
                         f"{config_lib.sampled_objectives()}", field="model.objective.output_table")
    user_settings = UserTowerSettings.from_config(c, set_data)
    init = Initializers(c.seed)
    item_tower, output_table = None, None
    if c.objective.output_table:
        output_table = OutputTable(item_vocab.size, c.embedding_dim, init, l2_normalize=c.l2_normalize)
        item_table = output_table.weights_table
    else:
        item_tower = ItemTower(item_vocab.size, ItemTowerSettings.from_config(c), init, features=item_features,
                               warm=item_vocab.warm)
        item_table = item_tower.id_embedding
    history_embedding = (item_table if c.user_tower.share_item_embeddings else
                         EmbeddingTable(item_vocab.size, c.user_tower.history_embedding_dim,
                                        embeddings_initializer=init.embedding(), name="history_emb"))
    sequence_encoder = None
    if user_settings.pooling == "self_attention":
        s = c.user_tower.sequence
        sequence_encoder = SelfAttentionEncoder(c.max_history, s.num_blocks, s.num_heads, s.dropout, init,
                                                item_mask=s.item_mask, seed=c.seed)
    user_tower = UserTower(history_embedding, user_settings, init,
                           item_parts=item_tower.shared_parts if item_tower is not None else None,
                           user_vocab_size=user_vocab.size, features=user_features, sequence_encoder=sequence_encoder)
    objective = _objective(c, item_tower or output_table, item_vocab)
    return TwoTowerModel(user_tower, objective, item_tower=item_tower, output_table=output_table,
                         temperature=c.temperature, max_history=inference_history or c.max_history,
                         inference_part_size=inference_part_size,
                         every_position=sequence_encoder is not None and c.user_tower.sequence.every_position)
