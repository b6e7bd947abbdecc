"""The two towers: the item tower embeds item indices, the user tower (YoutubeDNN) embeds a user's context.

Item tower: ``v_i = MLP([E_item[row(i)], features(i)])``, optionally L2-normalised. It embeds any indices, so the
same function scores a batch's positives, sampled negatives and the whole catalogue at export. With item features,
``row(i)`` is the unknown-id row for items without training interactions and, in training, for a seeded share of
the others (item-id dropout, ``layers.ItemIdRows``): a cold item's vector is ``MLP([E_item[OOV], features(i)])``.
The same rows and feature encodings enter the user tower's history (``E_hist[row(i)] + P features(i)``), so a cold
item a user clicked contributes to her vector through its features.

User tower (Covington et al. 2016, "Deep Neural Networks for YouTube Recommendations", fig. 3): the watched items are
embedded (with the item tower's id table or a separate one), pooled over the valid history positions (index >= 2;
the pooling the builder hands it, ``poolings.POOLINGS``: mean, attention, a sequence encoder), concatenated with
the user's features (gathered by user index, an optional user-id embedding) and the example age, and passed through
a ReLU MLP to the item tower's dimension. With a gate ``g`` the user-id embedding instead joins after the MLP,
SimpleX's aggregation (Mao et al. 2021, section 3.2): ``u = g e_user + (1 - g) MLP(pooled history, features)``.
With a pooling that trains every position (the sequence encoder of pooling "self_attention",
``poolings/self_attention.py``), ``every_position=True`` returns the user vector after every history position ``[B,
H, output_dim]`` (training).

Each tower takes its scalar options as one typed value (``part_settings.ItemTowerSettings`` and
``part_settings.UserTowerSettings``, read from the model config), the item tower the layout of the vectors it exports
(``layout.ScoreLayout``: its blocks and content coordinates, computed once by the builder), and the user tower what it
reads of the item tower as one value too, :class:`SharedItemParts` (``ItemTower.shared_parts``: the same layers, not
copies, and the layout's number of blocks, which it scores with as many heads).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional

import numpy as np
import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.models.content_profile import ContentProfile
from retrieval.models.layers import (
    MASK_BELOW,
    OOV_ROW,
    EmbeddingTable,
    FeatureTables,
    Initializers,
    ItemIdRows,
    masked_mean,
    mlp,
)
from retrieval.models.layout import ScoreLayout
from retrieval.models.part_settings import ItemTowerSettings, UserTowerSettings
from retrieval.models.poolings.base import HistoryPooling

# In training, the history's item features are encoded once per vocabulary row up to this many rows (a batch of the
# recipe holds 1024 x 50 history slots), else once per slot (UserTower._history_item_encodings).
ENCODE_EVERY_ITEM_ROWS = 50_000


@dataclasses.dataclass(frozen=True)
class SharedItemParts:
    """What the user tower reads of the item tower (``ItemTower.shared_parts``; the same layers, not copies).

    ``id_rows`` and ``features``: history items read the rows the item tower reads (cold items and dropped ids: the
    unknown-id row) and add their projected feature encodings; ``content_projection``: applied to the mean of the
    history items' feature encodings and added to the user vector; ``content_profile``: the history's profile is
    appended to the user vector; ``heads``: the item tower's blocks (``ScoreLayout.heads``), which the user tower
    scores with as many heads (2 with the cold head). None where the item tower has no such part (all of them
    without item features), and the default value for a user tower without an item tower (the output table's)."""

    id_rows: Optional[ItemIdRows] = None
    features: Optional[FeatureTables] = None
    content_projection: Optional[tf.keras.layers.Layer] = None
    content_profile: Optional[ContentProfile] = None
    heads: int = 1


class ItemTower(tf.keras.layers.Layer):
    """Maps item indices [...] to item vectors [..., output_dim]."""

    def __init__(self, vocab_size: int, settings: ItemTowerSettings, layout: ScoreLayout, init: Initializers, *,
                 features: Optional[Mapping[str, np.ndarray]] = None, warm: Optional[np.ndarray] = None,
                 name: str = "item_tower"):
        """``settings``: the scalar options (``ItemTowerSettings``); ``layout``: the blocks of the vectors it
        exports (``layout.two_tower_layout``; blocks of ``settings.output_dim``); ``features``: the per-index feature
        tables (``FeatureTables``' input); ``warm`` ([V] bool, default all): which indices had training interactions.
        The id dropout, the content-match projection (``content_projection``, which the user tower shares), the
        content profile (the layout's content coordinates: ``content_profile.ContentProfile``, fixed coordinates
        appended to the vector, shared with the user tower) and the cold head (the layout's second block: the vector
        of an item placed by its features alone lands there, scored by the user tower's second head: ``[v, 0]`` for
        an item read by id, ``[0, v]`` for one read at the unknown-id row) apply only with ``features`` (without them
        an item is its id, one block)."""
        super().__init__(name=name)
        s = settings
        if layout.block_width != s.output_dim or layout.bias or (not features and not layout.one_block):
            raise ValueError(f"an item tower of width {s.output_dim} {'with' if features else 'without'} item "
                             f"features cannot export {layout}")
        self.layout = layout
        # The content profile's term is the cold head's block only and trains with it (its softmax calibrates the
        # two). Its fixed variable is created before the tower's others, and tracked after them (below).
        content_profile = (ContentProfile(features, layout.content_width, s.content_profile_weight, s.seed)
                           if layout.content_width else None)
        self.vocab_size = int(vocab_size)
        self.output_dim = int(s.output_dim)
        self.l2_normalize = layout.normalized
        self.id_embedding = EmbeddingTable(vocab_size, s.id_embedding_dim,
                                           embeddings_initializer=init.embedding(), name="item_id_emb")
        self.features = (FeatureTables(features, vocab_size, s.feature_embedding_dim, init, name="item_features")
                         if features else None)
        self.id_rows = (ItemIdRows(np.ones(vocab_size, bool) if warm is None else warm, s.id_dropout, s.seed)
                        if features else None)
        needs_projection = bool(features) or bool(s.hidden_units) or s.id_embedding_dim != s.output_dim
        self.mlp = mlp(s.hidden_units, s.output_dim, init, name="item_mlp") if needs_projection else None
        self.content_projection = (tf.keras.layers.Dense(s.output_dim, use_bias=False,
                                                         kernel_initializer=init.dense(), name="content_projection")
                                   if features and s.content_match else None)
        self.content_profile = content_profile
        self.cold_head = layout.heads == 2

    @property
    def shared_parts(self) -> SharedItemParts:
        """The parts the user tower reads history items with (:class:`SharedItemParts`)."""
        return SharedItemParts(self.id_rows, self.features, self.content_projection, self.content_profile,
                               heads=self.layout.heads)

    def call(self, indices: tf.Tensor, training: bool = False) -> tf.Tensor:
        if self.features is None:
            return self.encode(indices, None)
        content = self.content_profile.lookup(indices) if self.content_profile is not None else None
        return self.encode(self.id_rows(indices, training=training), self.features(indices), content)

    def placed_by_features(self, indices: tf.Tensor) -> tf.Tensor:
        """The vectors items ``indices`` [...] get from their features alone, as if nobody had clicked them: read at
        the unknown-id row (with the cold head, in the second block). A catalogue item's "new copy" gets this vector
        (``retrieval.index.similar`` folds it beside the vector read by id)."""
        content = self.content_profile.lookup(indices) if self.content_profile is not None else None
        return self.encode(tf.fill(tf.shape(indices), OOV_ROW), self.features(indices), content)

    def embed_values(self, id_rows: tf.Tensor, values: Mapping[str, tf.Tensor]) -> tf.Tensor:
        """Item vectors [N, d] from id-table rows [N] and coded feature values (``FeatureTables.encode``'s input):
        the exported item encoder embeds the items of a new catalogue table through this (``retrieval.export``)."""
        content = (self.content_profile.scale * self.content_profile.encode(values)
                   if self.content_profile is not None else None)
        return self.encode(id_rows, self.features.encode(values, 1), content)

    def encode(self, id_rows: tf.Tensor, encoded_features: Optional[tf.Tensor],
               content: Optional[tf.Tensor] = None) -> tf.Tensor:
        """Item vectors from id-table rows [...], the feature encodings [..., width] (``FeatureTables.encode``) and
        the scaled content coordinates [..., k] (``ContentProfile``), appended after the normalisation."""
        x = self.id_embedding(id_rows)
        if encoded_features is not None:
            x = tf.concat([x, encoded_features], axis=-1)
        if self.mlp is not None:
            x = self.mlp(x)
        if self.content_projection is not None:
            x = x + self.content_projection(encoded_features)
        if self.l2_normalize:
            x = tf.math.l2_normalize(x, axis=-1)
        if self.cold_head:
            by_features = tf.cast(tf.equal(id_rows, OOV_ROW), x.dtype)[..., tf.newaxis]
            x = tf.concat([x * (1.0 - by_features), x * by_features], axis=-1)
            if content is not None:  # the content term joins the cold block's score only
                content = content * by_features
        return x if content is None else tf.concat([x, content], axis=-1)


class UserTower(tf.keras.layers.Layer):
    """Maps a batch dict (``user`` [B], ``history`` [B, H] most recent first, optional ``example_age`` [B]) to user
    vectors [B, output_dim]. Any H works (the pooling is position-free), so serving may pass shorter histories.

    ``chunked_pooling`` (False) makes the mean pooling sum the positions in chunks (``layers.sum_over_positions``):
    ``TwoTowerModel`` sets it while it traces an XLA-compiled step, where the chunks fuse with the lookup."""

    chunked_pooling = False
    # With the mean pooling, the history's item features are pooled first and mapped once per user (``call``); False
    # maps them per slot and pools after, as any other pooling does (the same values: the test's reference).
    pool_features_first = True

    def __init__(self, history_embedding: tf.keras.layers.Embedding, settings: UserTowerSettings,
                 pooling: HistoryPooling, init: Initializers, *, item_parts: Optional[SharedItemParts] = None,
                 user_vocab_size: int = 0, features: Optional[Mapping[str, np.ndarray]] = None,
                 name: str = "user_tower"):
        """``history_embedding``: the table the history items are embedded with (the item tower's id table, the
        output table's weights or a table of its own); ``settings``: the scalar options (``UserTowerSettings``);
        ``pooling``: the history's pooling (``poolings.build``); ``item_parts``: what the tower reads of the item
        tower (:class:`SharedItemParts`; none without one): its id rows, feature tables and content parts for the
        history items, and as many heads as it has blocks, each a vector of ``settings.output_dim`` normalised on its
        own (the first scores items read by id, the second items placed by their features alone); its content parts
        pool the history's features, which the config's rules keep from a pooling that reads the order
        (``config.pooled_history``). ``features``: the per-user feature tables of a user vocabulary of
        ``user_vocab_size``."""
        super().__init__(name=name)
        s = settings
        parts = item_parts or SharedItemParts()
        self.heads = int(parts.heads)
        self.output_dim = int(s.output_dim) * self.heads
        self.l2_normalize = bool(s.l2_normalize)
        self.use_example_age = bool(s.use_example_age)
        # A gated user-id embedding is added to the output, so it has the output's width.
        user_id_embedding_dim = s.user_id_embedding_dim
        self.user_id_gate = float(s.user_id_gate) if user_id_embedding_dim > 0 else 0.0
        if self.user_id_gate:
            user_id_embedding_dim = self.output_dim
        self.history_embedding = history_embedding
        self.pooling = pooling
        self.user_id_embedding = (
            EmbeddingTable(user_vocab_size, user_id_embedding_dim, embeddings_initializer=init.embedding(),
                           name="user_id_emb") if user_id_embedding_dim > 0 else None)
        self.features = (FeatureTables(features, user_vocab_size, s.feature_embedding_dim, init,
                                       name="user_features") if features else None)
        self.mlp = mlp(s.hidden_units, self.output_dim, init, name="user_mlp")
        self.item_id_rows = parts.id_rows
        self.item_features = parts.features
        self.content_projection = parts.content_projection
        self.content_profile = parts.content_profile
        self.history_features = (tf.keras.layers.Dense(int(history_embedding.output_dim), use_bias=False,
                                                       kernel_initializer=init.dense(), name="history_features")
                                 if parts.features is not None else None)

    def call(self, inputs: Mapping[str, tf.Tensor], training=None, every_position: bool = False) -> tf.Tensor:
        history = tf.cast(inputs["history"], tf.int32)
        mask = history >= MASK_BELOW
        rows = history if self.item_id_rows is None else self.item_id_rows(history, training=training)
        watched = self.history_embedding(rows)
        # The mean pooling is linear: mean(E[row] + P f) = mean(E[row]) + P mean(f), and the content-match term is
        # W mean(f); so with it the history's feature encodings are pooled first and mapped once per user.
        linear = self.pool_features_first and self.pooling.linear
        feature_mean = None
        if self.item_features is not None:
            encodings, gather = self._history_item_encodings(history, bool(training))
            if linear or self.content_projection is not None:
                feature_mean = masked_mean(gather(encodings), mask, chunked=self.chunked_pooling)
            if not linear:
                watched = watched + gather(self.history_features(encodings))
        pooled = self.pooling(watched, mask, training=training, every_position=every_position,
                              chunked=self.chunked_pooling)
        if linear and feature_mean is not None:
            pooled = pooled + self.history_features(feature_mean)
        parts = [pooled]
        user_id = None
        if self.user_id_embedding is not None or self.features is not None:
            user = tf.cast(inputs["user"], tf.int32)
            if self.user_id_embedding is not None:
                # Padding and unknown users get a zero vector, not an untrained row.
                known = tf.cast(user >= MASK_BELOW, tf.float32)[:, tf.newaxis]
                user_id = self.user_id_embedding(user) * known
                if not self.user_id_gate:
                    parts.append(user_id)
            if self.features is not None:
                parts.append(self.features(user))
        if self.use_example_age:
            age = inputs.get("example_age")
            age = tf.zeros(tf.shape(history)[:1]) if age is None else tf.cast(age, tf.float32)
            parts.append(age[:, tf.newaxis])
        if every_position:  # the user's features and age join every position's state
            positions = tf.shape(pooled)[1]
            parts = [pooled] + [tf.repeat(part[:, tf.newaxis], positions, axis=1) for part in parts[1:]]
        x = self.mlp(tf.concat(parts, axis=-1))
        if self.content_projection is not None:  # W mean(features of the history): the content-match term's side
            term = self.content_projection(feature_mean)
            x = x + tf.concat([term] * self.heads, axis=-1)
        if self.user_id_gate:
            x = self.user_id_gate * (user_id[:, tf.newaxis] if every_position else user_id) + (
                1.0 - self.user_id_gate) * x
        if self.content_profile is not None:
            x = tf.concat([x, self.content_profile.history_mean(history, mask, chunked=self.chunked_pooling)], axis=-1)
        return self.normalize(x)

    def _history_item_encodings(self, history: tf.Tensor, training: bool) -> tuple[tf.Tensor, Callable]:
        """The item feature encodings the history reads and how its slots read them: ``gather(encodings)`` is
        ``[B, H, width]``, and so is ``gather(map(encodings))`` for a map of the encodings' last axis.

        In training, where the vocabulary has at most :data:`ENCODE_EVERY_ITEM_ROWS` rows, every item is encoded
        once a step (``[V, width]``) and the slots gather from it: MovieLens-1M's 3.7k items against a batch's 1024 x
        50 slots; a map (the attention pooling's projection ``P``) is then applied per item, not per slot. A larger
        catalogue, and inference (a few users), encode per slot (``gather`` the identity)."""
        if training and self.item_features.vocab_size <= ENCODE_EVERY_ITEM_ROWS:
            return self.item_features.encode_all(), lambda table: tf.gather(table, history)
        return self.item_features(history), lambda values: values

    def normalize(self, x: tf.Tensor) -> tf.Tensor:
        """The output's normalisation, also of a mean of outputs (``TwoTowerModel.user_vectors``): each head of the
        towers' part L2-normalised when ``l2_normalize``, the content profile's part (if any) to norm ``sqrt(g)``."""
        own = x[..., :self.output_dim]
        if self.l2_normalize:
            own = tf.concat([tf.math.l2_normalize(head, axis=-1) for head in tf.split(own, self.heads, axis=-1)],
                            axis=-1)
        if self.content_profile is None:
            return own
        profile = x[..., self.output_dim:]
        return tf.concat([own, self.content_profile.scale * tf.math.l2_normalize(profile, axis=-1)], axis=-1)
