"""Baselines tuned like the model: each tunable baseline's parameters are chosen on a holdout of the training data,
within a time budget, and the evaluation then refits it with them on all training data (``evaluator.evaluate``).

**Holdout** (:func:`run_holdout`): the run's automatic validation holdout (``data/tuning/train.parquet`` and
``validation.parquet``, ``prepare.tuning_data``: written when the run holds out part of its training data to
early-stop the model), else the user's validation data (``data/validation.parquet``, ranked against the run's
training data), else none: the baselines keep their defaults and the report says so. Both parts are indexed against
the evaluation's catalogue, so a parameter means the same on the holdout and in the test evaluation.

**Tuning** (:func:`tune`): the points of the baseline's grid (``baselines.Baseline.grid``) and its defaults are
grouped into fits (points that differ only in parameters outside ``Baseline.separate`` are fitted together, e.g.
every b and k of one RP3beta a), the defaults' fit first. Every point is scored by recall@K (K: the run's first
``eval.ks``) on a seeded sample of at most ``eval.baseline_tuning_users`` validation users with a training history,
their training items excluded, through ``ranking.top_k`` and ``metrics.accuracy`` as the evaluation ranks. Before a
fit starts, its time is estimated (the baseline's own model, ``Baseline.seconds``, for the first; the mean of the
fits measured so far after that) and a fit that would end past ``eval.baseline_budget_s`` (seconds per baseline) is
not started: the best point so far is kept and a line says how many points were tried. When not even the first fit
is within the budget, or the first fit is the defaults' point alone and the budget does not hold a second (EASE^R at
tens of thousands of items: a Cholesky of V^3 / 3 flops per lambda), nothing is fitted: the defaults stay and one
line says so. The chosen point is the best validation recall (ties: the first tried, so the defaults
win a tie). A baseline may fit a cheaper stand-in of each point that chooses the same (``Baseline.tuning_point``:
EASE^R's lambda on its ``baselines.EASE_TUNING_ITEMS`` most clicked items); the refit then fits the chosen point
itself, and the note says at what it was tuned.

Flat keys (:meth:`Tuned.metrics`): ``baseline/<name>/tuning_seconds``, ``baseline/<name>/validation/recall@K`` (the
chosen point's), ``baseline/<name>/tuning/points`` (every tried point: its parameters and recall@K),
``baseline/<name>/tuning/tried`` and ``.../grid`` (points tried, points planned), ``baseline/<name>/tuning/note``
(at what a stand-in was tuned, why fewer were tried, or none); the evaluator adds the refit's
``baseline/<name>/params/<p>`` and ``baseline/<name>/fit_seconds``, and :func:`protocol` says where the holdout came
from.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from absl import logging

from retrieval import artifacts
from retrieval.data import prepare
from retrieval.data.vocab import NUM_RESERVED
from retrieval.evaluation import baselines as baselines_lib
from retrieval.evaluation import csr as csr_lib
from retrieval.evaluation import evaluator, loading, protocols, ranking
from retrieval.evaluation import metrics as metrics_lib

TUNING_USERS = baselines_lib.TUNING_USERS  # default of eval.baseline_tuning_users
BUDGET_S = baselines_lib.TUNING_BUDGET_S  # default of eval.baseline_budget_s: seconds per tuned baseline
# Scoring and ranking time per (user, item) score of one point, for the estimate of a first fit (5,000 users x 41k
# items in about 1 s on an idle 2-core box, half of it RP3beta's sparse product, and twice that under load; it was
# 4 to 6 s before ranking.top_k kept its top k on FAISS's heaps).
RANK_S_PER_SCORE = 1e-8


@dataclasses.dataclass
class Holdout:
    """The tuning data: ``train`` [U, V] the holdout's training part, ``validation`` [U, V] its held-out items (rows:
    the same users, columns: the evaluation's vocabulary indices), and where they came from."""

    train: csr_lib.Csr
    validation: csr_lib.Csr
    n_items: int
    source: str

    @property
    def popularity(self) -> np.ndarray:
        return np.bincount(self.train.indices, minlength=self.n_items)


