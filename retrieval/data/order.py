"""Whether a user's interactions are a sequence (time order) or a set, decided once per run and recorded.

``data.order`` is ``time`` (each user's interactions are in time order: the timestamp column, else the file order),
``none`` (each user's interactions are a set: their order carries no information) or ``auto``:

- a log with a timestamp column is ``time``;
- a ``user_items`` file (``user item item ...``) is ``none`` when its lines are sorted by numeric item id, else
  ``time`` (the format's documented convention);
- anything else keeps file order, ``time``.

Sorted lines are told apart from their look-alike, sequences whose ids were assigned in order of first appearance
(ICLRec's Amazon files, most sequential benchmarks): there, a line's *new* items come out ascending because each gets
the next free id, so whole lines often look sorted. The detector therefore judges only the items already seen on
earlier lines: in a sorted file those are still in id order, in a time-ordered one they are in the order the user met
them. A file is called sorted when at least :data:`SORTED_SHARE` of the lines with at least :data:`MIN_SEEN` such
items have them non-decreasing, over at least :data:`MIN_LINES` lines. Set files in no particular order (e.g.
``set-splits/ml-1m``) cannot be told from sequences by any detector: state ``data.order=none`` for them.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import pandas as pd
from absl import logging

from retrieval.data import seeds
from retrieval.errors import InputError

ORDERS = ("auto", "time", "none")
SET = "none"  # the order of set data: no order


def is_set(order: Optional[str]) -> bool:
    """Whether a decided order (``OrderDecision.order``, as the manifest records it) means set data."""
    return order == SET


SORTED_SHARE = 0.9
MIN_SEEN = 3
MIN_LINES = 20


@dataclasses.dataclass(frozen=True)
class OrderDecision:
    """The order used for a run (``time`` or ``none``), how it was decided and the evidence, for logs and manifest."""

    order: str
    source: str  # "config", "timestamp column", "detected", "file order"
    evidence: str

    @property
    def is_set(self) -> bool:
        return is_set(self.order)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def sorted_line_share(frame: pd.DataFrame) -> tuple[float, int]:
    """Share of users whose already-seen items (items met on an earlier line) are non-decreasing by numeric id, among
    users with at least :data:`MIN_SEEN` such items; and how many users that is. ``(nan, 0)`` for non-numeric ids.

    ``frame`` is a canonical interaction table in file order (one line per user, as the ``user_items`` reader reads).
    """
    ids = pd.to_numeric(frame["item_id"], errors="coerce").to_numpy()
    if len(ids) == 0 or np.isnan(ids).any():
        return float("nan"), 0
    users = pd.factorize(frame["user_id"])[0]
    seen = frame["item_id"].duplicated().to_numpy()
    users, ids = users[seen], ids[seen]
    order = np.argsort(users, kind="stable")
    users, ids = users[order], ids[order]
    same_user = users[1:] == users[:-1]
    descending = same_user & (ids[1:] < ids[:-1])
    counts = np.bincount(users, minlength=users.max(initial=-1) + 1)
    broken = np.bincount(users[1:][descending], minlength=len(counts))
    eligible = counts >= MIN_SEEN
    n = int(eligible.sum())
    return (float((broken[eligible] == 0).mean()) if n else float("nan")), n


def detect(frame: pd.DataFrame) -> OrderDecision:
    """``none`` if the lines look sorted by id (see the module docstring), else ``time``; with the evidence."""
    share, lines = sorted_line_share(frame)
    if lines < MIN_LINES:
        why = "ids are not numeric" if np.isnan(share) and lines == 0 and len(frame) else f"only {lines} lines"
        return OrderDecision("time", "detected", f"too little evidence of sorted lines ({why}); keeping file order")
    evidence = (f"{share:.1%} of {lines} lines have their already-seen items in ascending id order "
                f"(threshold {SORTED_SHARE:.0%})")
    return OrderDecision(SET if share >= SORTED_SHARE else "time", "detected", evidence)


def resolve(requested: str, frame: pd.DataFrame, format: str, path: str) -> OrderDecision:
    """The order of the interactions read from ``path`` (``format`` as resolved by the reader), per ``data.order``.

    Logs the decision with its evidence, and warns when ``time`` is forced on lines that look sorted.
    """
    if requested not in ORDERS:
        raise InputError(f"{requested!r} is not one of {ORDERS}", field="data.order")
    if requested == "auto":
        if "timestamp" in frame and format != "user_items":
            decision = OrderDecision("time", "timestamp column", "the log has a timestamp column")
        elif format == "user_items":
            decision = detect(frame)
        else:
            decision = OrderDecision("time", "file order", "no timestamp column: file order is time order")
    else:
        decision = OrderDecision(requested, "config", f"data.order={requested}")
        if requested == "time" and format == "user_items":
            detected = detect(frame)
            if detected.is_set:
                logging.warning("%s: data.order=time, but the lines look sorted by id (%s); a model learning the "
                                "next item would learn the id order", path, detected.evidence)
    logging.info("%s: order %s (%s: %s)", path, decision.order, decision.source, decision.evidence)
    return decision


def shuffle_within_users(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Set data as a sequence in a seeded random order: ``timestamp`` becomes each row's position in a random
    permutation of its user's rows, so that "most recent first, capped at ``max_history``" (the history every
    consumer of a run builds) is a uniform random subset of the user's items instead of, e.g., the largest ids.
    The permutation is keyed per user (:mod:`seeds`): the same for any partition of the users."""
    out = frame.copy()
    keys = seeds.user_uniforms(frame["user_id"], seed, seeds.SHUFFLE)
    out["timestamp"] = (pd.Series(keys).groupby(pd.factorize(frame["user_id"])[0]).rank(method="first")
                        .to_numpy().astype(np.int64) - 1)
    return out
