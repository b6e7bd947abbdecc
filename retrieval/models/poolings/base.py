"""The layer every pooling is (``poolings.POOLINGS``)."""

from __future__ import annotations

import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)


class HistoryPooling(tf.keras.layers.Layer):
    """``call(watched [B, H, d], mask [B, H], training, every_position, chunked)`` -> ``[B, d]`` (with
    ``every_position``, for a pooling that trains every position: ``[B, H, d]``); ``chunked``: sum the positions in
    chunks where the pooling sums them (``layers.sum_over_positions``: an XLA-compiled step).

    ``linear``: the pooling is the mean of the valid positions, so a linear map of the items commutes with it (the
    user tower then pools the history's feature encodings first and maps them once per user);
    ``trains_every_position``: the model trains the state after every position against the item that followed it
    (``TwoTowerModel(every_position=...)``)."""

    linear = False
    trains_every_position = False
