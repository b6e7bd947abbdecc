"""Validation recall during training: the metric early stopping watches (``training.fit(evaluate_fn=...)``).

The same protocol as the final evaluation's headline, on the validation interactions: full-corpus exact ranking of
the items with training interactions (the vocabulary's warm items: with a catalogue the headline ranks those, and
items nobody clicked are reported apart, ``retrieval.evaluation.cold_items``; validation pairs with such an item are
left out as the headline leaves out its test pairs), the user's training items excluded, the history each user tower
sees built as evaluation and serving build it (the user's training items, most recent first, capped at
``max_history``), recall@k with |validation items| as denominator. Everything but the two towers is prepared once;
each call costs one pass of the user tower over the validation users, the item tower over the catalogue and a
blocked top-k.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
from absl import logging

from retrieval.data.histories import item_ids_recent_first
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.evaluation import evaluator, protocols
from retrieval.export import pad_histories


def recall_fn(model, train: pd.DataFrame, validation: pd.DataFrame, item_vocab: Vocabulary,
              user_vocab: Vocabulary, k: int = 20, batch_size: int = 4096) -> Callable[[], float]:
    """``() -> recall@k`` of ``model``'s current weights (a ``TwoTowerModel``) on ``validation``, ranking the warm
    items of ``item_vocab`` (module docstring)."""
    import tensorflow as tf

    warm = item_vocab.warm[NUM_RESERVED:]
    data = protocols.prepare(train, validation, item_vocab.ids[NUM_RESERVED:][warm])
    if not warm.all():
        pairs = int(data.counts["count/test_interactions_unknown_item"])
        logging.info("early stopping: recall@%d among the %d items this model trains on, as the headline (%d cold "
                     "items and %d validation pair%s left out; an item clicked only in the holdout is cold here)", k,
                     int(warm.sum()), int((~warm).sum()), pairs, "" if pairs == 1 else "s")
    rows = np.flatnonzero(data.test.lengths > 0)
    users = user_vocab.lookup(data.user_ids[rows]).astype(np.int32)
    # The exported encoder's padding; "" and unknown ids look up to OOV, which the towers mask like padding.
    padded = pad_histories(item_ids_recent_first(train, data.user_ids[rows]), model.max_history)
    history = item_vocab.lookup(padded.ravel()).reshape(padded.shape).astype(np.int32)

    # One program for every block (the last one padded to the block size, its padding rows dropped), XLA-compiled
    # for a pooling that reads the order: the self-attentive tower's pass over 3,000 validation users took 5.1 s
    # eagerly and 1.2 s compiled. A mean pooling's pass is a gather and a mean, which XLA hardly speeds, and each
    # tuning paid its compilation at its first validation: on Gowalla's 10,000 validation users (histories of 200 in
    # parts of 25) 1.5 s a call compiled against 1.7-2.0 s as a graph, but 13.4 s the first compiled call against
    # 3.6 s (benchmarks/JOURNAL.md, "Issue 47: EASE^R's lambda tuned on fewer items, and the first validation").
    block_size = max(1, min(batch_size, len(rows)))
    encode = tf.function(model.user_vectors, jit_compile=not _linear_pooling(model))

    def evaluate() -> float:
        user_vectors = np.zeros((len(data.user_ids), model.item_vectors(tf.constant([0])).shape[-1]), np.float32)
        for start in range(0, len(rows), block_size):
            block = slice(start, start + block_size)
            pad = block_size - len(users[block])
            vectors = encode(tf.constant(np.pad(users[block], (0, pad))),
                             tf.constant(np.pad(history[block], ((0, pad), (0, 0))))).numpy()
            user_vectors[rows[block]] = vectors[:block_size - pad]
        item_vectors = np.concatenate([np.zeros((NUM_RESERVED, user_vectors.shape[1]), np.float32),
                                       model.catalogue_vectors()[warm]])
        result = evaluator.evaluate(user_vectors, item_vectors, data.train, data.test, ks=(k,), baselines=(),
                                    n_bootstrap=0, popularity=data.popularity)
        return float(result[f"recall@{k}"])

    return evaluate


def _linear_pooling(model) -> bool:
    """Whether ``model``'s user tower pools its history linearly (the mean; ``HistoryPooling.linear``)."""
    return bool(getattr(getattr(getattr(model, "user_tower", None), "pooling", None), "linear", False))
