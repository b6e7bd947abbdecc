"""Train/test(/validation) splits of a canonical interaction table.

Four ways: explicit files (:func:`from_files`), a global temporal cut-off (:func:`temporal_cutoff`), per-user
leave-last-N-out by time (:func:`leave_last_n_out`, the YoutubeDNN / SASRec next-item protocol) and a seeded per-user
random holdout (:func:`random_holdout`). :data:`SPLITS` is their registry by ``config.data.split``: what each needs,
how it holds out rows from the config's parameters (:class:`Holdout`) and the line that describes it; preparation,
evaluation reports and the config checks all read it. Within a user, "time order" is the ``timestamp`` column with ties kept in
file order (a stable sort), or file order alone when there is no timestamp. Held-out rows whose user or item never
occurs in training are dropped (logged and counted in ``Split.dropped``) or rejected, see :func:`align_to_train`:
a model can neither represent nor recommend them. Every output keeps the input's row order.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd
from absl import logging

from retrieval.data import readers, seeds
from retrieval.errors import InputError

POLICIES = ("drop", "fail", "keep")


@dataclasses.dataclass
class Split:
    """Canonical interaction tables; ``dropped`` counts held-out rows removed by :func:`align_to_train`."""

    train: pd.DataFrame
    test: pd.DataFrame
    validation: Optional[pd.DataFrame] = None
    dropped: dict = dataclasses.field(default_factory=dict)


def align_to_train(frame: pd.DataFrame, train: pd.DataFrame, policy: str = "drop", path: Optional[str] = None,
                   name: str = "test") -> tuple[pd.DataFrame, int]:
    """Removes (``drop``), rejects (``fail``) or keeps (``keep``) rows whose user or item is absent from ``train``.

    Returns the aligned frame and how many rows were dropped. ``fail`` raises an ``InputError`` naming ``path`` (or
    ``name``), the column and the first offending row (0-based data row of ``frame``).
    """
    if policy not in POLICIES:
        raise InputError(f"unknown policy {policy!r}; expected one of {list(POLICIES)}", field="policy")
    if policy == "keep":
        return frame, 0
    unknown = {c: ~frame[c].isin(pd.Index(train[c].unique())).to_numpy() for c in ("user_id", "item_id")}
    bad = unknown["user_id"] | unknown["item_id"]
    if not bad.any():
        return frame, 0
    if policy == "fail":
        row = int(np.flatnonzero(bad)[0])
        column = "user_id" if unknown["user_id"][row] else "item_id"
        raise InputError(f"{name} {column.split('_')[0]} {frame[column].iloc[row]!r} does not occur in the training "
                         f"data ({int(bad.sum())} such rows); use policy 'drop' to skip them",
                         path=path or name, column=column, row=row)
    logging.warning("%s: dropped %d of %d rows whose user (%d) or item (%d) does not occur in training", path or name,
                    int(bad.sum()), len(frame), int(unknown["user_id"].sum()), int(unknown["item_id"].sum()))
    return frame[~bad].reset_index(drop=True), int(bad.sum())


def _split(frame: pd.DataFrame, test: np.ndarray, validation: Optional[np.ndarray], policy: str) -> Split:
    """Builds a Split from boolean row masks and aligns the held-out parts to the training part."""
    held_out = test | (validation if validation is not None else False)
    train = frame[~held_out].reset_index(drop=True)
    parts, dropped = {}, {}
    for name, mask in (("test", test), ("validation", validation)):
        if mask is not None:
            parts[name], dropped[name] = align_to_train(frame[mask].reset_index(drop=True), train, policy, name=name)
    return Split(train, parts["test"], parts.get("validation"), dropped)


def _positions_from_end(frame: pd.DataFrame, order_key: Optional[np.ndarray] = None) -> np.ndarray:
    """For each row, how many of its user's rows come after it in time (0 = the user's last interaction).

    ``order_key`` replaces time (used for random holdout). Ties keep file order: ``np.lexsort`` is stable.
    """
    users = pd.factorize(frame["user_id"])[0]
    if order_key is None:
        order_key = frame["timestamp"].to_numpy() if "timestamp" in frame else np.zeros(len(frame), np.int64)
    order = np.lexsort((order_key, users))
    sorted_users = users[order]
    starts = np.flatnonzero(np.r_[True, sorted_users[1:] != sorted_users[:-1]])
    lengths = np.diff(np.r_[starts, len(order)])
    ends = np.repeat(starts + lengths, lengths)
    result = np.empty(len(frame), np.int64)
    result[order] = ends - 1 - np.arange(len(order))
    return result


def _user_sizes(frame: pd.DataFrame) -> np.ndarray:
    return frame.groupby("user_id", sort=False)["user_id"].transform("size").to_numpy()


def leave_last_n_out(interactions: pd.DataFrame, n: int = 1, validation_n: int = 0, min_train: int = 1,
                     policy: str = "drop", among: Optional[np.ndarray] = None) -> Split:
    """Holds out each user's last ``n`` interactions as test and the ``validation_n`` before them as validation.

    Users with fewer than ``n + validation_n + min_train`` interactions stay entirely in training, and so do the
    users of the rows where ``among`` (a boolean per row, the same for all of a user's rows) is False.
    """
    if n < 1 or validation_n < 0 or min_train < 1:
        raise InputError("leave_last_n_out needs n >= 1, validation_n >= 0, min_train >= 1", field="n")
    from_end = _positions_from_end(interactions)
    long_enough = _user_sizes(interactions) >= n + validation_n + min_train
    logging.info("leave-last-%d-out: %d users too short stay in training", n,
                 interactions.loc[~long_enough, "user_id"].nunique())
    eligible = long_enough if among is None else long_enough & among
    test = eligible & (from_end < n)
    validation = eligible & (from_end >= n) & (from_end < n + validation_n) if validation_n else None
    return _split(interactions, test, validation, policy)


def random_holdout(interactions: pd.DataFrame, test_fraction: float = 0.2, seed: int = 0, min_train: int = 1,
                   policy: str = "drop", salt: int = seeds.HOLDOUT) -> Split:
    """Holds out ``floor(test_fraction * n_u)`` random interactions of each user (at most ``n_u - min_train``).

    The draw is keyed per user (:mod:`seeds`): a user's holdout depends on ``seed`` and her own rows (in this order),
    not on the other users in ``interactions``, so any partition of the users gives the same split; ``salt`` picks
    an independent draw (the automatic validation holdout uses its own)."""
    if not 0.0 < test_fraction < 1.0:
        raise InputError(f"test_fraction must be in (0, 1), got {test_fraction}", field="test_fraction")
    keys = seeds.user_uniforms(interactions["user_id"], seed, salt)
    from_end = _positions_from_end(interactions, keys)
    sizes = _user_sizes(interactions)
    num_test = np.minimum(np.floor(test_fraction * sizes), sizes - min_train)
    return _split(interactions, from_end < num_test, None, policy)


def temporal_cutoff(interactions: pd.DataFrame, cutoff: Optional[int] = None, test_fraction: float = 0.2,
                    policy: str = "drop", require_both: bool = True) -> Split:
    """Training = interactions strictly before ``cutoff``, test = at or after it (a global point in time).

    Without ``cutoff`` it is the timestamp quantile leaving about ``test_fraction`` of the interactions for test
    (:func:`cutoff_of`). ``require_both``: fail when the cut leaves train or test empty (off for one partition of
    the log, whose caller checks the totals).
    """
    if "timestamp" not in interactions:
        raise InputError("a temporal cut-off needs a timestamp column", column="timestamp")
    times = interactions["timestamp"].to_numpy()
    if cutoff is None:
        cutoff = cutoff_of(*np.unique(times, return_counts=True), test_fraction)
    test = times >= cutoff
    if require_both and (test.all() or not test.any()):
        raise InputError(f"cut-off {cutoff} leaves an empty train or test set (timestamps span "
                         f"{times.min()}..{times.max()})", field="cutoff")
    logging.info("temporal cut-off at %d: %d train, %d test interactions", cutoff, int((~test).sum()), int(test.sum()))
    return _split(interactions, test, None, policy)


def cutoff_of(times: np.ndarray, counts: np.ndarray, test_fraction: float) -> int:
    """The ``1 - test_fraction`` quantile (numpy's ``method="higher"``) of timestamps given as sorted distinct
    ``times`` with their ``counts``: the same value as over the full array, from a summary that partitions can sum."""
    if len(times) == 0:
        raise InputError("a temporal cut-off needs at least one timestamp", column="timestamp")
    position = int(np.ceil((1.0 - test_fraction) * (int(counts.sum()) - 1)))
    return int(times[np.searchsorted(np.cumsum(counts), position, side="right")])


def from_files(train: str | os.PathLike, test: str | os.PathLike, validation: Optional[str | os.PathLike] = None,
               format: str = "auto", columns: Optional[readers.ColumnNames] = None, policy: str = "drop") -> Split:
    """Reads explicit train/test(/validation) files and aligns the held-out ones to training (``policy``)."""
    train_frame = readers.read_interactions(train, format, columns)
    parts, dropped = {}, {}
    for name, path in (("test", test), ("validation", validation)):
        if path is not None:
            frame = readers.read_interactions(path, format, columns)
            parts[name], dropped[name] = align_to_train(frame, train_frame, policy, path=str(path), name=name)
    return Split(train_frame, parts["test"], parts.get("validation"), dropped)


# The Holdout fields a split's settings carry: the config.data keys of the same names, and the run's seed.
SPLIT_FIELDS = ("holdout_n", "validation", "holdout_fraction", "temporal_quantile", "seed")


@dataclasses.dataclass(frozen=True)
class Holdout:
    """A split's parameters, named as the ``config.data`` keys they come from, plus the run's seed, a cut-off time
    computed over the whole log (temporal) and ``partition``: one partition of the log, whose caller checks totals."""

    holdout_n: int = 1
    validation: bool = False
    holdout_fraction: float = 0.2
    temporal_quantile: float = 0.9
    seed: int = 0
    test_path: Optional[str] = ""
    cutoff: Optional[int] = None
    partition: bool = False

    @classmethod
    def of(cls, source: Any, **overrides: Any) -> Holdout:
        """The fields :data:`SPLIT_FIELDS` as ``source`` holds them (the prepare stage's settings, or a mapping of
        them), then ``overrides`` (``test_path``, ``cutoff``, ``partition``); a field ``source`` lacks is an error,
        never a default of this class."""
        read = source.__getitem__ if isinstance(source, Mapping) else functools.partial(getattr, source)
        return cls(**{**{name: read(name) for name in SPLIT_FIELDS}, **overrides})


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One value of ``config.data.split``: how it holds out rows (None: a file gives them), the line describing it,
    the config key it cannot do without (key, what it is) and whether it needs time order (sets have none)."""

    hold_out: Optional[Callable[[pd.DataFrame, Holdout], Split]]
    describe: Callable[[Holdout], str]
    needs: tuple[str, str] = ()
    by_time: bool = False


def _describe_last_n(h: Holdout) -> str:
    what = "leave-last-one-out next-item" if h.holdout_n == 1 else f"leave-last-{h.holdout_n}-out"
    return f"{what} (each user's last {h.holdout_n} interaction(s) by time are test)"


def _describe_temporal(h: Holdout) -> str:
    where = f"time {h.cutoff}" if h.cutoff is not None else f"the {h.temporal_quantile:.0%} time quantile"
    return f"temporal cut-off at {where} (later interactions are test)"


def _describe_random(h: Holdout) -> str:
    return f"random per-user holdout ({h.holdout_fraction:.0%} of each user's interactions, seed {h.seed})"


def _describe_files(h: Holdout) -> str:
    return f"explicit test file{' ' + str(h.test_path) if h.test_path else ''}"


# The splits, by config.data.split (held-out users and items are kept: the vocabularies and the evaluator align
# them); order is the one the reference page lists.
SPLITS: dict[str, Protocol] = {
    "leave_last_n": Protocol(
        lambda frame, h: leave_last_n_out(frame, h.holdout_n, validation_n=h.holdout_n if h.validation else 0,
                                          policy="keep"),
        _describe_last_n, by_time=True),
    "temporal": Protocol(
        lambda frame, h: temporal_cutoff(frame, h.cutoff, 1.0 - h.temporal_quantile, policy="keep",
                                         require_both=not h.partition),
        _describe_temporal, needs=("data.timestamp_column", "a timestamp column"), by_time=True),
    "random": Protocol(lambda frame, h: random_holdout(frame, h.holdout_fraction, seed=h.seed, policy="keep"),
                       _describe_random),
    "files": Protocol(None, _describe_files, needs=("data.test_path", "a test file")),
}
TIME_SPLITS = tuple(name for name, protocol in SPLITS.items() if protocol.by_time)
