"""A causal self-attention encoder of the history (SASRec: Kang and McAuley 2018, "Self-Attentive Sequential
Recommendation", ICDM, section III), and the targets of training it at every position at once.

Why: a mean (or order-free attention) pooling of the history cannot tell "bought a tent last week" from "bought a
tent a year ago"; on next-item data the order and the recency of the last items carry most of the signal. The
encoder reads the history in order and its state at the most recent position is the user's summary.

Layout. The history arrives as everywhere in this project: ``[B, H]`` item indices, *most recent first*, 0-padded at
the end (``retrieval.data.examples.next_item_examples``). Position ``j`` is the recency rank (0 = the last item
bought), so a learned position embedding ``P_j`` means the same at training and at serving whatever the history's
length (SASRec left-pads so that its last position is always the most recent: the same thing). Causality in this
layout: the state at position ``j`` reads only positions ``k >= j`` (that item and older ones), never the more recent
ones, so the state at ``j`` is what the model knew right after the user's item at ``j`` and may be trained to predict
the item that came next (``every_position_targets``).

The encoder (SASRec eqs. 2-4 and section III-D):

    E_0 = dropout(sqrt(d) * M[s] + P)               masked to the valid positions
    for each of ``num_blocks`` blocks (pre-LN residual blocks, g(x) = x + dropout(g(LayerNorm(x)))):
        E = E + dropout(MultiHeadAttention(LN(E), LN(E), causal mask))    (eq. 2, with ``num_heads`` heads)
        E = E + dropout(W_2 ReLU(W_1 LN(E) + b_1) + b_2)                 (eq. 4)
        E = E * valid
    output LN(E)                                     [B, H, d]

``M`` is the history table (the item tower's id table when ``share_item_embeddings``, SASRec's shared input / output
embedding). Padding keys never contribute; a padded query position still attends to itself, so no row of the
attention is empty (its output is masked and never read).

The read-out (``most_recent_state``). An unknown item (index 1: an id new since training, one below
``data.min_item_count``) keeps its slot, so recency ranks count it, in training data as at serving, but its state is
zeroed like padding's. The user's summary is therefore the state at the first *valid* position, the most recent
known item, not at position 0 (which, with an unknown most recent item, was ``LayerNorm(0)``: one constant for every
user).
"""

from __future__ import annotations

import math

import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.models.layers import MASK_BELOW, Initializers
from retrieval.models.part_settings import SequenceEncoderSettings

LENGTH_BUCKETS = 8  # parts of similar history length a training batch is encoded in (length_buckets)


def causal_attention_mask(valid: tf.Tensor) -> tf.Tensor:
    """``[B, H, H]`` boolean: query position ``j`` may attend key position ``k`` iff ``k >= j`` (``k`` is the same
    item or an older one, in the most-recent-first layout) and ``k`` holds an item, or ``k == j`` (so that no row is
    empty). ``valid``: ``[B, H]`` boolean, the positions holding an item."""
    positions = tf.shape(valid)[1]
    rank = tf.range(positions)
    older_or_same = rank[tf.newaxis, :] >= rank[:, tf.newaxis]  # [query j, key k]: k >= j
    itself = tf.eye(positions, dtype=tf.bool)
    return tf.logical_and(older_or_same[tf.newaxis], valid[:, tf.newaxis, :]) | itself[tf.newaxis]


def last_item_span(valid: tf.Tensor) -> tf.Tensor:
    """``[B]`` int32: one past the last position holding an item (0 for an empty history); ``valid`` ``[B, H]``."""
    rank = tf.range(1, tf.shape(valid)[1] + 1)[tf.newaxis, :]
    return tf.reduce_max(tf.where(valid, rank, 0), axis=1)


