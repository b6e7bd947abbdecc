"""Pooling "attention": additive attention with one learned query (Bahdanau et al. 2015, eq. 6), an order-free
weighted mean of the watched items."""

from __future__ import annotations

from typing import Any, Optional

import tensorflow as tf

from retrieval.models.layers import Initializers
from retrieval.models.poolings.base import HistoryPooling


class AttentionPooling(HistoryPooling):
    """``a_j = softmax_j(w . tanh(W e_j + b))`` over the valid positions, output ``sum_j a_j e_j``; zeros for an empty
    history."""

    def __init__(self, init: Initializers, name: str = "attention_pooling"):
        super().__init__(name=name)
        self._init = init
        self._key: Optional[tf.keras.layers.Dense] = None

    def build(self, input_shape):
        width = int(input_shape[-1])
        self._key = tf.keras.layers.Dense(width, activation="tanh", kernel_initializer=self._init.dense())
        self._query = self.add_weight("query", shape=[width], initializer=self._init.dense())
        super().build(input_shape)

    def call(self, watched: tf.Tensor, mask: tf.Tensor, training=None, every_position: bool = False,
             chunked: bool = False) -> tf.Tensor:
        scores = tf.linalg.matvec(self._key(watched), self._query)
        scores = tf.where(mask, scores, tf.fill(tf.shape(scores), scores.dtype.min))
        weights = tf.nn.softmax(scores, axis=-1) * tf.cast(mask, scores.dtype)
        return tf.einsum("bh,bhd->bd", weights, watched)


def build(settings: Any, init: Initializers) -> AttentionPooling:
    return AttentionPooling(init)
