"""Building blocks of the towers: per-index feature tables, masked pooling, MLPs, seeded initialisers.

Features are gathered *by index* inside the graph from dense tables aligned to a vocabulary (row i describes the id
with index i; rows 0 and 1 are padding and unknown), so a tower can embed any indices: a batch's positives, sampled
negatives or the whole catalogue, with no feature lookups outside TensorFlow.
"""

from __future__ import annotations

import itertools
from typing import Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.errors import InputError

MASK_BELOW = 2  # indices 0 (padding) and 1 (out of vocabulary) never contribute
OOV_ROW = 1  # the unknown-id row of an id table: what cold items (and dropped ids) read
POSITION_CHUNK = 10  # positions per partial sum in sum_over_positions (10 fused best at H = 50; 8 and 16 less well)
IN_PLACE_MIN_BYTES = 1 << 30  # EmbeddingTable fills tables from this size in place, block by block
IN_PLACE_BLOCK_BYTES = 1 << 25  # bytes per block of that fill


class Initializers:
    """Seeded initialisers: each call gets the next seed, so a model built twice from one seed is identical."""

    def __init__(self, seed: int):
        self._seeds = itertools.count(int(seed))

    def embedding(self) -> tf.keras.initializers.Initializer:
        return tf.keras.initializers.RandomUniform(-0.05, 0.05, seed=next(self._seeds))

    def dense(self) -> tf.keras.initializers.Initializer:
        return tf.keras.initializers.GlorotUniform(seed=next(self._seeds))


