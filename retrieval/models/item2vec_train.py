"""Item2Vec training internals: noise sampler, per-epoch skip-gram pairs and the sparse-SGD epoch loop.

The public entry point is :func:`retrieval.models.item2vec.train_item2vec`; this module holds the machinery it runs.

Speed (2 CPU cores): every epoch's pairs are built in numpy (``skipgram_pairs``, vectorized) and shuffled once, in
a background thread while the previous epoch trains, then fed to one ``tf.function`` that runs many steps in a
``tf.while_loop`` (no Python per step). A step gathers the rows it needs, computes the SGNS gradients of those rows
in closed form (``Item2Vec.pair_gradients``) and subtracts them with ``scatter_sub`` (plain SGD on the touched rows;
the rest of the tables is never read or written). The loss is summed over the batch and scaled by the learning rate,
so the update of a pair is word2vec's per-pair SGD step whatever the batch size. Negatives shared by groups of pairs
(``negative_group``) cut the scattered rows from ``B * (2 + K)`` to about ``2 * B`` per step. The scatters are
XLA-compiled: TensorFlow's CPU scatter kernel spends ~100 ns per 64-float row (and switches to a parallel version
with row locks from 1024 rows on), XLA's fused loop about a tenth of that (1.5x faster training on ML-1M).

Determinism: negatives are drawn with stateless ops keyed by ``(seed, epoch, step)``, windows, subsamples and
shuffles by numpy generators keyed by ``(seed, epoch)``, and XLA's scatter is a sequential loop (colliding rows
are summed in one fixed order), so a run is bit-reproducible under its seed and a run resumed from a checkpoint
continues the very same stream.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Optional

import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.data.examples import noise_distribution, skipgram_pairs
from retrieval.errors import InputError


def _generator(seed: int, *words: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), *words]))


class NoiseSampler(tf.Module):
    """Draws item indices from the SGNS noise ``P(i) = count_i^alpha / sum_j count_j^alpha`` (``noise_distribution``).

    A categorical over the noise, sampled by inversion: a stateless uniform ``u`` in [0, 1) (keyed by ``seed``) maps
    to the first index whose float64 CDF exceeds ``u`` (``tf.searchsorted``, O(log V) per draw). Chosen over
    ``tf.random.fixed_unigram_candidate_sampler``, whose state lives in the kernel: stateless draws make a run exactly
    reproducible and resumable from a checkpoint, and the CDF is a tensor rather than a V-long float list in the
    graph. Pad / OOV (count 0) are never drawn.
    """

    def __init__(self, counts: np.ndarray, alpha: float = 0.75):
        super().__init__(name="noise_sampler")
        cdf = np.cumsum(noise_distribution(counts, alpha))
        self.cdf = tf.constant(cdf / cdf[-1], tf.float64)  # last entry exactly 1, so every u < 1 finds an index

    def sample(self, shape, seed: tf.Tensor) -> tf.Tensor:
        """int32 indices of the given shape; ``seed`` is a stateless seed ``[2]`` (int32 or int64)."""
        uniform = tf.random.stateless_uniform([tf.reduce_prod(shape)], seed=seed, dtype=tf.float64)
        return tf.reshape(tf.searchsorted(self.cdf, uniform, side="right", out_type=tf.int32), shape)


def epoch_pairs(users: np.ndarray, items: np.ndarray, counts: np.ndarray, config: ml_collections.ConfigDict,
                epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """Shuffled (target, context) int32 arrays of one epoch: ``skipgram_pairs`` over time-ordered sequences
    (``users``/``items`` sorted by user, then time) with a fresh frequent-item subsample per epoch, as word2vec draws
    it again on every pass.

    With ``shrink_window``, each user gets a window ``b ~ U{1..window}`` for the epoch (word2vec's dynamic window,
    drawn per user and epoch instead of per target occurrence): a pair ``k`` positions apart is then trained with
    probability ``(window - k + 1) / window``, word2vec's expected weighting of near context, from about
    ``(window + 1) / (2 * window)`` of the pairs.
    """
    windows = np.full(int(users.max(initial=0)) + 1, config.window)
    if config.shrink_window:
        windows = _generator(config.seed, epoch, 2).integers(1, config.window + 1, size=len(windows))
    targets, contexts = [], []
    for window in np.unique(windows):
        chosen = windows[users] == window
        seed = int(_generator(config.seed, epoch, 0, int(window)).integers(2**63))
        pairs = skipgram_pairs(users[chosen], items[chosen], None, window=int(window),
                               subsample=config.subsample or None, counts=counts, seed=seed)
        targets.append(pairs["target"])
        contexts.append(pairs["context"])
    targets, contexts = np.concatenate(targets), np.concatenate(contexts)
    order = _generator(config.seed, epoch, 1).permutation(len(targets))
    return targets[order], contexts[order]


@tf.function(jit_compile=True)
def _scatter_sub(table: tf.Variable, rows: tf.Tensor, indices: tf.Tensor) -> None:
    """``table[indices] -= rows`` (repeated indices accumulate), XLA-compiled (see the module docstring)."""
    table.scatter_sub(tf.IndexedSlices(rows, indices))


class EpochRunner(tf.Module):
    """Runs SGD steps of one epoch's pairs on an ``Item2Vec`` model (see the module docstring)."""

    def __init__(self, model, sampler: NoiseSampler, config: ml_collections.ConfigDict):
        super().__init__(name="epoch_runner")
        self.model, self.sampler = model, sampler
        self.batch_size, self.negatives = int(config.batch_size), int(config.negatives)
        self.group = int(model.negative_group)
        self.seed, self.epochs = int(config.seed), int(config.epochs)
        self.learning_rate, self.min_learning_rate = float(config.learning_rate), float(config.min_learning_rate)

    def _step(self, targets: tf.Tensor, contexts: tf.Tensor, weights: tf.Tensor, seed: tf.Tensor,
              learning_rate: tf.Tensor) -> tf.Tensor:
        target_table = self.model.target_embedding.embeddings
        context_table = self.model.context_embedding.embeddings
        negatives = self.sampler.sample([self.batch_size // self.group, self.negatives], seed)
        u = tf.gather(target_table, targets)
        v = tf.gather(context_table, contexts)
        n = tf.gather(context_table, negatives)
        losses, du, dv, dn = self.model.pair_gradients(u, v, n, weights * learning_rate)
        _scatter_sub(target_table, du, targets)
        _scatter_sub(context_table, tf.concat([dv, tf.reshape(dn, [-1, n.shape[-1]])], 0),
                     tf.concat([contexts, tf.reshape(negatives, [-1])], 0))
        return tf.reduce_sum(losses * weights)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec([None], tf.float32)] + [tf.TensorSpec([], tf.int64)] * 4)
    def run(self, targets, contexts, weights, epoch, first_step, num_steps, steps_in_epoch):
        """Steps ``first_step .. first_step + num_steps - 1`` of epoch ``epoch`` (batches of the padded arrays;
        ``steps_in_epoch`` batches in all); returns the summed loss. The learning rate decays linearly with the
        fraction of all steps done, ``(epoch + step / steps_in_epoch) / epochs``, as word2vec's does with words
        processed; it depends on the step only, so a resumed run continues the same schedule."""
        total = tf.constant(0.0)
        for i in tf.range(num_steps):
            step = first_step + i
            fraction = (tf.cast(epoch, tf.float64) + tf.cast(step, tf.float64) / tf.cast(steps_in_epoch, tf.float64)
                        ) / self.epochs
            learning_rate = tf.cast(self.learning_rate + (self.min_learning_rate - self.learning_rate) * fraction,
                                    tf.float32)
            seed = tf.stack([tf.constant(self.seed, tf.int64) * 100_003 + epoch, step])
            start = tf.cast(step, tf.int32) * self.batch_size
            batch = [tf.slice(x, [start], [self.batch_size]) for x in (targets, contexts, weights)]  # static shape
            total += self._step(*batch, seed, learning_rate)
        return total


