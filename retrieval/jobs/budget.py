"""The run's time budget (``train.time_budget_s``): the length of training set from its measured epoch time, so that
the whole run (prepare, the baselines' tuning, training, the refit, the evaluation with its baselines, the index)
ends inside the budget, where an epoch cap would either waste it or overrun it.

The train stage tunes the baselines first (``evaluation.runs.tune_baselines``: their time is then spent, not
guessed) and estimates what follows training (:func:`evaluation_seconds`: the baselines' fits on all training data
from their cost models, and the full-corpus ranking of every test user by the model and by each baseline). Training
then measures its first epoch (``training.PlanEpochs``; its first step's compilation counted once, not in every
epoch) and its second (no first-call costs), and takes as many epochs as the time left holds
(:meth:`TimeBudget.epochs`): the tuning phase keeps room for the refit after it (a warm refit's fixed epochs, or a
refit from scratch as long as the tuning), and early stopping still ends it sooner. Where the tuning's minimum
already spent what it kept for the refit (a slower or busier box), a warm refit plans its own epochs the same way,
at most the length it was given and at least one, and a refit from scratch, which cut short would end worse than the
tuned model, is skipped (``tuning._refit_short``). The cosine spans the planned epochs, so a shorter run still
anneals. The budget is a target, not a guarantee: the estimates are on the safe side of a 2-core machine, and the
run never stops mid-stage for it. A second tuning with the teacher
(``train.teacher_when``) plans its own epochs from what is left when it starts; the first keeps no room for it (where
the teacher follows, the probe of ``train.teacher_probe_epochs`` ends the first after a few epochs).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Optional, Sequence

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds
from absl import logging

from retrieval import artifacts
from retrieval.evaluation import baseline_tuning
from retrieval.evaluation import baselines as baselines_lib

FIXED_S = 20.0  # export, index with its self-check, report and publish: seconds at Gowalla's size on 2 cores


@dataclasses.dataclass(frozen=True)
class TimeBudget:
    """A run's deadline (``clock()`` seconds) and the seconds reserved for what follows training (``reserve_s``)."""

    deadline: float
    reserve_s: float
    clock: Callable[[], float] = time.monotonic

    def left_s(self) -> float:
        """Seconds left for training: to the deadline, less the reserve."""
        return self.deadline - self.clock() - self.reserve_s

    def epochs(self, epoch_s: float, training_epoch_s: float, cap: int, *, done: int = 1, refit_fixed_s: float = 0.0,
               refit_scale: float = 0.0) -> int:
        """The epoch count (``done`` to ``cap``) that ends training in time, ``done`` epochs being done now: each
        further epoch costs ``epoch_s`` (its validation included), and the phase after it ``refit_fixed_s`` plus
        ``refit_scale`` x ``training_epoch_s`` per epoch of this one (a refit from scratch for the best epoch count:
        ``refit_scale`` = its examples over this phase's)."""
        left = self.left_s() - refit_fixed_s
        per_epoch = epoch_s + refit_scale * training_epoch_s
        # (E - done) more epochs of this phase and E epochs' worth of the refit must fit in what is left.
        more = math.floor((left - done * refit_scale * training_epoch_s) / per_epoch) if per_epoch > 0 else cap
        return int(min(max(done + more, done), cap))


def _pairs_per_user(path) -> np.ndarray:
    """Training items per user of a parquet file of interactions."""
    table = ds.dataset(str(path), format="parquet").to_table(columns=["user_id"])
    return pc.value_counts(table.column("user_id").combine_chunks()).field("counts").to_numpy()


def evaluation_seconds(paths: artifacts.RunPaths, names: Sequence[str], tuned: dict, n_items: int) -> float:
    """Estimated seconds of the evaluate, index and publish stages of a run: each baseline of ``names`` fitted on all
    training data at its tuned parameters (``tuned``: name -> params; its cost model, ``Baseline.seconds``), the
    model and every baseline ranking the whole catalogue for every test user (``baseline_tuning.RANK_S_PER_SCORE``),
    and :data:`FIXED_S`."""
    lengths = _pairs_per_user(paths.train_data).astype(np.int64)
    shape = baselines_lib.Shape(len(lengths), n_items, int(lengths.sum()), int((lengths * lengths).sum()))
    test_users = len(_pairs_per_user(paths.test_data)) if paths.test_data.exists() else 0
    fits = 0.0
    for name in names:
        baseline = baselines_lib.BASELINES[name]
        if baseline.seconds is not None:
            fits += baseline.seconds(shape, [tuned.get(name) or dict(baseline.defaults)])
    return fits + (1 + len(names)) * test_users * n_items * baseline_tuning.RANK_S_PER_SCORE + FIXED_S


def plan(budget: TimeBudget, phase: str, cap: int, *, refit: bool, refit_epochs: int,
         refit_scale: float) -> Callable[..., int]:
    """The ``plan_epochs`` of ``training.fit`` for ``phase`` (``tuning`` leaves room for the refit; ``final`` has
    none after it), logging its decision in one line."""
    def decide(measured) -> int:
        fixed = scale = 0.0
        if phase == "tuning" and refit:  # the refit builds its model again: one more compilation
            if refit_epochs:
                fixed = measured.compile_seconds + refit_epochs * refit_scale * measured.steady_training_seconds
            else:
                fixed, scale = measured.compile_seconds, refit_scale
        epochs = budget.epochs(measured.steady_seconds, measured.steady_training_seconds, cap, done=measured.done,
                               refit_fixed_s=fixed, refit_scale=scale)
        left = budget.deadline - budget.clock()
        logging.info("time budget: %s epochs of %s (epoch %d took %.0f s, of which its validation %.0f s%s; %.0f s "
                     "left in the budget, %.0f s kept for the evaluation and baselines%s)", epochs, phase,
                     measured.done, measured.seconds, measured.validation_seconds,
                     f" and its first step's compilation {measured.compile_seconds:.0f} s" * (measured.done == 1),
                     left, budget.reserve_s,
                     f", a refit of as many epochs ({scale:.2f}x each)" if scale else
                     f", {fixed:.0f} s for the refit" if fixed else "")
        if epochs == measured.done and left - budget.reserve_s < measured.steady_seconds:
            logging.warning("time budget: already spent (%.0f s left, %.0f s kept for the evaluation): %d epoch%s",
                            left, budget.reserve_s, epochs, "s" * (epochs > 1))
        return epochs
    return decide


def for_run(deadline: Optional[float], paths: artifacts.RunPaths, names: Sequence[str], tuned: dict, n_items: int,
            clock: Callable[[], float] = time.monotonic) -> Optional[TimeBudget]:
    """The run's :class:`TimeBudget` (None without a deadline), its reserve estimated by :func:`evaluation_seconds`."""
    if deadline is None:
        return None
    reserve = evaluation_seconds(paths, names, tuned, n_items)
    logging.info("time budget: %.0f s left before training; about %.0f s kept for the evaluation, its baselines and "
                 "the index", deadline - clock(), reserve)
    return TimeBudget(deadline, reserve, clock)
