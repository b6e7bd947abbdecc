"""How the user tower pools the embedded history (``model.user_tower.pooling``): the registry of poolings.

A pooling maps the embedded history ``[B, H, d]`` (most recent first, 0-padded at the end) and its validity ``[B,
H]`` to the pooled history ``[B, d]``, or, for one that reads the order and trains every position, to a state per
position ``[B, H, d]`` (``base.HistoryPooling``). Each lives in the module of this package named as it is
(``poolings/mean.py`` for "mean"), whose ``build(settings, init)`` returns its layer; :data:`POOLINGS` holds what
the config rules, the reference page and the builder know of it, without TensorFlow (the config checks run before
TensorFlow loads). Adding a pooling: its module, and one line in :data:`POOLINGS`.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from absl import logging


@dataclasses.dataclass(frozen=True)
class Pooling:
    """One pooling: ``meaning``, its sentence in the reference page; ``reads_order``, it reads the history in order
    (a sequence encoder): set data (``data.order=none``) is mean-pooled instead, and the item tower's terms that pool
    the history's features (content match, content profile) need a pooling that does not."""

    meaning: str
    reads_order: bool = False


POOLINGS: dict[str, Pooling] = {
    "mean": Pooling("the mean of the watched items, YoutubeDNN's"),
    "attention": Pooling("a learned query scores each watched item; softmax over the valid positions"),
    "self_attention": Pooling("sequences: a causal Transformer over the history in order, SASRec; its state at the "
                              "most recent item is the pooled history; user_tower.sequence below", reads_order=True),
}


def for_data(name: str, set_data: bool) -> str:
    """The pooling a tower of ``model.user_tower.pooling = name`` uses: on set data (``data.order=none``) a pooling
    that reads the order falls back to "mean" (logged)."""
    if POOLINGS[name].reads_order and set_data:
        logging.warning("model.user_tower.pooling=%s reads the order of a sequence, but the data are sets "
                        "(data.order=none): the history is mean-pooled instead", name)
        return "mean"
    return name


def build(name: str, *args: Any) -> Any:
    """The layer of pooling ``name``: its module's ``build(*args)`` (``(settings, init)``: the sequence encoder's
    settings and the model's initialisers). Imports TensorFlow."""
    return importlib.import_module(f"{__name__}.{name}").build(*args)
