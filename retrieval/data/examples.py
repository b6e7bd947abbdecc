"""Training examples as numpy arrays, built without a per-example Python loop, and their ``tf.data`` pipeline.

Inputs are index arrays from :class:`retrieval.data.vocab.Vocabulary` lookups (one entry per training interaction)
and optional timestamps. Each user's interactions are put in time order by a stable sort on (user, timestamp), so
equal timestamps keep the input (file) order.

- :func:`next_item_examples`: YoutubeDNN next-item examples (Covington et al. 2016, sec. 3.2-3.3): for each
  interaction at position t >= 1 of a user's sequence, the label is the item at t and the history the (at most
  ``max_history``) items before t, most recent first, 0-padded. Only the past is used: no future leakage.
- :func:`skipgram_pairs`: Item2Vec (Barkan & Koenigstein 2016) target/context pairs within a user's sequence, with
  word2vec frequent-item subsampling (Mikolov et al. 2013).
- :func:`noise_distribution`: the SGNS negative-sampling distribution ``count^alpha``.
- :func:`to_dataset`: shuffled, batched, prefetched ``tf.data`` pipeline, deterministic under a seed.
- :class:`ExampleSource`: what training reads, whatever holds the examples (:class:`NextItemExamples` in memory,
  ``set_examples.SetExamples``, or the shard files of ``shards.ExampleShards`` / ``set_examples.SetShards``).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Protocol

import numpy as np

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported in to_dataset)
from retrieval.data.vocab import NUM_RESERVED

BLOCK_ROWS = 256  # examples per block of a shard file (next-item TFRecords, set pairs), before rebatching
MANIFEST = "manifest.json"  # in an examples directory: the kind, the shard files, the count, whether streamed


def _time_order(user_idx: np.ndarray, timestamps: Optional[np.ndarray]) -> np.ndarray:
    """Permutation sorting by user, then timestamp; stable, so ties keep input order."""
    if timestamps is None:
        return np.argsort(user_idx, kind="stable")
    return np.lexsort((np.asarray(timestamps), user_idx))


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For keys sorted into runs: (position of each element within its run, length of its run)."""
    n = len(sorted_keys)
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]) if n else np.zeros(0, np.int64)
    lengths = np.diff(np.r_[starts, n])
    return np.arange(n) - np.repeat(starts, lengths), np.repeat(lengths, lengths)


