"""Whether a user's interactions are a sequence (time order) or a set, decided once per run and recorded.

``data.order`` is ``time`` (each user's interactions are in time order: the timestamp column, else the file order),
``none`` (each user's interactions are a set: their order carries no information) or ``auto``: a log with a timestamp
column is ``time``; anything else (a ``user_items`` file, ``user item item ...``, or a log without a timestamp column,
where a user's rows in file order make the user's *line*) is decided by :func:`detect`, in two steps.

1. **Lines sorted by id are sets.** Sorted lines are told apart from their look-alike, sequences whose ids were
   assigned in order of first appearance (ICLRec's Amazon files, most sequential benchmarks): there, a line's *new*
   items come out ascending because each gets the next free id, so whole lines often look sorted. This check
   therefore judges only the items already seen on earlier lines: in a sorted file those are still in id order, in a
   time-ordered one they are in the order the user met them. A file is sorted when at least :data:`SORTED_SHARE` of
   the lines with at least :data:`MIN_SEEN` such items have them non-decreasing, over at least :data:`MIN_LINES`
   lines. Sorted lines never reach step 2: neighbours in id order can be related (ids assigned by category, by
   release, by first appearance), which step 2 would take for a sequence.
2. **Otherwise, does the order carry information?** A permutation test of adjacency (a randomisation test in Fisher's
   sense: if the order of a line carries nothing, every order of its items is equally likely, so shuffling each line
   on its own draws from the statistic's distribution under that hypothesis). The statistic T is the share of the
   adjacent item pairs of all lines (unordered, counted once per line) that also occur as adjacent pairs on at least
   one *other* line. In a sequence, neighbours are related (bought together, the next film of a session, the next
   episode), so the same pairs recur side by side on many lines; in a set in random order, which items end up side by
   side is chance, and shuffling changes nothing. On a small catalogue nearly every pair recurs somewhere by chance
   and the share saturates near 1, in sequences too; there "another line" becomes "``m`` other lines", ``m`` the
   least count that at most :data:`MAX_SHUFFLED_SHARE` of the shuffled pairs reach (``m`` is 1 on every real file
   below). T is compared with its mean over :data:`PERMUTATIONS` seeded shuffles of every line: the ratio is about 1
   for sets (0.99-1.00 on ``set-splits/ml-1m`` and ``lastfm`` and on time-sorted MovieLens lines shuffled) and
   1.3-1.9 for sequences (Amazon Beauty 1.81, MovieLens 100K and 1M lines in time order 1.42 and 1.89, the bundled
   synthetic log 1.34). ``time`` when the ratio is at least :data:`RATIO_THRESHOLD` and T is :data:`MIN_Z` spreads
   above the shuffled mean; ``none`` when T is :data:`MIN_Z` spreads below :data:`RATIO_THRESHOLD` times that mean;
   in between, or with fewer than :data:`MIN_LINES` lines of two items or fewer than :data:`MIN_REPEATED` repeated
   pairs, the evidence is too thin and file order is kept (``time``), as the evidence says. The spread is the
   shuffles' standard deviation, floored at the binomial one of a share over that many pairs (a few shuffles estimate
   a spread roughly). Logs over :data:`MAX_INTERACTIONS` rows are judged on a seeded sample of whole users (well
   under a second on yelp2018's 1.2M pairs).

   The test compares the file with itself: popularity, line lengths and catalogue size are the same after a shuffle,
   so they cancel out, and it needs no timestamp, id convention or model. It measures what neighbours share, the
   first thing a next-item model learns: order that only shows at longer range is missed.
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


# Step 1, sorted lines (see the module docstring).
SORTED_SHARE = 0.9
MIN_SEEN = 3
MIN_LINES = 20  # both steps
# Step 2, the permutation test of adjacency. RATIO_THRESHOLD lies between the sets' 0.99-1.00 and the sequences'
# 1.34-1.89 measured on real data; z separates them by far more than MIN_Z there (sets |z| < 1.2, sequences z > 60).
RATIO_THRESHOLD = 1.2
MIN_Z = 3.0
MIN_REPEATED = 50
MAX_SHUFFLED_SHARE = 0.5
PERMUTATIONS = 5
MAX_INTERACTIONS = 300_000
SEED = 0


@dataclasses.dataclass(frozen=True)
class OrderDecision:
    """The order used for a run (``time`` or ``none``), how it was decided and the evidence, for logs and manifest."""

    order: str
    source: str  # "config", "timestamp column" or "detected" (which may keep file order for lack of evidence)
    evidence: str

    @property
    def is_set(self) -> bool:
        return is_set(self.order)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _codes(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """User codes, item codes (both in order of first appearance in the file) and the item id of each item code."""
    users = pd.factorize(frame["user_id"])[0]
    items, item_ids = pd.factorize(frame["item_id"])
    return users, items, np.asarray(item_ids)


def _sorted_share(users: np.ndarray, items: np.ndarray, item_ids: np.ndarray) -> tuple[float, int]:
    """:func:`sorted_line_share` on codes (see :func:`_codes`)."""
    ids = pd.to_numeric(pd.Series(item_ids, dtype=object), errors="coerce").to_numpy(dtype=float)
    if len(items) == 0 or np.isnan(ids).any():
        return float("nan"), 0
    # Codes number items in order of first appearance: a row's item was seen before iff its code is not above every
    # earlier code.
    seen = np.zeros(len(items), bool)
    seen[1:] = items[1:] <= np.maximum.accumulate(items)[:-1]
    users, ids = users[seen], ids[items[seen]]
    order = np.argsort(users, kind="stable")
    users, ids = users[order], ids[order]
    same_user = users[1:] == users[:-1]
    descending = same_user & (ids[1:] < ids[:-1])
    counts = np.bincount(users, minlength=users.max(initial=-1) + 1)
    broken = np.bincount(users[1:][descending], minlength=len(counts))
    eligible = counts >= MIN_SEEN
    n = int(eligible.sum())
    return (float((broken[eligible] == 0).mean()) if n else float("nan")), n


def sorted_line_share(frame: pd.DataFrame) -> tuple[float, int]:
    """Share of users whose already-seen items (items met on an earlier line) are non-decreasing by numeric id, among
    users with at least :data:`MIN_SEEN` such items; and how many users that is. ``(nan, 0)`` for non-numeric ids.

    ``frame`` is a canonical interaction table in file order (one line per user, as the ``user_items`` reader reads).
    """
    return _sorted_share(*_codes(frame))


@dataclasses.dataclass(frozen=True)
class AdjacencyTest:
    """The permutation test of adjacency: over ``lines`` lines of two items or more holding ``pairs`` adjacent pairs
    (a pair counted once per line), the share of those pairs that occur as adjacent pairs on at least ``min_others``
    other lines, as the lines are (``observed``) and with each line shuffled (``shuffled``, one per permutation).
    ``repeated`` pairs occur on at least one other line (``repeated_shuffled``: the shuffles' mean); ``interactions``
    rows were used (all, or a seeded sample of whole users when ``sampled``)."""

    observed: float
    shuffled: tuple[float, ...]
    min_others: int
    lines: int
    pairs: int
    repeated: int
    repeated_shuffled: float
    interactions: int
    sampled: bool

    @property
    def expected(self) -> float:
        """The statistic with the order removed: the mean over the permutations."""
        return float(np.mean(self.shuffled)) if self.shuffled else float("nan")

    @property
    def ratio(self) -> float:
        """``observed / expected``: about 1 when the order carries nothing, above 1 for sequences."""
        if not self.pairs or not self.shuffled:
            return float("nan")
        return self.observed / self.expected if self.expected > 0 else (float("inf") if self.observed else 1.0)

    @property
    def spread(self) -> float:
        """The spread of the statistic without order: the permutations' standard deviation, floored at the binomial
        spread of a share of ``pairs`` pairs (a few permutations estimate a spread roughly)."""
        p = self.expected
        sd = float(np.std(self.shuffled, ddof=1)) if len(self.shuffled) > 1 else 0.0
        return max(sd, float(np.sqrt(max(p * (1 - p), 1 / self.pairs) / self.pairs)))

    def z_against(self, ratio: float) -> float:
        """How far ``observed`` is above ``ratio`` times the statistic without order, in :attr:`spread` units."""
        return (self.observed - ratio * self.expected) / self.spread if self.pairs and self.shuffled else float("nan")

    @property
    def z(self) -> float:
        """``observed`` above the statistic without order, in :attr:`spread` units: about N(0, 1) for sets."""
        return self.z_against(1.0)


def _lines(users: np.ndarray, items: np.ndarray, timestamps: Optional[np.ndarray], max_interactions: int,
           seed: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """Users (non-decreasing) and items of the lines of the codes (see :func:`_codes`): each user's rows in time order
    (by ``timestamps``; ties, and logs without them, in file order); whole users, seeded, sampled down to
    ``max_interactions`` rows when there are more. Also whether it is a sample."""
    sampled = len(users) > max_interactions
    if sampled:
        counts = np.bincount(users)
        chosen = np.random.default_rng(seed).permutation(len(counts))
        chosen = chosen[:max(int(np.searchsorted(np.cumsum(counts[chosen]), max_interactions, side="right")), 1)]
        wanted = np.zeros(len(counts), bool)
        wanted[chosen] = True
        keep = wanted[users]
        users, items = users[keep], items[keep]
        timestamps = None if timestamps is None else timestamps[keep]
    if timestamps is None:
        order = np.argsort(users, kind="stable")
    else:
        order = np.lexsort((timestamps, users))  # lexsort is stable: ties keep file order
    return users[order], items[order], sampled


def _within_lines(users: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random permutation of rows that keeps ``users`` (non-decreasing) in place: every line shuffled on its own
    (the sort key is the user plus a uniform in [0, 1))."""
    return np.argsort(users + rng.random(len(users)))


def other_lines(users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """For each adjacent item pair of each line (``users`` non-decreasing: a line is a run of one user; ``items``
    non-negative codes), unordered and counted once per line: on how many other lines it is an adjacent pair too."""
    same = users[1:] == users[:-1]
    first, second = items[:-1][same].astype(np.int64), items[1:][same].astype(np.int64)
    if not len(first):
        return np.zeros(0, np.int64)
    items_n, lines = int(items.max()) + 1, users[1:][same].astype(np.int64)
    keys = np.minimum(first, second) * items_n + np.maximum(first, second)
    lines_n = int(lines.max()) + 1
    if items_n * items_n * lines_n < 2 ** 62:  # one sort of (pair, line) as one integer
        keys = np.sort(keys * lines_n + lines)
        distinct = np.ones(len(keys), bool)  # the first occurrence of a pair on its line
        distinct[1:] = keys[1:] != keys[:-1]
        keys = keys[distinct] // lines_n
    else:
        order = np.lexsort((lines, keys))
        keys, lines = keys[order], lines[order]
        distinct = np.ones(len(keys), bool)
        distinct[1:] = (keys[1:] != keys[:-1]) | (lines[1:] != lines[:-1])
        keys = keys[distinct]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    runs = np.diff(np.r_[starts, len(keys)])  # lines per pair
    return np.repeat(runs - 1, runs)


def _min_others(shuffled: list[np.ndarray]) -> int:
    """The least ``m >= 1`` such that at most :data:`MAX_SHUFFLED_SHARE` of the shuffled pairs occur on ``m`` other
    lines or more (1 but on small catalogues, where almost every pair recurs by chance)."""
    top = max(int(others.max(initial=0)) for others in shuffled) + 2
    at_least = np.mean([np.cumsum(np.bincount(others, minlength=top)[::-1])[::-1] / max(len(others), 1)
                        for others in shuffled], axis=0)  # at_least[m]: share with m other lines or more
    return int(np.argmax(np.r_[np.inf, at_least[1:]] <= MAX_SHUFFLED_SHARE))


def _adjacency(users: np.ndarray, items: np.ndarray, timestamps: Optional[np.ndarray], permutations: int,
               max_interactions: int, seed: int) -> AdjacencyTest:
    users, items, sampled = _lines(users, items, timestamps, max_interactions, seed)
    observed = other_lines(users, items)
    rng = np.random.default_rng(seed)
    shuffled = [other_lines(users, items[_within_lines(users, rng)])
                for _ in range(permutations if len(observed) else 0)]
    m = _min_others(shuffled) if shuffled else 1
    shares = [float(np.mean(others >= m)) if len(others) else float("nan") for others in [observed, *shuffled]]
    repeated_shuffled = float(np.mean([np.sum(others > 0) for others in shuffled])) if shuffled else float("nan")
    return AdjacencyTest(shares[0], tuple(shares[1:]), m, int((np.bincount(users) >= 2).sum()) if len(users) else 0,
                         len(observed), int(np.sum(observed > 0)), repeated_shuffled, len(users), sampled)


def _timestamps(frame: pd.DataFrame) -> Optional[np.ndarray]:
    return frame["timestamp"].to_numpy() if "timestamp" in frame else None


def adjacency_test(frame: pd.DataFrame, permutations: int = PERMUTATIONS, max_interactions: int = MAX_INTERACTIONS,
                   seed: int = SEED) -> AdjacencyTest:
    """The permutation test of adjacency (see the module docstring) on ``frame``'s lines (each user's rows in
    ``timestamp`` order, else in file order), seeded."""
    users, items, _ = _codes(frame)
    return _adjacency(users, items, _timestamps(frame), permutations, max_interactions, seed)


def detect(frame: pd.DataFrame) -> OrderDecision:
    """``none`` if the lines are sorted by id or their order carries no information, ``time`` if it does or the
    evidence is too thin to tell (file order is kept); with the evidence. See the module docstring."""
    users, items, item_ids = _codes(frame)
    share, sorted_lines = _sorted_share(users, items, item_ids)
    if sorted_lines >= MIN_LINES and share >= SORTED_SHARE:
        return OrderDecision(SET, "detected", f"lines sorted by id: {share:.1%} of {sorted_lines} lines have their "
                                              f"already-seen items in ascending id order (threshold "
                                              f"{SORTED_SHARE:.0%})")
    test = _adjacency(users, items, _timestamps(frame), PERMUTATIONS, MAX_INTERACTIONS, SEED)
    if test.lines < MIN_LINES or max(test.repeated, test.repeated_shuffled) < MIN_REPEATED:
        why = (f"only {test.lines} lines of two items or more" if test.lines < MIN_LINES else
               f"only {max(test.repeated, test.repeated_shuffled):.0f} adjacent pairs repeated on other lines")
        return OrderDecision("time", "detected", f"too little evidence to tell a set from a sequence ({why}); "
                                                 "keeping file order")
    sample = f", a sample of {test.interactions} interactions" if test.sampled else ""
    elsewhere = "elsewhere" if test.min_others == 1 else f"on {test.min_others}+ other lines"
    statistic = (f"adjacent pairs repeated {elsewhere} {test.observed:.1%} vs {test.expected:.1%} with each line "
                 f"shuffled ({test.ratio:.2f}x, threshold {RATIO_THRESHOLD}x; z={test.z:.1f}) over {test.lines} "
                 f"lines{sample}")
    if test.ratio >= RATIO_THRESHOLD and test.z >= MIN_Z:
        return OrderDecision("time", "detected", f"{statistic}: the order carries information")
    if -test.z_against(RATIO_THRESHOLD) >= MIN_Z:
        return OrderDecision(SET, "detected", f"{statistic}: the order carries no information")
    return OrderDecision("time", "detected", f"{statistic}: too little evidence to tell (z={MIN_Z:g} needed either "
                                             "way); keeping file order")


def _has_time(frame: pd.DataFrame, format: str) -> bool:
    """Whether the log has a timestamp column (a ``user_items`` file's ``timestamp`` is only the position)."""
    return "timestamp" in frame and format != "user_items"


def resolve(requested: str, frame: pd.DataFrame, format: str, path: str) -> OrderDecision:
    """The order of the interactions read from ``path`` (``format`` as resolved by the reader), per ``data.order``.

    Logs the decision with its evidence, and warns when ``time`` is forced on data that look like sets.
    """
    if requested not in ORDERS:
        raise InputError(f"{requested!r} is not one of {ORDERS}", field="data.order")
    if requested == "auto":
        if _has_time(frame, format):
            decision = OrderDecision("time", "timestamp column", "the log has a timestamp column")
        else:
            decision = detect(frame)
    else:
        decision = OrderDecision(requested, "config", f"data.order={requested}")
        if requested == "time" and not _has_time(frame, format):
            detected = detect(frame)
            if detected.is_set:
                logging.warning("%s: data.order=time, but the data look like sets (%s); a model learning the next "
                                "item would learn an order that carries nothing about the users", path,
                                detected.evidence)
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