def epoch_batches(users: np.ndarray, items: np.ndarray, counts: np.ndarray, config: ml_collections.ConfigDict,
                  epoch: int) -> tuple[tuple[tf.Tensor, tf.Tensor, tf.Tensor], int, int]:
    """One epoch's pairs padded to whole batches with weight-0 pairs: ``((targets, contexts, weights), steps,
    pairs)``."""
    targets, contexts = epoch_pairs(users, items, counts, config, epoch)
    if len(targets) == 0:
        raise InputError("no skip-gram pairs: no user has two (kept) known items", field="item2vec")
    steps = -(-len(targets) // config.batch_size)
    extra = steps * config.batch_size - len(targets)
    fill = np.full(extra, 2, np.int32)  # any valid row: its gradient is multiplied by weight 0
    weights = np.concatenate([np.ones(len(targets), np.float32), np.zeros(extra, np.float32)])
    tensors = (tf.constant(np.concatenate([targets, fill])), tf.constant(np.concatenate([contexts, fill])),
               tf.constant(weights))
    return tensors, steps, len(targets)


def train_epochs(runner: EpochRunner, users: np.ndarray, items: np.ndarray, counts: np.ndarray,
                 config: ml_collections.ConfigDict, state: dict, manager: Optional[tf.train.CheckpointManager]):
    """Trains from ``state`` (``epoch`` and ``step`` tf.Variables: the next step to run) to the end, logging loss,
    learning rate and pairs/s every ``log_every_steps`` and checkpointing every ``checkpoint_every_steps``. The next
    epoch's pairs are built in a background thread while this one trains (numpy and TensorFlow release the GIL)."""
    chunk = max(int(config.log_every_steps), 1)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        upcoming = pool.submit(epoch_batches, users, items, counts, config, int(state["epoch"]))
        while int(state["epoch"]) < config.epochs:
            epoch = int(state["epoch"])
            tensors, steps, num_pairs = upcoming.result()
            if epoch + 1 < config.epochs:
                upcoming = pool.submit(epoch_batches, users, items, counts, config, epoch + 1)
            since_save = 0
            while int(state["step"]) < steps:
                first = int(state["step"])
                count = min(chunk, steps - first)
                started = time.perf_counter()
                loss = runner.run(*tensors, *(tf.constant(x, tf.int64) for x in (epoch, first, count, steps)))
                seconds = time.perf_counter() - started
                if not np.isfinite(float(loss)):
                    raise InputError(f"item2vec diverged (loss {float(loss)}) in epoch {epoch + 1}: lower "
                                     "learning_rate, batch_size or negative_group", field="item2vec.learning_rate")
                pairs = min(count * config.batch_size, num_pairs - first * config.batch_size)
                state["step"].assign(first + count)
                fraction = (epoch + (first + count) / steps) / config.epochs
                logging.info("item2vec epoch %d/%d step %d/%d  loss %.4f  lr %.3g  %.0f pairs/s", epoch + 1,
                             config.epochs, first + count, steps, float(loss) / max(pairs, 1),
                             config.learning_rate + (config.min_learning_rate - config.learning_rate) * fraction,
                             pairs / max(seconds, 1e-9))
                since_save += count
                if manager is not None and since_save >= config.checkpoint_every_steps and first + count < steps:
                    manager.save()
                    since_save = 0
            state["epoch"].assign(epoch + 1)
            state["step"].assign(0)
            if manager is not None:
                manager.save()
