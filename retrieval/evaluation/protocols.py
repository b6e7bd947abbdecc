"""Evaluation protocols: how train and test were obtained, and the index arrays the evaluator ranks with.

The protocols (named as ``config.data.split``):

- ``files``: an explicit test file (and a training file); nothing is derived.
- ``leave_last_n``: each user's last n interactions by time are test (n = 1: the YoutubeDNN / SASRec next-item
  protocol, "leave-last-one-out").
- ``temporal``: a global cut-off time; interactions at or after it are test (no future leaks into training).
- ``random``: a seeded per-user random holdout.

The splits and their descriptions are the registry :data:`retrieval.data.splits.SPLITS`; :func:`split` only
looks a protocol name up in it (every split keeps held-out rows, policy ``keep``) so that test users without training history (cold start) and test items unknown to training reach the
evaluator, which counts and reports them instead of losing them. :func:`prepare` turns train/test DataFrames
(canonical columns ``user_id``, ``item_id``, optional ``timestamp``) into CSR matrices over an item catalogue
(vocabulary indices: 0 = padding, 1 = OOV, catalogue items from 2) and the counts every report carries.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import pandas as pd

from retrieval.data import splits
from retrieval.data.vocab import NUM_RESERVED, OOV, PAD
from retrieval.evaluation import csr as csr_lib


def _protocol(name: str) -> splits.Protocol:
    if name not in splits.SPLITS:
        raise ValueError(f"unknown protocol {name!r}; expected one of {', '.join(splits.SPLITS)}")
    return splits.SPLITS[name]


def describe(name: str, **params: Any) -> str:
    """One line stating the protocol, to print beside every number (``params``: fields of ``splits.Holdout``)."""
    return _protocol(name).describe(splits.Holdout(**params))


def split(interactions: pd.DataFrame, name: str, **params: Any) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Splits an interaction log by protocol ``name`` (``params``: fields of ``splits.Holdout``); returns (train,
    test, description)."""
    protocol, holdout = _protocol(name), splits.Holdout(**params)
    if protocol.hold_out is None:
        raise ValueError(f"protocol {name!r} cannot split a log; its test rows come from a file")
    result = protocol.hold_out(interactions, holdout)
    return result.train, result.test, protocol.describe(holdout)


@dataclasses.dataclass
class EvalData:
    """Train/test as CSR over ``user_ids`` rows x vocabulary item indices, plus what was counted on the way."""

    user_ids: np.ndarray  # [U] str: every user of train or test, sorted
    item_ids: np.ndarray  # [V] str: "<pad>", "<oov>", then the catalogue
    train: csr_lib.Csr  # distinct (user, catalogue item) training pairs
    test: csr_lib.Csr  # distinct (user, catalogue item) test pairs
    popularity: np.ndarray  # [V] int64 training interactions per item (repeats counted)
    counts: dict


def _index(values: pd.Series, universe: pd.Index, offset: int = 0) -> np.ndarray:
    return universe.get_indexer(values.astype(str)).astype(np.int64) + offset


def prepare(train: pd.DataFrame, test: pd.DataFrame, catalogue: Sequence[str]) -> EvalData:
    """Index train and test against ``catalogue`` (item ids in vocabulary order, index 2 onwards).

    Interactions with an item outside the catalogue cannot be ranked: they are dropped and counted
    (``count/test_interactions_unknown_item``, ``count/train_interactions_unknown_item``). Every user of either
    table gets a row, so test users without training history stay in (the evaluator reports them as cold start).
    """
    catalogue = np.asarray(catalogue, dtype=object).astype(str)
    items = pd.Index(catalogue)
    if not items.is_unique:
        raise ValueError("catalogue item ids must be unique")
    user_ids = np.unique(np.concatenate([train["user_id"].astype(str).to_numpy(dtype=object),
                                         test["user_id"].astype(str).to_numpy(dtype=object)]).astype(str))
    users = pd.Index(user_ids)
    n_items = len(catalogue) + NUM_RESERVED
    tables = {}
    counts = {}
    for name, frame in (("train", train), ("test", test)):
        rows = _index(frame["user_id"], users)
        cols = _index(frame["item_id"], items, NUM_RESERVED)
        known = cols >= NUM_RESERVED
        tables[name] = (rows[known], cols[known])
        counts[f"count/{name}_interactions"] = int(len(frame))
        counts[f"count/{name}_interactions_unknown_item"] = int((~known).sum())
        counts[f"count/{name}_users"] = int(frame["user_id"].nunique())
    popularity = np.bincount(tables["train"][1], minlength=n_items).astype(np.int64)
    return EvalData(
        user_ids=user_ids,
        item_ids=np.concatenate([[PAD, OOV], catalogue]).astype(str),
        train=csr_lib.from_pairs(*tables["train"], len(user_ids)),
        test=csr_lib.from_pairs(*tables["test"], len(user_ids)),
        popularity=popularity,
        counts=counts,
    )
