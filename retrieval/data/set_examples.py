"""Training examples for set data (``data.order=none``): every training (user, item) pair is a target, and its
history is a fresh random subset of the user's *other* training items, redrawn every epoch.

Next-item examples (``examples.next_item_examples``) would teach a model "the item that follows on the line", which
on a set is an artefact of how the file was written (on id-sorted lines: the next larger id). The set examples follow
the MF / two-tower practice on set benchmarks (e.g. SimpleX, Mao et al. 2021, sec. 3.1: the user is her interacted
items, aggregated): the target is held out of its own history, and which other items the user tower sees is random.

The sampling runs inside ``tf.data``, per epoch, with no per-example Python: the pairs are grouped by user in a random
order (one stateless argsort keyed by ``(seed, epoch)``), and the history of the pair at position ``p`` of its
user's ``L`` pairs is the next ``min(L - 1, max_history)`` positions, cyclically. Each history is thereby a uniform
random subset of the other items, without replacement, never containing the target; a new epoch draws a new order.

Teacher pairs (``SetExamples.with_teacher``) are extra targets, e.g. an item-item model's top items for the user
that she has not interacted with: knowledge distillation through the data (Hinton et al. 2015, with the teacher's top
list as hard targets). Their histories are drawn from the user's training items only (a teacher item is a target,
never history): the first ``min(L, max_history)`` of the user's ``L`` pairs in the epoch's random order. Given
weights, teacher pairs weigh that much in the loss (a click weighs 1): the batches then carry ``weight``.

``history_keep`` < 1 keeps a random share of that history (stochastic rounding of ``keep * count``, at least one
item): a denoising regulariser, the dropout of Mult-DAE (Liang et al. 2018) and the noise EASE^R's closed form is
equivalent to (Steck 2019, sec. 3.2), so that the user tower does not memorise a fixed set of items per user.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import numpy as np

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported in to_dataset)
from retrieval import artifacts
from retrieval.data.examples import BLOCK_ROWS, MANIFEST
from retrieval.data.vocab import NUM_RESERVED


@dataclasses.dataclass
class SetExamples:
    """Training pairs (``user`` [N], ``label`` [N] int32 indices) whose histories are drawn by :meth:`to_dataset`.

    Pairs with an unknown item (index < 2) are dropped; an unknown item never enters a history either.
    """

    user: np.ndarray
    label: np.ndarray
    max_history: int
    history_keep: float = 1.0
    teacher_user: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))
    teacher_label: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))
    teacher_weight: Optional[np.ndarray] = None  # [teacher pairs] float32; None: each weighs as a click

    @classmethod
    def from_pairs(cls, user_idx: np.ndarray, item_idx: np.ndarray, max_history: int,
                   history_keep: float = 1.0) -> SetExamples:
        if max_history < 1:
            raise ValueError("max_history must be >= 1")
        if not 0.0 < history_keep <= 1.0:
            raise ValueError(f"history_keep must be in (0, 1], got {history_keep}")
        user_idx, item_idx = np.asarray(user_idx, np.int64), np.asarray(item_idx, np.int64)
        known = item_idx >= NUM_RESERVED
        order = np.argsort(user_idx[known], kind="stable")
        return cls(user_idx[known][order].astype(np.int32), item_idx[known][order].astype(np.int32),
                   int(max_history), float(history_keep))

    def with_teacher(self, user_idx: np.ndarray, item_idx: np.ndarray,
                     weight: Optional[np.ndarray] = None) -> SetExamples:
        """These pairs plus teacher pairs ``(user_idx, item_idx)`` as extra targets (module docstring), each
        weighing ``weight`` in the loss (None: 1); a teacher pair of a user without training pairs (no history to
        draw) or of an unknown item is dropped."""
        user_idx, item_idx = np.asarray(user_idx, np.int64), np.asarray(item_idx, np.int64)
        has_pairs = np.bincount(self.user, minlength=int(user_idx.max(initial=-1)) + 1)[user_idx] > 0
        keep = has_pairs & (item_idx >= NUM_RESERVED)
        return dataclasses.replace(self, teacher_user=user_idx[keep].astype(np.int32),
                                   teacher_label=item_idx[keep].astype(np.int32),
                                   teacher_weight=None if weight is None else np.asarray(weight, np.float32)[keep])

    def __len__(self) -> int:
        return len(self.label) + len(self.teacher_label)

    def to_dataset(self, batch_size: int, shuffle: bool = True, seed: int = 0, repeat: bool = False):
        """``tf.data.Dataset`` of dict batches ``user``, ``history`` [B, max_history] (0-padded), ``history_length``,
        ``label`` (and ``weight`` with weighted teacher pairs); the histories are redrawn every epoch (see the module
        docstring). Deterministic under ``seed``,
        like ``examples.to_dataset``: every element is a whole batch, and batches never span two epochs."""
        import tensorflow as tf

        users, labels = tf.constant(self.user), tf.constant(self.label)
        teacher = None
        if len(self.teacher_label):
            weight = None if self.teacher_weight is None else tf.constant(np.concatenate(
                [np.ones(len(self.label), np.float32), self.teacher_weight]))
            teacher = (tf.constant(self.teacher_user), tf.constant(self.teacher_label), weight)
        epochs = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(1)
        return epochs.flat_map(lambda epoch: _drawn_blocks(
            users, labels, tf.stack([tf.constant(seed, tf.int64), epoch]), batch_size, shuffle, self.max_history,
            self.history_keep, teacher)).prefetch(tf.data.AUTOTUNE)


def _drawn_blocks(users, labels, key, block_size: int, shuffle: bool, max_history: int, history_keep: float,
                  teacher=None):
    """Blocks of ``block_size`` examples of one epoch of ``(users, labels)`` (int32 tensors, grouped by user), the
    histories drawn with the stateless seed ``key`` (see the module docstring); TensorFlow ops only, so that it runs
    inside ``tf.data`` on arrays held in memory or read from a shard file. ``teacher``: ``(users, labels, weights)`` of
    teacher pairs, rows after the training pairs', their histories the user's first training items in the epoch's
    order; ``weights`` is every row's (the training pairs' 1, then the teacher pairs'), or None without weights."""
    import tensorflow as tf

    real = tf.size(labels, out_type=tf.int64)
    if teacher is not None:
        users, labels = tf.concat([users, teacher[0]], 0), tf.concat([labels, teacher[1]], 0)
    size = tf.size(labels, out_type=tf.int64)
    users_of_pairs = users[:real]
    length_of_user = tf.math.bincount(users_of_pairs, minlength=tf.reduce_max(users) + 1, dtype=tf.int32)
    starts_of_user = tf.cumsum(length_of_user, exclusive=True)
    offsets = tf.range(max_history, dtype=tf.int32)
    # Random order within each user: pairs are already grouped by user, so sort by (user, random rank).
    rank = tf.random.experimental.stateless_shuffle(tf.range(real, dtype=tf.int64), seed=key)
    # The epoch's items: the training pairs' in that order, then the teacher pairs' as they are (rows past ``real``).
    items = tf.concat([tf.gather(labels[:real], tf.argsort(tf.cast(users_of_pairs, tf.int64) * real + rank,
                                                            stable=True)), labels[real:]], 0)
    rows = tf.range(size, dtype=tf.int64)
    if shuffle:
        rows = tf.random.experimental.stateless_shuffle(rows, seed=key + [0, 1 << 40])

    def block(start: tf.Tensor) -> dict:
        row = tf.cast(rows[start:start + block_size], tf.int32)
        user = tf.gather(users, row)
        first, length = tf.gather(starts_of_user, user), tf.gather(length_of_user, user)
        is_teacher = tf.cast(row, tf.int64) >= real  # its history: the user's first items, none of them held out
        position = tf.where(is_teacher, -1, row - first)
        slot = first[:, None] + (position[:, None] + 1 + offsets[None, :]) % tf.maximum(length, 1)[:, None]
        count = tf.minimum(length - 1 + tf.cast(is_teacher, tf.int32), max_history)
        if history_keep < 1.0:
            draw = key + tf.stack([tf.constant(1, tf.int64), start])
            noise = tf.random.stateless_uniform(tf.shape(count), seed=draw)
            kept = tf.floor(history_keep * tf.cast(count, tf.float32) + noise)
            count = tf.minimum(count, tf.maximum(tf.cast(kept, tf.int32), 1))
        history = tf.where(offsets[None, :] < count[:, None], tf.gather(items, slot), 0)
        batch = {"user": user, "history": history, "history_length": count, "label": tf.gather(items, row)}
        if teacher is not None and teacher[2] is not None:
            batch["weight"] = tf.gather(teacher[2], row)
        return batch

    return tf.data.Dataset.range(0, size, block_size).map(block)


