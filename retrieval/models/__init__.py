"""Retrieval models: the two-tower model (YoutubeDNN user tower, feature-aware item tower) and its objectives.

``default_config()`` documents every model key; ``build_model(config, item_vocab, user_vocab, item_features,
user_features)`` returns a ``TwoTowerModel`` that ``retrieval.training.fit`` trains and ``retrieval.export`` exports.
The names are imported on first use (PEP 562), so ``retrieval.models.item2vec`` loads without TensorFlow.
"""

import importlib

_NAMES = {"build_model": "builder", "default_config": "config", "TwoTowerModel": "two_tower"}

__all__ = ["TwoTowerModel", "build_model", "default_config"]


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
