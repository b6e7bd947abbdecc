"""Pooling "mean": the mean of the watched items' embeddings over the valid positions (YoutubeDNN, Covington et al.
2016, fig. 3)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from retrieval.models.layers import masked_mean
from retrieval.models.poolings.base import HistoryPooling


class MeanPooling(HistoryPooling):
    """The masked mean; zeros for an empty history."""

    linear = True

    def call(self, watched: tf.Tensor, mask: tf.Tensor, training=None, every_position: bool = False,
             chunked: bool = False) -> tf.Tensor:
        return masked_mean(watched, mask, chunked=chunked)


def build(settings: Any, init: Any) -> MeanPooling:
    return MeanPooling(name="mean_pooling")