@tf.keras.utils.register_keras_serializable(package="retrieval")
class EmbeddingTable(tf.keras.layers.Embedding):
    """Keras ``Embedding`` whose large tables are initialised in place, block by block.

    The stock ``RandomUniform`` draws the whole ``[V, d]`` table as one tensor and then scales and shifts it, each
    step a table-sized temporary: building a 10M x 128 item table (5.1 GB) ran out of memory on a 24 GiB machine
    before training began. From :data:`IN_PLACE_MIN_BYTES` the variable starts at zero, and blocks of
    :data:`IN_PLACE_BLOCK_BYTES` get ``U(minval, maxval)`` draws of ``tf.random.stateless_uniform`` seeded by (the
    initialiser's seed, the block's first row), written by row scatters. The same seed gives the same table (a
    different draw from the stock initialiser's), and the peak is the table and a few blocks. Smaller tables, other
    initialisers and tables built under a distribution strategy (mirrored or sharded variables) take Keras's path
    unchanged. Written here because neither Keras nor TensorFlow initialises a variable in place."""

    def build(self, input_shape=None):
        init = self.embeddings_initializer
        if (self.input_dim * self.output_dim * 4 < IN_PLACE_MIN_BYTES or tf.distribute.has_strategy()
                or type(init) is not tf.keras.initializers.RandomUniform):
            return super().build(input_shape)
        self.embeddings = self.add_weight(shape=(self.input_dim, self.output_dim), initializer="zeros",
                                          name="embeddings", regularizer=self.embeddings_regularizer,
                                          constraint=self.embeddings_constraint, experimental_autocast=False)
        rows = max(1, IN_PLACE_BLOCK_BYTES // (4 * self.output_dim))
        seed = int(init.seed) if init.seed is not None else int(np.random.default_rng().integers(1 << 31))
        with tf.init_scope():
            for start in range(0, self.input_dim, rows):
                stop = min(start + rows, self.input_dim)
                block = tf.random.stateless_uniform([stop - start, self.output_dim], [seed, start], init.minval,
                                                    init.maxval, self.embeddings.dtype)
                # A row scatter writes in place; a slice assignment copied the whole table first (measured).
                self.embeddings.scatter_update(tf.IndexedSlices(block, tf.range(start, stop)))
        self.built = True


def feature_kind(table: np.ndarray) -> str:
    """Kind of a per-index feature table: integer [V] -> "categorical", integer [V, M] (0-padded) -> "multi",
    floating [V] or [V, k] -> "numeric"."""
    if np.issubdtype(table.dtype, np.integer) and table.ndim in (1, 2):
        return "categorical" if table.ndim == 1 else "multi"
    if np.issubdtype(table.dtype, np.floating) and table.ndim in (1, 2):
        return "numeric"
    raise ValueError(f"feature table of dtype {table.dtype} and rank {table.ndim} is not categorical, multi or numeric")


def mlp(hidden_units: Sequence[int], output_dim: int, init: Initializers, name: str) -> tf.keras.Sequential:
    """ReLU hidden layers followed by a linear layer to ``output_dim``."""
    layers = [tf.keras.layers.Dense(u, activation="relu", kernel_initializer=init.dense()) for u in hidden_units]
    layers.append(tf.keras.layers.Dense(output_dim, kernel_initializer=init.dense()))
    return tf.keras.Sequential(layers, name=name)


class FeatureTables(tf.keras.layers.Layer):
    """Encodes the features of ids given by index: categorical -> embedding, multi-valued -> masked mean of the
    value embeddings (value 0 is padding), numeric -> as is. The tables are non-trainable variables (saved with the
    model, not copied into every traced graph)."""

    def __init__(self, tables: Mapping[str, np.ndarray], vocab_size: int, embedding_dim: int, init: Initializers,
                 name: str = "features"):
        super().__init__(name=name)
        self.names = sorted(tables)
        self.vocab_size = int(vocab_size)
        self._tables, self._embeddings, self._kinds = {}, {}, {}
        for feature in self.names:
            table = np.asarray(tables[feature])
            if table.shape[0] != vocab_size:
                raise InputError(f"feature table has {table.shape[0]} rows, the vocabulary {vocab_size}", field=feature)
            kind = feature_kind(table)
            if kind != "numeric" and table.min() < 0:
                raise InputError("categorical feature values must be non-negative indices", field=feature)
            self._kinds[feature] = kind
            dtype = tf.float32 if kind == "numeric" else tf.int32
            self._tables[feature] = tf.Variable(table.astype(dtype.as_numpy_dtype), trainable=False,
                                                name=f"{feature}_table")
            if kind != "numeric":
                self._embeddings[feature] = tf.keras.layers.Embedding(
                    int(table.max()) + 1, embedding_dim, embeddings_initializer=init.embedding(), name=f"{feature}_emb")

    @property
    def kinds(self) -> dict[str, str]:
        """``{feature: kind}`` ("categorical", "multi" or "numeric"; text features are coded as multi)."""
        return dict(self._kinds)

    def value_shapes(self) -> dict[str, tuple]:
        """Per feature, the shape of one id's coded values (``()`` or ``(M,)``/``(k,)``) and its dtype."""
        return {feature: (tuple(self._tables[feature].shape[1:]), self._tables[feature].dtype)
                for feature in self.names}

    def call(self, indices: tf.Tensor) -> tf.Tensor:
        """Returns the concatenated feature encodings of ``indices`` [...] -> [..., width]."""
        return self.encode({feature: tf.gather(self._tables[feature], indices) for feature in self.names},
                           indices.shape.rank)

    def encode_all(self) -> tf.Tensor:
        """The encodings of every vocabulary row, ``[vocab_size, width]``: what :meth:`call` gives for
        ``tf.range(vocab_size)``, without the gather."""
        return self.encode({feature: tf.convert_to_tensor(self._tables[feature]) for feature in self.names}, 1)

    def encode(self, values: Mapping[str, tf.Tensor], rank: int) -> tf.Tensor:
        """Encodes coded feature values (each ``[...]`` of rank ``rank``, plus ``[M]``/``[k]`` for multi-valued and
        vector features, as the tables hold them): ``[..., width]``. What a catalogue refresh calls on a new table."""
        parts = []
        for feature in self.names:
            coded, kind = values[feature], self._kinds[feature]
            if kind == "numeric":
                parts.append(coded if coded.shape.rank > rank else coded[..., tf.newaxis])
            elif kind == "categorical":
                parts.append(self._embeddings[feature](coded))
            else:
                parts.append(masked_mean(self._embeddings[feature](coded), coded > 0))
        return tf.concat(parts, axis=-1)


class ItemIdRows(tf.keras.layers.Layer):
    """Item indices -> the rows the item-id tables are read at.

    An item without training interactions (a cold catalogue item) reads the unknown-id row (OOV, index 1): its own
    row was never trained, so its vector comes from its features. In training a seeded share ``dropout`` of the
    (warm) ids reads the OOV row too: item-id dropout (DropoutNet, Volkovs et al. 2017, section 3.2), so that the
    feature path learns to place an item alone, on the candidate side and in the histories alike. Padding (0) and
    OOV stay as they are (the history mask reads the indices, not the rows)."""

    def __init__(self, warm: np.ndarray, dropout: float = 0.0, seed: Optional[int] = None, name: str = "item_id_rows"):
        super().__init__(name=name)
        rows = np.where(np.asarray(warm, bool), np.arange(len(warm)), OOV_ROW).astype(np.int32)
        rows[:MASK_BELOW] = np.arange(MASK_BELOW)
        self.rows = tf.Variable(rows, trainable=False, name="rows")
        self.dropout = float(dropout)
        # Keras's Dropout draws the seeded Bernoulli mask (XLA-compatible, a new draw every step).
        self._mask = tf.keras.layers.Dropout(self.dropout, seed=seed) if self.dropout > 0 else None

    def call(self, indices: tf.Tensor, training: bool = False) -> tf.Tensor:
        rows = tf.gather(self.rows, indices)
        if not training or self._mask is None:
            return rows
        dropped = self._mask(tf.ones_like(rows, tf.float32), training=True) == 0
        return tf.where(dropped & (rows >= MASK_BELOW), tf.fill(tf.shape(rows), OOV_ROW), rows)


def masked_mean(embeddings: tf.Tensor, mask: tf.Tensor, *, chunked: bool = False) -> tf.Tensor:
    """Mean of ``embeddings`` [..., H, D] over the positions where ``mask`` [..., H] holds; zeros when none does.
    ``chunked``: the sum over positions is ``sum_over_positions`` (for XLA-compiled steps; same values)."""
    weights = tf.cast(mask, embeddings.dtype)[..., tf.newaxis]
    masked = embeddings * weights
    total = sum_over_positions(masked) if chunked else tf.reduce_sum(masked, axis=-2)
    return total / tf.maximum(tf.reduce_sum(weights, axis=-2), 1.0)


@tf.custom_gradient
def sum_over_positions(x: tf.Tensor) -> tf.Tensor:
    """``tf.reduce_sum(x, axis=-2)`` for ``x`` [..., H, D], computed as the sum of the sums over slices of at most
    ``POSITION_CHUNK`` positions, with ``reduce_sum``'s gradient (one broadcast).

    Why: XLA on CPU rewrites a sum over more than 32 positions into a reduce-window it does not fuse with the sum's
    producer, so a pooled history lookup writes the gathered, masked ``[B, H, D]`` block out and reads it back.
    Sums over a few positions fuse with the gather and the mask into one loop: the pooled ``[B, D]`` is read straight
    from the table (``bench_training``'s step: ~12% more examples per CPU second; ``benchmarks/JOURNAL.md``). The
    custom gradient keeps the backward pass one broadcast (each slice's own gradient would pad it to ``[B, H, D]``).
    Uncompiled, one reduction is faster (the slices are copies): ``masked_mean(chunked=...)`` chooses."""
    positions = x.shape[-2]
    if positions is None:  # not known when traced: one reduction
        total = tf.reduce_sum(x, axis=-2)
    else:
        total = tf.add_n([tf.reduce_sum(x[..., start:start + POSITION_CHUNK, :], axis=-2)
                          for start in range(0, positions, POSITION_CHUNK)])

    def gradient(upstream: tf.Tensor) -> tf.Tensor:
        return tf.broadcast_to(upstream[..., tf.newaxis, :], tf.shape(x))

    return total, gradient


def interleaved_parts(history: tf.Tensor, part_size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Deals each row's valid items (``history`` [B, H], indices >= ``MASK_BELOW``) round-robin into ``k = max(1,
    ceil(n / part_size))`` parts of at most ``part_size`` items: the r-th valid item goes to part ``r mod k``, slot
    ``r div k``. Returns the parts [B, ceil(H / part_size), part_size] (padded with 0) and which of them a row
    uses [B, ceil(H / part_size)] (a row with no valid item uses one, empty, part)."""
    history = tf.cast(history, tf.int32)
    valid = history >= MASK_BELOW
    count = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1)
    used = tf.maximum(1, (count + part_size - 1) // part_size)[:, tf.newaxis]
    rank = tf.cumsum(tf.cast(valid, tf.int32), axis=1, exclusive=True)
    rows = tf.broadcast_to(tf.range(tf.shape(history)[0])[:, tf.newaxis], tf.shape(history))
    where = tf.boolean_mask(tf.stack([rows, rank % used, rank // used], axis=-1), valid)
    max_parts = (tf.shape(history)[1] + part_size - 1) // part_size
    parts = tf.scatter_nd(where, tf.boolean_mask(history, valid), [tf.shape(history)[0], max_parts, part_size])
    return parts, tf.range(max_parts)[tf.newaxis, :] < used
