"""Item2Vec (Barkan & Koenigstein 2016, "Item2Vec: Neural Item Embedding for Collaborative Filtering"): word2vec's
skip-gram with negative sampling (SGNS; Mikolov et al. 2013) over users' item sequences.

Objective (Item2Vec eq. 2-3, word2vec eq. 4), for every skip-gram pair (target ``i``, context ``j``) of
``retrieval.data.examples.skipgram_pairs`` (items at most ``window`` positions apart in a user's time-ordered sequence,
or a window drawn per user and epoch from U{1..window} with ``shrink_window``, word2vec's dynamic window; frequent items
subsampled with ``p_keep = min(1, sqrt(t/f) + t/f)``, a fresh draw each epoch):

    loss(i, j) = -log sigmoid(u_i . v_j) - sum_{k=1..K} log sigmoid(-u_i . v_{n_k}),   n_k ~ P(n) = count_n^0.75 / Z

(``retrieval.losses.sgns``; ``tests/test_item2vec.py`` checks the training step against its autodiff). ``u`` is
the input (target) table, ``v`` the output (context) table, separate as in word2vec; the output table starts at
zero and the input table at U(-0.5/d, 0.5/d) (word2vec's init). The item vectors are the input table
(``vectors="input"``, word2vec's choice), or the mean of both (``"average"``). Items are compared by cosine
similarity, so the export's ``metric`` is ``"cosine"``.

Negatives: each pair's ``K`` negatives are ``K`` draws from the noise. With ``negative_group = g > 1``, ``g``
consecutive pairs of the (shuffled) epoch share one draw of ``K`` negatives: every pair's negatives are still ``K``
independent noise draws, so the expected gradient is unchanged, only correlated within a group. ``g = 1`` (the
default) is word2vec's independent sampling.

Training: :func:`train_item2vec`, word2vec's per-pair SGD with a linearly decaying learning rate in a compiled loop
(``retrieval.models.item2vec_train``; ``docs/item2vec.md`` says why it is fast). It imports no TensorFlow unless it
checkpoints. Export: ``retrieval.export.export_item2vec`` writes a run's ``item_embeddings.parquet`` and a mean-pooling
``user_tower`` SavedModel, so evaluation and serving treat an Item2Vec run like any other.
"""

from __future__ import annotations

from typing import Optional

import ml_collections
import numpy as np
from absl import logging

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.artifacts import PathLike
from retrieval.config_keys import (
    BATCH,
    DIM,
    EPOCHS,
    MAX_CHECKPOINTS,
    MAX_HISTORY,
    MAX_WORKERS,
    SEED,
    STEPS,
    Key,
    Needs,
    Section,
    flag,
    integer,
    number,
    one_of,
)
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import InputError
from retrieval.models import item2vec_train

VECTORS = ("input", "average")


# The item2vec section (``config.item2vec``), declared once (retrieval.config_keys): each key's default, rule and
# meaning. Defaults were tuned on MovieLens-1M (users 1-2999, leave-last-one-out next-item recall@20) against gensim's
# word2vec with the same settings; ``benchmarks/bench_item2vec.py`` reproduces the comparison.
ITEM2VEC = Section("item2vec", (
    Key("dim", 64, DIM,
        "Dimension d of the item vectors."),
    Key("window", 5, integer(1, MAX_HISTORY),
        "Pairs join items at most this many positions apart in a user's time-ordered sequence (both directions)."),
    Key("shrink_window", True, flag(),
        "word2vec's dynamic window (gensim's shrink_windows, on by default there too): each user's window is drawn from "
        "U{1..window} every epoch, so near items weigh more ((window - k + 1) / window for items k apart) and an epoch "
        "trains ~(window + 1) / (2 * window) of the pairs. False: every pair within window, every epoch."),
    Key("negatives", 5, integer(1, 10_000),
        "K: negatives per pair, drawn from count ** noise_exponent (0.75 as in word2vec)."),
    Key("noise_exponent", 0.75, number(0, 10)),
    Key("negative_group", 1, BATCH,
        "g: consecutive pairs of a shuffled epoch sharing one draw of K negatives (1: independent negatives, as in "
        "word2vec; the expected gradient is the same for any g). Must divide batch_size.",
        needs=(Needs(lambda group, c: c["item2vec.batch_size"] % group == 0,
                     lambda group, c: f"must divide item2vec.batch_size {c['item2vec.batch_size']}, got {group}"),)),
    Key("subsample", 0.001, number(0, 1),
        "Frequent-item subsampling threshold t: an occurrence of an item of frequency f is kept with probability min(1, "
        "sqrt(t/f) + t/f), drawn again every epoch. 0: no subsampling."),
    Key("epochs", 5, EPOCHS,
        "Passes over the pairs."),
    Key("batch_size", 8192, BATCH,
        "Pairs per step: every pair is its own SGD update (word2vec's); a step is the unit of the learning-rate "
        "schedule (constant within a step), of logging, checkpointing and resumption."),
    Key("learning_rate", 0.025, number(0, 100, low_open=True),
        "Learning rate, decayed linearly with training progress down to min_learning_rate (word2vec / gensim: 0.025 and "
        "0.0001)."),
    Key("min_learning_rate", 0.0001, number(0, 100)),
    Key("threads", 1, integer(1, MAX_WORKERS),
        "Threads running the SGD loop. 1: a run is bit-reproducible under its seed (and resumes exactly). n > 1: "
        "Hogwild (Recht et al. 2011, as word2vec's and gensim's workers): n threads update the shared tables without "
        "locks, each on its own part of every chunk of steps; ~n times faster on n free cores, not reproducible."),
    Key("vectors", "input", one_of(VECTORS),
        'Item vectors: "input" (the target table, as word2vec) or "average" (mean of the target and context tables).'),
    Key("log_every_steps", 200, STEPS,
        "Log loss and pairs/s every this many steps; checkpoint every this many steps (and at each epoch's end)."),
    Key("checkpoint_every_steps", 1000, STEPS),
    Key("keep_checkpoints", 2, integer(1, MAX_CHECKPOINTS)),
    Key("seed", 42, SEED,
        "Seed of the initialisation, subsampling, shuffling and negatives (the pipelines set it from the top-level "
        "seed)."),
), __name__)