def most_recent_state(states: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
    """``[B, d]``: each row's state ``states [B, W, d]`` at its first valid position (the most recent known item;
    ``valid [B, H]``, ``H >= W``), or at position 0 when the row has none (an empty or all-unknown history: the
    ``LayerNorm(0)`` state every such row shares, as before).

    Why this and not moving the known items to the front before encoding: the state at position ``j`` reads only
    positions ``k >= j``, so it is exactly the state ``every_position`` training scores at ``j``, with the recency
    ranks that training's histories (which keep unknown items in their slots) give it; moving items would shift
    those ranks, and the per-position targets with them, even for histories whose most recent item is known."""
    valid = valid[:, :tf.shape(states)[1]]
    width = tf.shape(valid)[1]
    rank = tf.range(width)[tf.newaxis, :]
    first = tf.reduce_min(tf.where(valid, rank, width), axis=1)
    first = tf.where(first < width, first, 0)
    return tf.gather(states, first, axis=1, batch_dims=1)


def length_buckets(valid: tf.Tensor, buckets: int) -> list[tf.Tensor]:
    """The batch's row numbers sorted by ``last_item_span`` and cut into ``buckets`` parts of (nearly) equal size.

    Why: histories are mostly short (Amazon Beauty: median 4 items, 1% above 41) but a batch's width is its longest
    history's; the encoder then computes mostly padding. Encoding each part at its own width (the encoder cuts
    it) computed about a third of the positions on Beauty's batches of 256 (``benchmarks/JOURNAL.md``, "Issue 37").
    """
    order = tf.argsort(last_item_span(valid), stable=True)
    size = tf.shape(order)[0]
    cuts = [size * part // buckets for part in range(buckets + 1)]
    return [order[cuts[part]:cuts[part + 1]] for part in range(buckets)]


def every_position_targets(history: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The next item after each history position, and where there is one to learn: ``(targets [B, H], where
    [B, H])``.

    In the most-recent-first layout the item that followed ``history[:, j]`` is ``history[:, j - 1]``, and the one
    that followed the most recent item is the example's ``label``; so the targets are ``[label, history[:, :-1]]``,
    and position ``j`` is trained where both the item at ``j`` and its target are known items (index >= 2). One
    example per user (``data.max_examples_per_user=1``: its most recent label) then gives every next-item target of
    the user's last ``max_history + 1`` items in one pass, SASRec's training (section III-E).
    """
    history = tf.cast(history, tf.int32)
    label = tf.cast(label, tf.int32)
    targets = tf.concat([label[:, tf.newaxis], history[:, :-1]], axis=1)
    return targets, (history >= MASK_BELOW) & (targets >= MASK_BELOW)


class _Block(tf.keras.layers.Layer):
    """One pre-LN Transformer block of SASRec (section III-B, III-C, III-D): causal multi-head self-attention, then
    the point-wise two-layer feed-forward network, each as ``x + dropout(f(LayerNorm(x)))``."""

    def __init__(self, width: int, num_heads: int, dropout: float, init: Initializers, name: str):
        super().__init__(name=name)
        self.attention_norm = tf.keras.layers.LayerNormalization(epsilon=1e-8, name="attention_norm")
        self.attention = tf.keras.layers.MultiHeadAttention(
            num_heads, key_dim=max(1, width // num_heads), dropout=dropout, kernel_initializer=init.dense(),
            name="attention")
        self.ffn_norm = tf.keras.layers.LayerNormalization(epsilon=1e-8, name="ffn_norm")
        self.ffn_in = tf.keras.layers.Dense(width, activation="relu", kernel_initializer=init.dense(), name="ffn_in")
        self.ffn_out = tf.keras.layers.Dense(width, kernel_initializer=init.dense(), name="ffn_out")
        self.dropout = tf.keras.layers.Dropout(dropout)

    def call(self, x: tf.Tensor, attention_mask: tf.Tensor, valid: tf.Tensor, training=None) -> tf.Tensor:
        normed = self.attention_norm(x)
        x = x + self.dropout(self.attention(normed, normed, attention_mask=attention_mask, training=training),
                             training=training)
        x = x + self.dropout(self.ffn_out(self.dropout(self.ffn_in(self.ffn_norm(x)), training=training)),
                             training=training)
        return x * valid


class SelfAttentionEncoder(tf.keras.layers.Layer):
    """Maps history embeddings ``[B, H, d]`` (most recent first) and their validity ``[B, H]`` to causal states
    ``[B, W, d]``, ``W`` the batch's longest history (at most ``max_positions``; later positions are padding in every
    row, and are cut); the state at position ``j`` reads positions ``j`` and older, so the user's summary is the state
    at the first valid position (``most_recent_state``; see the module docstring).

    ``settings`` (``part_settings.SequenceEncoderSettings``): ``max_positions`` rows of the learned position table
    (``model.max_history``; a longer history is cut to its ``max_positions`` most recent items, and the exported
    encoder already pads or cuts to ``max_history``); ``num_blocks`` Transformer blocks of ``num_heads`` attention
    heads (SASRec: 2 and 1; the width must be a multiple of the heads); ``dropout`` on the input, the attention
    weights and every residual branch (training only); ``item_mask``, the share of history items replaced by a learned
    mask embedding in training (the "item mask" augmentation of CL4SRec, Xie et al. 2022, section 4.2, used as data
    augmentation; BERT4Rec's [mask]): the targets stay as they were, so a state learns to predict the next item with
    some of the past hidden; ``seed``, the mask draws' seed.
    """

    def __init__(self, settings: SequenceEncoderSettings, init: Initializers, name: str = "sequence_encoder"):
        super().__init__(name=name)
        self.max_positions = int(settings.max_positions)
        self.num_blocks = int(settings.num_blocks)
        self.num_heads = int(settings.num_heads)
        self.rate = float(settings.dropout)
        self._init = init
        self.input_dropout = tf.keras.layers.Dropout(self.rate)
        # Keras's Dropout draws the seeded Bernoulli mask (a new draw every step).
        self.item_mask = (tf.keras.layers.Dropout(float(settings.item_mask), seed=settings.seed)
                          if settings.item_mask > 0 else None)
        self.blocks: list[_Block] = []
        self.output_norm = tf.keras.layers.LayerNormalization(epsilon=1e-8, name="output_norm")

    def build(self, input_shape):
        width = int(input_shape[-1])
        if width % self.num_heads:
            raise ValueError(f"the history width {width} is not a multiple of num_heads {self.num_heads}")
        self.positions = self.add_weight("positions", shape=[self.max_positions, width],
                                         initializer=self._init.embedding())
        self.blocks = [_Block(width, self.num_heads, self.rate, self._init, name=f"block_{i}")
                       for i in range(self.num_blocks)]
        if self.item_mask is not None:
            self.mask_embedding = self.add_weight("mask_embedding", shape=[width], initializer=self._init.embedding())
        super().build(input_shape)

    def call(self, embeddings: tf.Tensor, valid: tf.Tensor, training=None) -> tf.Tensor:
        # Positions past the batch's last item are padding everywhere: cut them (exact, since a position reads
        # only older ones and padding keys are masked), so a batch of short histories costs what its items cost.
        width = tf.maximum(1, tf.reduce_max(last_item_span(valid[:, :self.max_positions])))
        embeddings, valid = embeddings[:, :width], valid[:, :width]
        width = embeddings.shape[-1]
        if training and self.item_mask is not None:
            hidden = self.item_mask(tf.ones_like(embeddings[..., 0]), training=True) == 0
            embeddings = tf.where(hidden[..., tf.newaxis], self.mask_embedding, embeddings)
        keep = tf.cast(valid, embeddings.dtype)[..., tf.newaxis]
        x = embeddings * math.sqrt(width) + self.positions[:tf.shape(embeddings)[1]]
        x = self.input_dropout(x, training=training) * keep
        mask = causal_attention_mask(valid)
        for block in self.blocks:
            x = block(x, mask, keep, training=training)
        return self.output_norm(x)