@dataclasses.dataclass
class Tuned:
    """One baseline's tuning: the chosen ``params``, every tried point (its parameters and ``metric`` on the
    validation users), how many points the grid has, the seconds spent, ``note``: why fewer points (or none) were
    tried ("" when all were), and ``fitted_at``: the parameters the tuning fitted every point at in place of its own
    (``baselines.Baseline.tuning_point``: EASE^R's items; the points record them, the chosen ``params`` do not)."""

    name: str
    params: dict
    metric: str
    points: list
    grid: int
    seconds: float
    users: int
    note: str = ""
    fitted_at: dict = dataclasses.field(default_factory=dict)

    @property
    def value(self) -> Optional[float]:
        """The chosen point's validation metric (None: nothing was tried)."""
        fitted = {**self.params, **self.fitted_at}
        chosen = [point[self.metric] for point in self.points
                  if all(point[name] == value for name, value in fitted.items())]
        return chosen[0] if chosen else None

    def metrics(self) -> dict:
        """The flat keys of ``metrics.json`` (see the module docstring)."""
        prefix = f"baseline/{self.name}/"
        out = {prefix + "tuning_seconds": self.seconds, prefix + "tuning/tried": len(self.points),
               prefix + "tuning/grid": self.grid, prefix + "tuning/points": self.points}
        if self.value is not None:
            out[f"{prefix}validation/{self.metric}"] = self.value
        if self.note:
            out[prefix + "tuning/note"] = self.note
        return out


def describe(params: Mapping[str, float]) -> str:
    """``a=0.75 b=0.35 k=200``."""
    return " ".join(f"{name}={value:g}" for name, value in params.items())


def _groups(baseline: baselines_lib.Baseline, default: Mapping[str, float],
            grid: Optional[Mapping[str, Sequence[float]]] = None) -> list[list[dict]]:
    """The grid's points (``grid``, else the baseline's) and the defaults, grouped into fits (same values of
    ``baseline.separate``), the defaults' fit first and the defaults first in it."""
    others = baselines_lib.grid_points(default, grid if grid is not None else baseline.grid)
    points = [dict(default)] + [point for point in others if point != dict(default)]
    groups: dict[tuple, list[dict]] = {}
    for point in points:
        groups.setdefault(tuple(point[name] for name in baseline.separate), []).append(point)
    return list(groups.values())


def validation_users(holdout: Holdout, max_users: int, seed: int,
                     exclude_train: bool = True) -> tuple[np.ndarray, csr_lib.Csr]:
    """A seeded sample of at most ``max_users`` rows with a training history and a rankable validation item, and
    their rankable validation items (one row per sampled user)."""
    relevant, _ = evaluator.rankable(holdout.train, holdout.validation, exclude_train)
    rows = np.flatnonzero((relevant.lengths > 0) & (holdout.train.lengths > 0))
    if len(rows) > max_users:
        rows = np.sort(np.random.default_rng(seed).choice(rows, max_users, replace=False))
    return rows, csr_lib.take(relevant, rows)


def score(scorer: ranking.Scorer, holdout: Holdout, rows: np.ndarray, relevant: csr_lib.Csr, k: int,
          exclude_train: bool = True, max_block_bytes: int = 256 << 20) -> float:
    """Mean recall@k of ``scorer`` over the validation ``rows`` (``relevant``: their rankable items, see
    :func:`validation_users`), training items excluded, as the evaluation ranks."""
    top, _ = ranking.top_k(scorer, rows, holdout.n_items, k, holdout.train if exclude_train else None,
                           max_block_bytes=max_block_bytes)
    return float(metrics_lib.accuracy(top, relevant, [k])[f"recall@{k}"].mean())