def write_set_shard(user_idx: np.ndarray, item_idx: np.ndarray, path: str | Path) -> int:
    """Writes one shard's training pairs for :class:`SetShards` (known items only, grouped by user) as raw int32
    ``user, item`` rows, atomically; returns the number of pairs."""
    pairs = SetExamples.from_pairs(user_idx, item_idx, max_history=1)
    with artifacts.atomic_path(path) as tmp:
        np.stack([pairs.user, pairs.label], axis=1).astype("<i4").tofile(tmp)
    return len(pairs)


def write_manifest(directory: str | Path, files: list[str], num_examples: int, streamed: bool = False) -> None:
    """Writes the manifest :meth:`SetShards.load` reads: the shard files (relative to ``directory``), the number of
    pairs they hold and whether the prepare ran on partitions (``streamed``)."""
    artifacts.write_json(Path(directory) / MANIFEST, {"kind": "set", "num_examples": num_examples, "files": files,
                                                      "streamed": streamed})


@dataclasses.dataclass(frozen=True)
class SetShards:
    """Set-data training pairs in per-shard files (the streamed prepare's, :func:`write_set_shard`), read by
    ``tf.data`` a few shards at a time: memory holds ``cycle_length`` shards, not the log.

    Every user's pairs are in one shard (the prepare partitions by user), so each shard draws its histories exactly
    as :class:`SetExamples` does on the whole data (the same sampler, keyed by seed, epoch and shard); blocks of
    :data:`BLOCK_ROWS` examples from ``cycle_length`` shards are interleaved and rebatched into ``batch_size``
    batches (a batch may span two epochs under ``repeat``, as with ``shards.ExampleShards``).
    """

    directory: str
    files: tuple[str, ...]
    num_examples: int
    max_history: int
    history_keep: float = 1.0
    cycle_length: int = 4

    @classmethod
    def load(cls, directory: str | Path, max_history: int, history_keep: float = 1.0) -> SetShards:
        manifest = artifacts.read_json(Path(directory) / MANIFEST)
        return cls(str(directory), tuple(manifest["files"]), int(manifest["num_examples"]), int(max_history),
                   float(history_keep))

    def __len__(self) -> int:
        return self.num_examples

    def in_memory(self) -> SetExamples:
        """Every shard's pairs in memory as one :class:`SetExamples` (the in-memory trainer's source)."""
        pairs = [np.fromfile(Path(self.directory) / name, "<i4").reshape(-1, 2) for name in self.files]
        pairs = np.concatenate(pairs) if pairs else np.zeros((0, 2), np.int32)
        return SetExamples.from_pairs(pairs[:, 0], pairs[:, 1], self.max_history, self.history_keep)

    def to_dataset(self, batch_size: int, shuffle: bool = True, seed: int = 0, repeat: bool = False):
        """``tf.data.Dataset`` of dict batches (the keys of :meth:`SetExamples.to_dataset`), deterministic under
        ``seed``: each epoch its own shard order and draws."""
        import tensorflow as tf

        paths = tf.constant([str(Path(self.directory) / name) for name in self.files])

        def shard(key, number, path) -> tf.data.Dataset:
            pairs = tf.reshape(tf.io.decode_raw(tf.io.read_file(path), tf.int32, little_endian=True), [-1, 2])
            shard_key = key + tf.stack([number * (1 << 20), tf.constant(0, tf.int64)])
            return _drawn_blocks(pairs[:, 0], pairs[:, 1], shard_key, BLOCK_ROWS, shuffle, self.max_history,
                                 self.history_keep)

        def epoch(epoch_number: tf.Tensor) -> tf.data.Dataset:
            key = tf.stack([tf.constant(seed, tf.int64), epoch_number])
            order = tf.range(len(self.files), dtype=tf.int64)
            if shuffle:
                order = tf.random.experimental.stateless_shuffle(order, seed=key + [0, 1 << 41])
            return tf.data.Dataset.from_tensor_slices(order).interleave(
                lambda i: shard(key, i, tf.gather(paths, i)), cycle_length=min(len(self.files), self.cycle_length),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

        epochs = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(1)
        return epochs.flat_map(epoch).rebatch(batch_size).prefetch(tf.data.AUTOTUNE)