def user_sequences(user_idx: np.ndarray, item_idx: np.ndarray, timestamps: Optional[np.ndarray] = None,
                   num_users: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-user item sequences in time order, CSR style: user ``u``'s items are ``items[indptr[u]:indptr[u + 1]]``.

    ``indptr`` (int64, ``num_users + 1``, default ``max(user_idx) + 1`` users) covers every user index, so users
    without interactions (e.g. index 0 and 1) have empty slices. ``items`` is int32.
    """
    user_idx = np.asarray(user_idx, dtype=np.int64)
    num_users = int(user_idx.max(initial=-1)) + 1 if num_users is None else num_users
    order = _time_order(user_idx, timestamps)
    indptr = np.zeros(num_users + 1, np.int64)
    np.cumsum(np.bincount(user_idx, minlength=num_users), out=indptr[1:])
    return indptr, np.asarray(item_idx)[order].astype(np.int32)


def _cap_per_user(users: np.ndarray, keep: np.ndarray, cap: int, mode: str, seed: int) -> np.ndarray:
    """Narrows the boolean ``keep`` to at most ``cap`` elements per user (``users`` sorted): the most recent ones
    (``recent``) or a seeded uniform subset (``random``)."""
    candidates = np.flatnonzero(keep)
    if mode == "recent":
        rank = np.arange(len(candidates))[::-1]
    elif mode == "random":
        rank = np.random.default_rng(seed).permutation(len(candidates))
    else:
        raise ValueError(f"keep must be 'recent' or 'random', got {mode!r}")
    order = np.lexsort((rank, users[candidates]))
    position, _ = _runs(users[candidates][order])
    capped = np.zeros_like(keep)
    capped[candidates[order[position < cap]]] = True
    return capped


def next_item_examples(user_idx: np.ndarray, item_idx: np.ndarray, timestamps: Optional[np.ndarray] = None,
                       max_history: int = 50, example_age: bool = False, max_examples_per_user: Optional[int] = None,
                       keep: str = "recent", seed: int = 0) -> dict[str, np.ndarray]:
    """YoutubeDNN next-item examples from training interactions (indices from the vocabularies).

    Returns ``user`` [N] int32, ``history`` [N, max_history] int32 (item indices, most recent first, 0-padded; OOV
    items stay as 1 and are masked by the models), ``history_length`` [N] int32 (non-padding entries), ``label`` [N]
    int32 and, with ``example_age``, ``example_age`` [N] float32 = ``(t_max - t) / (t_max - t_min)`` over the given
    interactions (0 = newest; serve with 0, as YouTube does). Examples are positions t >= 1 whose label is a known
    item (index >= 2), sorted by user then time. ``max_examples_per_user`` keeps the ``keep="recent"`` ones or a
    seeded ``keep="random"`` subset, so heavy users do not dominate the loss.
    """
    if max_history < 1:
        raise ValueError("max_history must be >= 1")
    user_idx = np.asarray(user_idx, dtype=np.int64)
    if len(user_idx) == 0:  # e.g. a partition without users
        empty = {"user": np.zeros(0, np.int32), "history": np.zeros((0, max_history), np.int32),
                 "history_length": np.zeros(0, np.int32), "label": np.zeros(0, np.int32)}
        return {**empty, "example_age": np.zeros(0, np.float32)} if example_age else empty
    order = _time_order(user_idx, timestamps)
    users, items = user_idx[order], np.asarray(item_idx, dtype=np.int32)[order]
    position, _ = _runs(users)
    chosen = (position >= 1) & (items >= NUM_RESERVED)
    if max_examples_per_user is not None:
        chosen = _cap_per_user(users, chosen, max_examples_per_user, keep, seed)
    # Each user's sequence follows max_history zeros in ``padded``, so a window reaching before the user's first
    # item reads padding. Windows over the reversed array come out most recent first without a second copy.
    user_number = np.cumsum(position == 0)
    padded = np.zeros(len(items) + max_history * int(user_number[-1] if len(users) else 0), np.int32)
    slot = np.arange(len(items)) + max_history * user_number
    padded[slot] = items
    windows = np.lib.stride_tricks.sliding_window_view(padded[::-1], max_history)
    label_slot = slot[chosen]
    out = {
        "user": users[chosen].astype(np.int32),
        "history": windows[len(padded) - label_slot],
        "history_length": np.minimum(position[chosen], max_history).astype(np.int32),
        "label": items[chosen],
    }
    if example_age:
        if timestamps is None:
            raise ValueError("example_age needs timestamps")
        times = np.asarray(timestamps, dtype=np.float64)[order]
        span = max(times.max(initial=0.0) - times.min(initial=0.0), 1.0)
        out["example_age"] = ((times.max(initial=0.0) - times[chosen]) / span).astype(np.float32)
    return out


def _subsample(items: np.ndarray, counts: np.ndarray, threshold: float, rng: np.random.Generator) -> np.ndarray:
    """word2vec frequent-item subsampling mask: keep with ``p = min(1, sqrt(t/f) + t/f)``, ``f = count / total``."""
    frequency = counts[items] / max(counts.sum(), 1)
    ratio = threshold / np.maximum(frequency, 1e-300)
    return rng.random(len(items)) < np.minimum(1.0, np.sqrt(ratio) + ratio)


def skipgram_pairs(user_idx: np.ndarray, item_idx: np.ndarray, timestamps: Optional[np.ndarray] = None,
                   window: Optional[int] = 5, subsample: Optional[float] = None, counts: Optional[np.ndarray] = None,
                   seed: int = 0) -> dict[str, np.ndarray]:
    """Item2Vec skip-gram pairs ``{"target": int32 [P], "context": int32 [P]}`` within each user's sequence.

    Pairs are both directions of every two items at most ``window`` positions apart, or of every two positions of
    the user (``window=None``, Item2Vec's set context: ``sum n_u (n_u - 1)`` pairs, mind long users). Pad/OOV items
    (index < 2) are removed first; with ``subsample`` (the threshold ``t``, e.g. 1e-3 or 1e-5) each occurrence is then
    kept with ``p_keep = min(1, sqrt(t/f) + t/f)``, ``f`` its item's frequency in ``counts`` (default: counted here),
    drawn with ``seed``.
    """
    order = _time_order(np.asarray(user_idx, dtype=np.int64), timestamps)
    users, items = np.asarray(user_idx, dtype=np.int64)[order], np.asarray(item_idx, dtype=np.int64)[order]
    kept = items >= NUM_RESERVED
    if subsample is not None:
        counts = np.bincount(items[kept], minlength=items.max(initial=0) + 1) if counts is None else counts
        counts = np.asarray(counts, dtype=np.float64)
        if items.max(initial=0) >= len(counts):
            raise ValueError(f"counts has {len(counts)} entries but an item index is {items.max()}")
        kept &= _subsample(np.where(kept, items, 0), counts, subsample, np.random.default_rng(seed))
    users, items = users[kept], items[kept].astype(np.int32)
    if window is None:
        position, length = _runs(users)
        block = length - 1
        first = np.repeat(np.arange(len(items)), block)
        k = np.arange(block.sum()) - np.repeat(np.cumsum(block) - block, block)
        start = (np.arange(len(items)) - position)[first]
        context = start + k + (k >= position[first])
        return {"target": items[first], "context": items[context]}
    targets, contexts = [], []
    for distance in range(1, window + 1):
        same = np.flatnonzero(users[distance:] == users[:-distance]) if len(users) > distance else np.zeros(0, int)
        targets += [items[same], items[same + distance]]
        contexts += [items[same + distance], items[same]]
    return {"target": np.concatenate(targets or [np.zeros(0, np.int32)]),
            "context": np.concatenate(contexts or [np.zeros(0, np.int32)])}


def noise_distribution(counts: np.ndarray, alpha: float = 0.75) -> np.ndarray:
    """SGNS negative-sampling distribution ``P(i) = count_i^alpha / sum_j count_j^alpha`` (Mikolov et al. 2013,
    Item2Vec sec. 3); float64 aligned with the vocabulary, 0 for pad/OOV."""
    weights = np.asarray(counts, dtype=np.float64) ** alpha
    weights[:NUM_RESERVED] = 0.0
    total = weights.sum()
    if total <= 0:
        raise ValueError("noise_distribution needs at least one positive count")
    return weights / total


def to_dataset(arrays: Mapping[str, np.ndarray], batch_size: int, shuffle: bool = True, seed: int = 0,
               drop_remainder: bool = False, repeat: bool = False):
    """``tf.data.Dataset`` of dict batches from equal-length arrays: per epoch, a permutation of the row numbers is
    cut into batches, and each batch of row numbers becomes one gather per array; then prefetch.

    ``shuffle``: each epoch's permutation is drawn in one stateless op keyed by ``(seed, epoch)``, so every epoch
    of a ``repeat``-ed dataset has its own order, two pipelines built with one seed yield identical batches, and
    iterating a non-repeated dataset again gives the same epoch. Every element of the pipeline is a whole batch:
    nothing in tf.data runs per row (a row-level ``shuffle`` buffer over the whole data costs microseconds per row
    and, under ``repeat``, stalls training while it refills at every epoch). Batches never span two epochs; the
    last one of an epoch is smaller unless ``drop_remainder``.
    """
    import tensorflow as tf

    sizes = {len(v) for v in arrays.values()}
    if len(sizes) != 1:
        raise ValueError(f"arrays must have one common length, got {sorted(sizes)}")
    size = sizes.pop()
    tensors = {key: tf.constant(value) for key, value in arrays.items()}
    starts = np.arange(0, size - batch_size + 1 if drop_remainder else size, batch_size, dtype=np.int64)

    def epoch_batches(epoch: tf.Tensor) -> tf.data.Dataset:
        rows = tf.range(size, dtype=tf.int64)
        if shuffle:
            rows = tf.random.experimental.stateless_shuffle(rows, seed=tf.stack([tf.constant(seed, tf.int64), epoch]))
        return tf.data.Dataset.from_tensor_slices(starts).map(lambda start: rows[start:start + batch_size])

    epochs = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(1)
    batches = epochs.flat_map(epoch_batches).map(
        lambda index: {key: tf.gather(tensor, index) for key, tensor in tensors.items()},
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return batches.prefetch(tf.data.AUTOTUNE)


class ExampleSource(Protocol):
    """Training examples as training reads them: a count and a ``tf.data`` pipeline of dict batches (``user``,
    ``history`` [B, max_history], ``history_length``, ``label``, optional ``example_age``)."""

    def __len__(self) -> int: ...

    def to_dataset(self, batch_size: int, shuffle: bool = True, seed: int = 0, repeat: bool = False): ...


@dataclasses.dataclass
class NextItemExamples:
    """Next-item examples held in memory (the arrays of :func:`next_item_examples`)."""

    arrays: dict

    def __len__(self) -> int:
        return len(self.arrays["label"])

    def to_dataset(self, batch_size: int, shuffle: bool = True, seed: int = 0, repeat: bool = False):
        return to_dataset(self.arrays, batch_size, shuffle=shuffle, seed=seed, repeat=repeat)

    def most_recent(self, cap: int) -> NextItemExamples:
        """At most ``cap`` examples per user, the most recent: ``data.max_examples_per_user`` for a phase that asks for
        fewer examples than the prepare stage made. The examples may be in any order (the prepare stage writes them
        shuffled), so recency is read from the examples themselves (:func:`recency`)."""
        users = self.arrays["user"]
        order = np.lexsort((-recency(self.arrays, cap), users))
        position, _ = _runs(users[order])
        keep = np.sort(order[position < cap])
        return NextItemExamples({key: value[keep] for key, value in self.arrays.items()})


def recency(arrays: Mapping[str, np.ndarray], cap: int) -> np.ndarray:
    """A score per next-item example, higher for later examples of the same user, exact for each user's ``cap`` most
    recent ones whatever the examples' order.

    A user's examples below the history cap have distinct history lengths, which grow by one per position. Those at
    the cap (``history_length == max_history``) are ordered by their chain: an example's successor is the one whose
    history is its own label followed by its own history minus the oldest item. The last of the chain has no
    successor (rank 0), its predecessor rank 1, and so on for ``cap`` links; the older ones rank after them and
    before every shorter history."""
    users, labels = arrays["user"].astype(np.int64), arrays["label"].astype(np.int64)
    history, lengths = arrays["history"].astype(np.int64), arrays["history_length"].astype(np.int64)
    width = history.shape[1]
    score = lengths * (cap + 1) + cap  # below the cap: the length orders them
    full = np.flatnonzero(lengths == width)
    if not len(full):
        return score
    own = np.column_stack([users[full], history[full]])  # (user, history): what a successor's key must equal
    successor_key = np.column_stack([users[full], labels[full], history[full, :width - 1]])
    keys, ids = np.unique(np.concatenate([own, successor_key]), axis=0, return_inverse=True)
    ids = ids.ravel()
    own_id, wanted_id = ids[:len(full)], ids[len(full):]
    holder = np.full(len(keys), -1, np.int64)
    holder[own_id] = np.arange(len(full))
    successor = holder[wanted_id]  # index into full of each tied example's successor, -1 when it is the last
    rank = np.full(len(full), cap, np.int64)  # cap: older than the cap most recent
    rank[successor < 0] = 0
    for step in range(1, cap):
        known = (rank == cap) & (successor >= 0)
        follows = known.copy()
        follows[known] = rank[successor[known]] == step - 1
        rank[follows] = step
    score[full] = width * (cap + 1) + (cap - rank)
    return score


def as_source(examples: ExampleSource | Mapping[str, np.ndarray]) -> ExampleSource:
    """``examples`` as an :class:`ExampleSource` (a mapping of arrays becomes :class:`NextItemExamples`)."""
    return NextItemExamples(dict(examples)) if isinstance(examples, Mapping) else examples


def head(source: ExampleSource, n: int) -> dict[str, np.ndarray]:
    """The first ``n`` examples of the unshuffled first epoch (for building variables)."""
    batch = next(iter(source.to_dataset(max(n, 1), shuffle=False).take(1)))
    return {key: value.numpy()[:n] for key, value in batch.items()}


def collect(dataset) -> dict[str, np.ndarray]:
    """Every batch of a finite ``tf.data`` pipeline of dict batches, concatenated into arrays."""
    batches = list(dataset.as_numpy_iterator())
    if not batches:
        return {}
    return {key: np.concatenate([batch[key] for batch in batches]) for key in batches[0]}