def tune(name: str, holdout: Holdout, k: int = 20, *, budget_s: float = BUDGET_S, max_users: int = TUNING_USERS,
         seed: int = 0, defaults: Optional[Mapping[str, float]] = None,
         memory_mb: float = baselines_lib.BASELINE_MEMORY_MB, exclude_train: bool = True,
         max_block_bytes: int = 256 << 20, grid: Optional[Mapping[str, Sequence[float]]] = None,
         clock: Callable[[], float] = time.monotonic,
         progress_interval_s: float = evaluator.PROGRESS_INTERVAL_S) -> Tuned:
    """Tunes baseline ``name`` on ``holdout`` (see the module docstring); ``defaults``: parameters overriding the
    registry's defaults (the config's EASE^R lambda), kept when nothing can be tried; ``grid``: the values to try
    per parameter instead of the baseline's grid (a parameter it leaves out keeps its default). A fit that runs
    longer than ``progress_interval_s`` logs a line at every interval (``evaluator.heartbeat``)."""
    baseline = baselines_lib.BASELINES[name]
    default = baselines_lib.params_of(name, defaults)
    metric = f"recall@{k}"
    groups = _groups(baseline, default, grid)
    planned = sum(map(len, groups))
    start = clock()
    rows, relevant = validation_users(holdout, max_users, seed, exclude_train)
    tuned = Tuned(name, dict(default), metric, [], planned, 0.0, len(rows))
    memory = baselines_lib.skip_reason(name, holdout.n_items, memory_mb, default)
    if memory is not None or not len(rows) or budget_s <= 0:
        why = (memory if memory is not None else "no validation user with a training history" if not len(rows)
               else "eval.baseline_budget_s = 0")
        return _finish(tuned, f"not tuned ({why}): {describe(default)} (defaults)", start, clock)
    training = baselines_lib.Training(holdout.train, holdout.n_items, holdout.popularity, seed)
    shape = baselines_lib.Shape.of(holdout.train, holdout.n_items)
    measured: list[float] = []
    chosen: list[dict] = []  # the grid's point of each of tuned.points (which record the points as fitted)
    # One heartbeat over the whole tuning, so that short fits in a row are not silent together.
    with evaluator.heartbeat(f"tuning baseline {name}", progress_interval_s) as beat:
        for number, group in enumerate(groups, 1):
            fitted = [baseline.tuning_point(point, holdout.n_items) for point in group]
            estimate = (float(np.mean(measured)) if measured else
                        (baseline.seconds(shape, fitted) if baseline.seconds else 0.0)
                        + len(group) * len(rows) * holdout.n_items * RANK_S_PER_SCORE)
            # The first fit is worth its time only if it tries more than the defaults or leaves time for another.
            needed = 2 * estimate if not measured and len(group) == 1 and len(groups) > 1 else estimate
            if clock() - start + needed > budget_s:
                if not measured:
                    over = (f"over eval.baseline_budget_s = {budget_s:g}" if clock() - start + estimate > budget_s else
                            f"and eval.baseline_budget_s = {budget_s:g} does not hold the defaults' and another")
                    return _finish(tuned, f"not tuned: one fit on the holdout ({holdout.n_items - NUM_RESERVED} items) "
                                   f"takes about {_seconds(estimate)} s, {over}; {describe(default)} (defaults)", start,
                                   clock)
                tuned.note = (f"{len(tuned.points)} of {planned} grid points within eval.baseline_budget_s = "
                              f"{budget_s:g} (the next fit: about {_seconds(estimate)} s); the best so far kept")
                break
            beat.what = (f"tuning baseline {name}, fit {number} of {len(groups)} ({len(group)} point"
                         f"{'s' if len(group) > 1 else ''}, {len(rows):,} validation users)")
            fit_start = clock()
            scorers = baselines_lib.fit(name, training, fitted)
            for index, point in enumerate(fitted):
                value = score(scorers[index], holdout, rows, relevant, k, exclude_train, max_block_bytes)
                scorers[index] = None  # its sparse matrix goes now, not with the group
                tuned.points.append({**point, metric: value})
                chosen.append(group[index])
            measured.append(clock() - fit_start)
    best = max(range(len(tuned.points)), key=lambda i: tuned.points[i][metric])  # the first of equals: the defaults
    tuned.params = {param: chosen[best][param] for param in default}
    tuned.fitted_at = {param: value for param, value in tuned.points[best].items()
                       if param in default and value != tuned.params[param]}
    if tuned.fitted_at:
        fitted_note = (f"tuned at {describe(tuned.fitted_at)} (the validation {metric} there), refitted at "
                       f"{describe({param: tuned.params[param] for param in tuned.fitted_at})}")
        tuned.note = f"{fitted_note}; {tuned.note}" if tuned.note else fitted_note
    return _finish(tuned, tuned.note, start, clock)


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 1 else f"{value:.2g}"


