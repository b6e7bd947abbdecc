"""The model's parts' settings: the scalar options of the item tower, the user tower, the sequence encoder and the
objective, one typed value each, read from the model config section.

Why: the towers used to take every option as a keyword of their own (16 and 20 parameters), and ``build_model``
threaded the config keys into them one by one. A settings value is read from the model config section in one place
(``from_config``), is checked by the type checker and compared by value, and carries no TensorFlow, so a part's
signature keeps to what is not a scalar: its vocabulary, its feature tables, the initialisers and the layers it
shares. Adding an option is a field here, its read in ``from_config`` and its key in ``retrieval/models/config.py``
(which declares its default, rule and meaning). The width and layout of the exported vectors are not an option of
either tower: they are one ``layout.ScoreLayout``, computed once from the config and the data.

The fields' defaults serve a tower built directly (the tests do); a model's settings come from its config, whose
defaults are the keys' (``from_config`` reads every field).
"""

from __future__ import annotations

import dataclasses

import ml_collections

from retrieval.models import config as config_lib


@dataclasses.dataclass(frozen=True)
class ItemTowerSettings:
    """What the item tower's vector is made of (``towers.ItemTower``).

    ``output_dim``: the vector's width (``model.embedding_dim``); ``id_embedding_dim``, ``hidden_units``,
    ``feature_embedding_dim``: the id table's width, the MLP's ReLU layers, each feature embedding's width;
    whether the vector is normalised is its layout's (``ScoreLayout.normalized``). With item features only:
    ``id_dropout``, the share of ids read at the unknown-id row in training, drawn from ``seed``; ``content_match``,
    a linear path from the feature encodings to the vector (shared with the user tower); ``content_profile_weight``,
    the weight of the content coordinates the layout appends (``content_profile.ContentProfile``; its SVD starts from
    ``seed``). How many blocks the vector has (the cold head's two) and how many content coordinates: the tower's
    ``layout.ScoreLayout``.
    """

    output_dim: int
    id_embedding_dim: int
    hidden_units: tuple[int, ...] = ()
    feature_embedding_dim: int = 16
    id_dropout: float = 0.0
    seed: int = 0
    content_match: bool = False
    content_profile_weight: float = 0.0

    @classmethod
    def from_config(cls, model: ml_collections.ConfigDict) -> ItemTowerSettings:
        """The settings ``model`` (the ``config.model`` section) declares: its ``item_tower`` keys, with the
        section's ``embedding_dim`` and ``seed``."""
        item = model.item_tower
        return cls(output_dim=model.embedding_dim, id_embedding_dim=item.id_embedding_dim,
                   hidden_units=tuple(item.hidden_units), feature_embedding_dim=item.feature_embedding_dim,
                   id_dropout=item.id_dropout, seed=model.seed,
                   content_match=item.content_match, content_profile_weight=item.content_profile_weight)


@dataclasses.dataclass(frozen=True)
class UserTowerSettings:
    """How the user tower maps a history and a user to a vector (``towers.UserTower``).

    ``output_dim``: the width of each head (``model.embedding_dim``; the item tower's blocks give the number of
    heads); ``hidden_units``: the MLP's ReLU layers (the builder hands the tower its history pooling,
    ``poolings.POOLINGS``); ``user_id_embedding_dim``: a user-id embedding's width (0:
    none); ``user_id_gate``: with one, its weight after the MLP (0: concatenated before it); ``feature_embedding_dim``:
    each user feature embedding's width; ``use_example_age``: the example age joins the MLP's input;
    ``l2_normalize``: normalise each head.
    """

    output_dim: int
    hidden_units: tuple[int, ...] = ()
    user_id_embedding_dim: int = 0
    user_id_gate: float = 0.0
    feature_embedding_dim: int = 16
    use_example_age: bool = False
    l2_normalize: bool = False

    @classmethod
    def from_config(cls, model: ml_collections.ConfigDict) -> UserTowerSettings:
        """The settings ``model`` (the ``config.model`` section) declares: its ``user_tower`` keys, with the
        section's ``embedding_dim`` and ``l2_normalize``."""
        user = model.user_tower
        return cls(output_dim=model.embedding_dim, hidden_units=tuple(user.hidden_units),
                   user_id_embedding_dim=user.user_id_embedding_dim, user_id_gate=user.user_id_gate,
                   feature_embedding_dim=user.feature_embedding_dim, use_example_age=user.use_example_age,
                   l2_normalize=model.l2_normalize)


@dataclasses.dataclass(frozen=True)
class SequenceEncoderSettings:
    """The causal encoder of pooling "self_attention" (``sequence_encoder.SelfAttentionEncoder``): ``max_positions``
    (``model.max_history``), ``num_blocks`` Transformer blocks of ``num_heads`` heads, ``dropout``, ``item_mask`` (the
    share of history items masked in training, drawn from ``seed``), and ``every_position`` (train the state after
    every position)."""

    max_positions: int
    num_blocks: int = 2
    num_heads: int = 1
    dropout: float = 0.2
    item_mask: float = 0.0
    every_position: bool = True
    seed: int = 0

    @classmethod
    def from_config(cls, model: ml_collections.ConfigDict) -> SequenceEncoderSettings:
        """The settings ``model`` (the ``config.model`` section) declares: its ``user_tower.sequence`` keys, with the
        section's ``max_history`` and ``seed``."""
        s = model.user_tower.sequence
        return cls(max_positions=model.max_history, num_blocks=s.num_blocks, num_heads=s.num_heads,
                   dropout=s.dropout, item_mask=s.item_mask, every_position=s.every_position, seed=model.seed)


@dataclasses.dataclass(frozen=True)
class ObjectiveSettings:
    """The training objective (``objectives.py``'s layer of its negatives' source): ``name`` (``config.OBJECTIVES``),
    ``source`` of its negatives ("full", "sampled" or "in_batch": ``config.negatives_of``), ``temperature``;
    ``log_q``, the in-batch correction it applies ("none" for an objective without one); ``num_negatives`` sampled
    negatives drawn by ``sampler`` (unigram counts raised to ``distortion``) from ``seed``; the frequency estimator's
    ``estimator_buckets`` (0: the vocabulary size), ``estimator_alpha`` and ``estimator_hashes`` (``log_q``
    "estimated"); ``output_table``: candidates are scored by YoutubeDNN's output table, not the item tower."""

    name: str
    source: str
    temperature: float
    log_q: str = "none"
    num_negatives: int = 0
    sampler: str = "unigram"
    distortion: float = 0.75
    estimator_buckets: int = 0
    estimator_alpha: float = 0.01
    estimator_hashes: int = 1
    output_table: bool = False
    seed: int = 0

    @classmethod
    def from_config(cls, model: ml_collections.ConfigDict) -> ObjectiveSettings:
        """The settings ``model`` (the ``config.model`` section, checked: ``config.MODEL.check``) declares: its
        ``objective`` keys, with the section's ``temperature`` and ``seed``."""
        o = model.objective
        return cls(name=o.name, source=config_lib.negatives_of(o.name, o.negatives), temperature=model.temperature,
                   log_q=o.log_q if config_lib.OBJECTIVES[o.name].log_q else "none", num_negatives=o.num_negatives,
                   sampler=o.sampler, distortion=o.distortion, estimator_buckets=o.estimator_buckets,
                   estimator_alpha=o.estimator_alpha, estimator_hashes=o.estimator_hashes,
                   output_table=o.output_table, seed=model.seed)