def default_item2vec_config() -> ml_collections.ConfigDict:
    """Returns a new ``config.item2vec`` section of the declared defaults."""
    return ITEM2VEC.config()


def _check(config: ml_collections.ConfigDict, item_vocab: Vocabulary) -> None:
    ITEM2VEC.check(config)
    if config.batch_size % config.negative_group:
        raise InputError(f"negative_group {config.negative_group} must divide batch_size {config.batch_size}",
                         field="item2vec.negative_group")
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
    tables = item2vec_train.initial_tables(item_vocab.size, config.dim, config.seed)
    state = {"epoch": 0, "step": 0}
    checkpoint = None
    if checkpoint_dir is not None:
        checkpoint = _TableCheckpoint(tables, state, checkpoint_dir, config.keep_checkpoints)
    if state["epoch"] < config.epochs:
        user_idx = np.asarray(user_idx, np.int64)
        order = (np.lexsort((np.asarray(timestamps), user_idx)) if timestamps is not None
                 else np.argsort(user_idx, kind="stable"))
        sampler = item2vec_train.NoiseSampler(item_vocab.counts, config.noise_exponent)
        item2vec_train.train_epochs(tables, sampler, user_idx[order], np.asarray(item_idx)[order], item_vocab.counts,
                                    config, state, checkpoint.save if checkpoint is not None else None)
    return item2vec_train.table_vectors(*tables, config.vectors)


class _TableCheckpoint:
    """Checkpoints of the two tables and the training position (``state``) in ``directory`` (TensorFlow's format
    and ``checkpoints.restore_newest_intact``, so a damaged newest checkpoint falls back to the previous one).
    Restores the newest intact one into ``tables`` and ``state`` on construction. TensorFlow is imported here only:
    training without checkpoints does not load it."""

    def __init__(self, tables: tuple[np.ndarray, np.ndarray], state: dict, directory: PathLike, keep: int):
        import tensorflow as tf

        from retrieval import checkpoints

        self.tables, self.state = tables, state
        self.variables = {"target": tf.Variable(tables[0], name="target"),
                          "context": tf.Variable(tables[1], name="context"),
                          "epoch": tf.Variable(0, dtype=tf.int64, name="epoch"),
                          "step": tf.Variable(0, dtype=tf.int64, name="step")}
        checkpoint = tf.train.Checkpoint(**self.variables)
        self.manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=keep)
        restored = checkpoints.restore_newest_intact(checkpoint, self.manager)
        if restored:
            tables[0][...], tables[1][...] = self.variables["target"].numpy(), self.variables["context"].numpy()
            state["epoch"], state["step"] = int(self.variables["epoch"]), int(self.variables["step"])
            logging.info("item2vec resumed from %s (epoch %d, step %d)", restored, state["epoch"], state["step"])

    def save(self) -> None:
        for name, table in zip(("target", "context"), self.tables, strict=True):
            self.variables[name].assign(table)
        self.variables["epoch"].assign(self.state["epoch"])
        self.variables["step"].assign(self.state["step"])
        self.manager.save()


class PretrainedInitializer:
    """Initialises a ``[V, d]`` table with given vectors (e.g. Item2Vec's) instead of random values (a callable
    ``embeddings_initializer``; Keras accepts any)."""

    def __init__(self, vectors: np.ndarray):
        self.vectors = np.asarray(vectors, np.float32)

    def __call__(self, shape, dtype=None, **kwargs):
        if tuple(shape) != self.vectors.shape:
            raise InputError(f"pretrained vectors have shape {self.vectors.shape}, the table {tuple(shape)}")
        import tensorflow as tf

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
