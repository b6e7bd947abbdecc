"""The towers' settings: the scalar options of ``towers.ItemTower`` and ``towers.UserTower``, one typed value each.

Why: the towers used to take every option as a keyword of their own (16 and 20 parameters), and ``build_model``
threaded the config keys into them one by one. A settings value is read from the model config section in one place
(``from_config``), is checked by the type checker and compared by value, and carries no TensorFlow, so a tower's
signature keeps to what is not a scalar: its vocabulary, its feature tables, the initialisers and the layers it
shares. Adding an option is a field here, its read in ``from_config`` and its key in ``retrieval/models/config.py``
(which declares its default, rule and meaning).

The fields' defaults serve a tower built directly (the tests do); a model's settings come from its config, whose
defaults are the keys' (``from_config`` reads every field).
"""

from __future__ import annotations

import dataclasses

import ml_collections
from absl import logging


@dataclasses.dataclass(frozen=True)
class ItemTowerSettings:
    """What the item tower's vector is made of (``towers.ItemTower``).

    ``output_dim``: the vector's width (``model.embedding_dim``); ``id_embedding_dim``, ``hidden_units``,
    ``feature_embedding_dim``: the id table's width, the MLP's ReLU layers, each feature embedding's width;
    ``l2_normalize``: normalise the vector. With item features only: ``id_dropout``, the share of ids read at the
    unknown-id row in training, drawn from ``seed``; ``content_match``, a linear path from the feature encodings to
    the vector (shared with the user tower); ``cold_head``, the vector of an item placed by its features alone lands
    in a second block; ``content_profile_weight`` (> 0) and ``content_profile_dim``, fixed content coordinates
    appended to the vector (``content_profile.ContentProfile``; its SVD starts from ``seed``).
    """

    output_dim: int
    id_embedding_dim: int
    hidden_units: tuple[int, ...] = ()
    feature_embedding_dim: int = 16
    l2_normalize: bool = False
    id_dropout: float = 0.0
    seed: int = 0
    content_match: bool = False
    cold_head: bool = False
    content_profile_weight: float = 0.0
    content_profile_dim: int = 64

    @classmethod
    def from_config(cls, model: ml_collections.ConfigDict) -> ItemTowerSettings:
        """The settings ``model`` (the ``config.model`` section) declares: its ``item_tower`` keys, with the
        section's ``embedding_dim``, ``l2_normalize`` and ``seed``."""
        item = model.item_tower
        return cls(output_dim=model.embedding_dim, id_embedding_dim=item.id_embedding_dim,
                   hidden_units=tuple(item.hidden_units), feature_embedding_dim=item.feature_embedding_dim,
                   l2_normalize=model.l2_normalize, id_dropout=item.id_dropout, seed=model.seed,
                   content_match=item.content_match, cold_head=item.cold_head,
                   content_profile_weight=item.content_profile_weight, content_profile_dim=item.content_profile_dim)


@dataclasses.dataclass(frozen=True)
class UserTowerSettings:
    """How the user tower maps a history and a user to a vector (``towers.UserTower``).

    ``output_dim``: the width of each head (``model.embedding_dim``; the item tower's blocks give the number of
    heads); ``hidden_units``: the MLP's ReLU layers; ``pooling``: "mean", "attention" or "self_attention" (the
    builder passes the sequence encoder of the last); ``user_id_embedding_dim``: a user-id embedding's width (0:
    none); ``user_id_gate``: with one, its weight after the MLP (0: concatenated before it); ``feature_embedding_dim``:
    each user feature embedding's width; ``use_example_age``: the example age joins the MLP's input;
    ``l2_normalize``: normalise each head.
    """

    output_dim: int
    hidden_units: tuple[int, ...] = ()
    pooling: str = "mean"
    user_id_embedding_dim: int = 0
    user_id_gate: float = 0.0
    feature_embedding_dim: int = 16
    use_example_age: bool = False
    l2_normalize: bool = False

    @classmethod
    def from_config(cls, model: ml_collections.ConfigDict, set_data: bool = False) -> UserTowerSettings:
        """The settings ``model`` (the ``config.model`` section) declares: its ``user_tower`` keys, with the
        section's ``embedding_dim`` and ``l2_normalize``. ``set_data``: the histories are sets (``data.order=none``):
        pooling "self_attention", which reads order, falls back to "mean" (logged)."""
        user = model.user_tower
        pooling = user.pooling
        if pooling == "self_attention" and set_data:
            logging.warning("model.user_tower.pooling=self_attention reads the order of a sequence, but the data are "
                            "sets (data.order=none): the history is mean-pooled instead")
            pooling = "mean"
        return cls(output_dim=model.embedding_dim, hidden_units=tuple(user.hidden_units), pooling=pooling,
                   user_id_embedding_dim=user.user_id_embedding_dim, user_id_gate=user.user_id_gate,
                   feature_embedding_dim=user.feature_embedding_dim, use_example_age=user.use_example_age,
                   l2_normalize=model.l2_normalize)
