"""Pooling "self_attention": SASRec's causal encoder (``sequence_encoder.SelfAttentionEncoder``) read at the most
recent known item, or at every position in training (``model.user_tower.sequence``)."""

from __future__ import annotations

import tensorflow as tf

from retrieval.models.layers import Initializers
from retrieval.models.part_settings import SequenceEncoderSettings
from retrieval.models.poolings.base import HistoryPooling
from retrieval.models.sequence_encoder import SelfAttentionEncoder, most_recent_state


class SelfAttentionPooling(SelfAttentionEncoder, HistoryPooling):
    """The encoder's states ``[B, W, d]`` with ``every_position``, else its state at the most recent known item
    ``[B, d]`` (``most_recent_state``)."""

    def __init__(self, settings: SequenceEncoderSettings, init: Initializers):
        super().__init__(settings, init)
        self.trains_every_position = settings.every_position

    def call(self, watched: tf.Tensor, mask: tf.Tensor, training=None, every_position: bool = False,
             chunked: bool = False) -> tf.Tensor:
        states = super().call(watched, mask, training=training)
        return states if every_position else most_recent_state(states, mask)


def build(settings: SequenceEncoderSettings, init: Initializers) -> SelfAttentionPooling:
    return SelfAttentionPooling(settings, init)
