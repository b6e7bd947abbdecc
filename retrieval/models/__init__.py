"""Retrieval models: the two-tower model (YoutubeDNN user tower, feature-aware item tower) and its objectives.

``default_config()`` documents every model key; ``build_model(config, item_vocab, user_vocab, item_features,
user_features)`` returns a ``TwoTowerModel`` that ``retrieval.training.fit`` trains and ``retrieval.export`` exports.
"""

from retrieval.models.builder import build_model
from retrieval.models.config import default_config
from retrieval.models.two_tower import TwoTowerModel

__all__ = ["TwoTowerModel", "build_model", "default_config"]