def _finish(tuned: Tuned, note: str, start: float, clock: Callable[[], float]) -> Tuned:
    """Records the time and the note, and logs the one line of this baseline's tuning."""
    tuned.note, tuned.seconds = note, clock() - start
    if not tuned.points:
        logging.warning("baseline %s %s", tuned.name, note)
        return tuned
    logging.info("baseline %s tuned on %d validation users in %.0f s: %s (validation %s %.4f; %d of %d grid "
                 "points)%s", tuned.name, tuned.users, tuned.seconds, describe(tuned.params), tuned.metric,
                 tuned.value, len(tuned.points), tuned.grid, f"; {note}" if note else "")
    return tuned


def tune_all(names: Sequence[str], holdout: Optional[Holdout], k: int = 20,
             defaults: Optional[Mapping[str, Mapping[str, float]]] = None, **settings) -> dict[str, Tuned]:
    """:func:`tune` for every tunable baseline of ``names`` (``settings``: its keyword arguments); none without a
    holdout."""
    if holdout is None:
        return {}
    return {name: tune(name, holdout, k, defaults=(defaults or {}).get(name), **settings)
            for name in names if baselines_lib.BASELINES[name].tunable}


def _read(path, what: str) -> pd.DataFrame:
    return loading.read_interactions(path, what)


def run_holdout(run_dir, catalogue: np.ndarray, train: Optional[pd.DataFrame] = None) -> Optional[Holdout]:
    """The run's holdout for tuning (see the module docstring), indexed against ``catalogue`` (vocabulary item ids,
    padding and OOV first); ``train``: the run's training table when already read. None: the run has none."""
    paths = artifacts.RunPaths(run_dir)
    parts = [prepare.tuning_data(paths, part) for part in ("train", "validation")]
    if all(path.exists() for path in parts):
        frames = _read(parts[0], "tuning training data"), _read(parts[1], "tuning validation data")
        source = "the run's automatic validation holdout (data/tuning/)"
    elif paths.validation_data.exists():
        frames = (train if train is not None else _read(paths.train_data, "training data"),
                  _read(paths.validation_data, "validation data"))
        source = "the run's validation data (data/validation.parquet, against data/train.parquet)"
    else:
        return None
    data = protocols.prepare(frames[0], frames[1], np.asarray(catalogue)[NUM_RESERVED:])
    return Holdout(data.train, data.test, len(catalogue), source)


def protocol(holdout: Optional[Holdout], tuned: Mapping[str, Tuned], budget_s: float) -> str:
    """One line for the report: where the baselines were tuned, on how many users, by what, within what budget."""
    if holdout is None:
        return "not tuned: the run has no validation data (no automatic holdout, no validation file); defaults"
    if not tuned:
        return f"no tunable baseline evaluated ({holdout.source} unused)"
    tried = [t for t in tuned.values() if t.points]
    users = max((t.users for t in tuned.values()), default=0)
    metric = next(iter(tuned.values())).metric
    return (f"tuned on {holdout.source}: {metric} of {users} validation users, training items excluded, at most "
            f"{budget_s:g} s per baseline (eval.baseline_budget_s), then refitted on all training data"
            + ("" if tried else "; none could be tried"))
