"""Item2Vec (Barkan & Koenigstein 2016, "Item2Vec: Neural Item Embedding for Collaborative Filtering"): word2vec's
skip-gram with negative sampling (SGNS; Mikolov et al. 2013) over users' item sequences.

Objective (Item2Vec eq. 2-3, word2vec eq. 4), for every skip-gram pair (target ``i``, context ``j``) of
``retrieval.data.examples.skipgram_pairs`` (items at most ``window`` positions apart in a user's time-ordered sequence,
or a window drawn per user and epoch from U{1..window} with ``shrink_window``, word2vec's dynamic window; frequent items
subsampled with ``p_keep = min(1, sqrt(t/f) + t/f)``, a fresh draw each epoch):

    loss(i, j) = -log sigmoid(u_i . v_j) - sum_{k=1..K} log sigmoid(-u_i . v_{n_k}),   n_k ~ P(n) = count_n^0.75 / Z

computed by ``retrieval.losses.sgns``. ``u`` is the input (target) table, ``v`` the output (context) table, separate
as in word2vec; the output table starts at zero and the input table at U(-0.5/d, 0.5/d) (word2vec's init). The item
vectors are the input table (``vectors="input"``, word2vec's choice), or the mean of both (``"average"``). Items are
compared by cosine similarity, so the export's ``metric`` is ``"cosine"``.

Negatives: each pair's ``K`` negatives are ``K`` draws from the noise. With ``negative_group = g > 1``, ``g``
consecutive pairs of the (shuffled) batch share one draw of ``K`` negatives: every pair's negatives are still ``K``
independent noise draws, so the expected gradient is unchanged, only correlated within a group; it turns ``B * K``
row gathers and scatter updates per step into ``B * K / g`` and the per-pair dot products into one small matmul per
group. ``g = 1`` is word2vec's independent sampling.

Training: :func:`train_item2vec` (sparse SGD with word2vec's linearly decaying learning rate; see
``retrieval.models.item2vec_train``). Export: ``retrieval.export.export_item2vec`` writes a run's ``item_embeddings.parquet`` and
a mean-pooling ``user_tower`` SavedModel, so evaluation and serving treat an Item2Vec run like any other.
"""

from __future__ import annotations

from typing import Optional

import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval import checkpoints
from retrieval.artifacts import PathLike
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import InputError
from retrieval.losses import logistic_from_logits
from retrieval.models import item2vec_train

VECTORS = ("input", "average")


def default_item2vec_config() -> ml_collections.ConfigDict:
    """Returns the documented default Item2Vec configuration (the ``config.item2vec`` section).

    Defaults were tuned on MovieLens-1M (users 1-2999, leave-last-one-out next-item recall@20) against gensim's
    word2vec with the same settings; ``benchmarks/bench_item2vec.py`` reproduces the comparison.
    """
    config = ml_collections.ConfigDict()
    # Dimension d of the item vectors.
    config.dim = 64
    # Pairs join items at most this many positions apart in a user's time-ordered sequence (both directions).
    config.window = 5
    # word2vec's dynamic window (gensim's shrink_windows, on by default there too): each user's window is drawn
    # from U{1..window} every epoch, so near items weigh more ((window - k + 1) / window for items k apart) and an
    # epoch trains ~(window + 1) / (2 * window) of the pairs. False: every pair within window, every epoch.
    config.shrink_window = True
    # K: negatives per pair, drawn from count ** noise_exponent (0.75 as in word2vec).
    config.negatives = 5
    config.noise_exponent = 0.75
    # g: consecutive pairs of a shuffled batch sharing one draw of K negatives (1: independent negatives, as in
    # word2vec; larger is faster, with the same expected gradient). Must divide batch_size.
    config.negative_group = 128
    # Frequent-item subsampling threshold t: an occurrence of an item of frequency f is kept with probability
    # min(1, sqrt(t/f) + t/f), drawn again every epoch. 0: no subsampling.
    config.subsample = 1e-3
    # Passes over the pairs.
    config.epochs = 5
    # Pairs per SGD step. The loss is summed over the batch, so learning_rate is a per-pair step as in word2vec.
    config.batch_size = 8192
    # Learning rate, decayed linearly with training progress down to min_learning_rate (word2vec / gensim: 0.025 and
    # 0.0001).
    config.learning_rate = 0.025
    config.min_learning_rate = 0.0001
    # Item vectors: "input" (the target table, as word2vec) or "average" (mean of the target and context tables).
    config.vectors = "input"
    # Log loss and pairs/s every this many steps; checkpoint every this many steps (and at each epoch's end).
    config.log_every_steps = 200
    config.checkpoint_every_steps = 1000
    config.keep_checkpoints = 2
    # Seed of the initialisation, subsampling, shuffling and negatives (the pipelines set it from the top-level seed).
    config.seed = 42
    return config


class Item2Vec(tf.keras.Model):
    """SGNS model with separate target (input) and context (output) item tables of shape ``[num_items, dim]``.

    ``call({"target": [B], "context": [B], "negatives": [B // g, K]})`` returns the per-pair loss ``[B]``.
    """

    def __init__(self, num_items: int, dim: int, negative_group: int = 1, seed: int = 0, name: str = "item2vec"):
        super().__init__(name=name)
        self.num_items, self.dim, self.negative_group = int(num_items), int(dim), int(negative_group)
        if self.negative_group < 1:
            raise InputError("negative_group must be >= 1", field="item2vec.negative_group")
        init = tf.keras.initializers.RandomUniform(-0.5 / dim, 0.5 / dim, seed=seed)
        self.target_embedding = tf.keras.layers.Embedding(num_items, dim, embeddings_initializer=init,
                                                          name="target_embedding")
        self.context_embedding = tf.keras.layers.Embedding(num_items, dim, embeddings_initializer="zeros",
                                                           name="context_embedding")
        self.target_embedding.build(None)
        self.context_embedding.build(None)

    def _grouped_logits(self, target: tf.Tensor, context: tf.Tensor,
                        negatives: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(u, v, s+, s)``: target and context vectors as groups ``[G, g, d]`` (group ``r`` = pairs ``r * g ..
        r * g + g - 1``, sharing the negatives ``[G, K, d]``), their logits ``s+ = u . v`` ``[G, g]`` and the
        negative logits ``s_k = u . n_k`` ``[G, g, K]`` (one batched matmul)."""
        u, v = (tf.reshape(x, [-1, self.negative_group, self.dim]) for x in (target, context))
        return u, v, tf.reduce_sum(u * v, axis=-1), tf.matmul(u, negatives, transpose_b=True)

    def pair_loss(self, target: tf.Tensor, context: tf.Tensor, negatives: tf.Tensor) -> tf.Tensor:
        """``sgns`` per pair from vectors: target, context ``[B, d]``, negatives ``[B // g, K, d]`` (row ``r`` serves
        pairs ``r * g .. r * g + g - 1``)."""
        _, _, positive, negative = self._grouped_logits(target, context, negatives)
        return tf.reshape(logistic_from_logits(positive, negative), [-1])

    def pair_gradients(self, target: tf.Tensor, context: tf.Tensor, negatives: tf.Tensor,
                       weights: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(loss [B], d_target [B, d], d_context [B, d], d_negatives [B // g, K, d])``: the per-pair ``pair_loss``
        and the gradients of ``sum_i weights_i * loss_i`` with respect to the three inputs, in closed form.

        With ``s+ = u . v`` and ``s_k = u . n_k``: ``d loss / d s+ = sigmoid(s+) - 1`` and ``d loss / d s_k =
        sigmoid(s_k)`` (word2vec's update, Mikolov et al. 2013), so ``d_u = (sigmoid(s+) - 1) v + sum_k sigmoid(s_k)
        n_k``, ``d_v = (sigmoid(s+) - 1) u`` and a shared negative gets the sum over its group. Written out by hand
        because automatic differentiation costs about twice as many ops per training step;
        ``tests/test_item2vec.py`` checks it against ``tf.GradientTape``."""
        u, v, positive, negative = self._grouped_logits(target, context, negatives)
        weights = tf.reshape(weights, [-1, self.negative_group])
        d_positive = ((tf.sigmoid(positive) - 1.0) * weights)[..., tf.newaxis]  # [G, g, 1]
        d_negative = tf.sigmoid(negative) * weights[..., tf.newaxis]  # [G, g, K]
        d_target = d_positive * v + tf.matmul(d_negative, negatives)
        d_negatives = tf.matmul(d_negative, u, transpose_a=True)  # [G, K, d]
        return (tf.reshape(logistic_from_logits(positive, negative), [-1]), tf.reshape(d_target, [-1, self.dim]),
                tf.reshape(d_positive * u, [-1, self.dim]), d_negatives)

    def call(self, inputs: dict) -> tf.Tensor:
        return self.pair_loss(self.target_embedding(inputs["target"]), self.context_embedding(inputs["context"]),
                              self.context_embedding(inputs["negatives"]))

    def vectors(self, which: str = "input") -> np.ndarray:
        """Item vectors ``[num_items, dim]`` float32 by index (rows 0 and 1, pad and OOV, are zero)."""
        if which not in VECTORS:
            raise InputError(f"vectors must be one of {VECTORS}, got {which!r}", field="item2vec.vectors")
        table = self.target_embedding.embeddings.numpy()
        if which == "average":
            table = (table + self.context_embedding.embeddings.numpy()) / 2
        table[:NUM_RESERVED] = 0.0
        return table.astype(np.float32)


def _check(config: ml_collections.ConfigDict, item_vocab: Vocabulary) -> None:
    positive = ("dim", "window", "negatives", "epochs", "batch_size", "negative_group")
    for key in positive:
        if int(config[key]) < 1:
            raise InputError(f"{key} must be >= 1, got {config[key]}", field=f"item2vec.{key}")
    if config.batch_size % config.negative_group:
        raise InputError(f"negative_group {config.negative_group} must divide batch_size {config.batch_size}",
                         field="item2vec.negative_group")
    if config.vectors not in VECTORS:
        raise InputError(f"vectors must be one of {VECTORS}, got {config.vectors!r}", field="item2vec.vectors")
    if not np.any(item_vocab.counts[NUM_RESERVED:] > 0):
        raise InputError("the item vocabulary has no counted item", field="item2vec")


def train_item2vec(config: ml_collections.ConfigDict, user_idx: np.ndarray, item_idx: np.ndarray,
                   timestamps: Optional[np.ndarray], item_vocab: Vocabulary,
                   checkpoint_dir: Optional[PathLike] = None) -> np.ndarray:
    """Trains Item2Vec on training interactions and returns the item vectors ``[item_vocab.size, dim]`` by index.

    Args:
      config: ``default_item2vec_config()`` (or the pipeline's ``config.item2vec``).
      user_idx, item_idx: one entry per interaction (vocabulary indices; OOV/pad items are dropped).
      timestamps: orders each user's sequence (stable: ties keep input order); None: the input order.
      item_vocab: the training item vocabulary (table size; counts for subsampling and the noise distribution).
      checkpoint_dir: resume from / save to this directory; a finished run returns its vectors without training.
    """
    _check(config, item_vocab)
    model = Item2Vec(item_vocab.size, config.dim, config.negative_group, seed=config.seed)
    state = {"epoch": tf.Variable(0, dtype=tf.int64, name="epoch"), "step": tf.Variable(0, dtype=tf.int64, name="step")}
    manager = None
    if checkpoint_dir is not None:
        checkpoint = tf.train.Checkpoint(model=model, **state)
        manager = tf.train.CheckpointManager(checkpoint, str(checkpoint_dir), max_to_keep=config.keep_checkpoints)
        restored = checkpoints.restore_newest_intact(checkpoint, manager)
        if restored:
            logging.info("item2vec resumed from %s (epoch %d, step %d)", restored, int(state["epoch"]),
                         int(state["step"]))
    if int(state["epoch"]) < config.epochs:
        user_idx = np.asarray(user_idx, np.int64)
        order = (np.lexsort((np.asarray(timestamps), user_idx)) if timestamps is not None
                 else np.argsort(user_idx, kind="stable"))
        sampler = item2vec_train.NoiseSampler(item_vocab.counts, config.noise_exponent)
        runner = item2vec_train.EpochRunner(model, sampler, config)
        item2vec_train.train_epochs(runner, user_idx[order], np.asarray(item_idx)[order], item_vocab.counts, config,
                                    state, manager)
    return model.vectors(config.vectors)


class PretrainedInitializer(tf.keras.initializers.Initializer):
    """Initialises a ``[V, d]`` table with given vectors (e.g. Item2Vec's) instead of random values."""

    def __init__(self, vectors: np.ndarray):
        self.vectors = np.asarray(vectors, np.float32)

    def __call__(self, shape, dtype=None, **kwargs):
        if tuple(shape) != self.vectors.shape:
            raise InputError(f"pretrained vectors have shape {self.vectors.shape}, the table {tuple(shape)}")
        return tf.constant(self.vectors, dtype=dtype or tf.float32)


def item2vec_initializer(vectors: np.ndarray, norm: Optional[float] = None) -> PretrainedInitializer:
    """An ``embeddings_initializer`` that starts a two-tower item-id table (``[item_vocab.size, id_embedding_dim]``,
    same vocabulary) from Item2Vec vectors; with ``norm``, rows are rescaled so their mean L2 norm is ``norm`` (e.g.
    the scale of the random init, ~0.05 * sqrt(d / 3)), keeping their relative norms and directions."""
    vectors = np.asarray(vectors, np.float32)
    if norm is not None:
        mean_norm = float(np.linalg.norm(vectors[NUM_RESERVED:], axis=1).mean()) if len(vectors) > NUM_RESERVED else 0
        vectors = vectors * (norm / mean_norm if mean_norm > 0 else 1.0)
    return PretrainedInitializer(vectors)
