"""The run's time budget: how many epochs the time left holds (retrieval/jobs/budget.py)."""

import pytest

from retrieval.jobs import budget


class Clock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_epochs_fill_what_is_left_after_the_reserve():
    # 1,000 s left, 100 kept for the evaluation: 900 s; one epoch of 60 s done, so 15 more fit (E = 16).
    assert budget.TimeBudget(1000.0, 100.0, Clock()).epochs(60.0, 50.0, cap=40) == 16
    assert budget.TimeBudget(1000.0, 100.0, Clock()).epochs(60.0, 50.0, cap=12) == 12  # the cap
    assert budget.TimeBudget(1000.0, 100.0, Clock(990.0)).epochs(60.0, 50.0, cap=40) == 1  # spent: the epoch done
    assert budget.TimeBudget(1000.0, 100.0, Clock()).epochs(60.0, 50.0, cap=40, done=2) == 17  # planned again


def test_epochs_keep_room_for_a_warm_refit_or_a_refit_as_long_as_the_tuning():
    clock = Clock()
    warm = budget.TimeBudget(1000.0, 100.0, clock).epochs(60.0, 50.0, cap=40, refit_fixed_s=120.0)
    assert warm == 14  # the epoch done and (900 - 120) / 60 = 13 more
    # From scratch: E - 1 more epochs of tuning (60 s; the first is spent) and E of refit (50 s x 1.1 = 55 s).
    scratch = budget.TimeBudget(1000.0, 100.0, clock).epochs(60.0, 50.0, cap=40, refit_scale=1.1)
    assert scratch == 8 and 7 * 60 + 8 * 55 <= 900 < 8 * 60 + 9 * 55


def test_the_plan_reserves_the_warm_refit_from_the_measured_training_time():
    from retrieval.training import EpochTime

    decide = budget.plan(budget.TimeBudget(1000.0, 100.0, Clock()), "tuning", 40, refit=True, refit_epochs=2,
                         refit_scale=1.0 / 0.9)
    # The refit: 2 epochs of 45 s training x 1/0.9 = 100 s; (900 - 100) / 60 = 13.3: 13 more epochs.
    assert decide(EpochTime(60.0, 15.0)) == 14
    final = budget.plan(budget.TimeBudget(1000.0, 100.0, Clock()), "final", 40, refit=True, refit_epochs=2,
                        refit_scale=1.0 / 0.9)
    assert final(EpochTime(60.0, 15.0)) == 16  # nothing after the final phase: 900 / 60 = 15 more


@pytest.mark.parametrize("names,expected_fits", [((), 0.0), (("most_popular",), 0.0)])
def test_the_reserve_counts_the_ranking_of_every_test_user(tmp_path, names, expected_fits):
    import pandas as pd

    from retrieval import artifacts
    from retrieval.evaluation import baseline_tuning

    paths = artifacts.RunPaths(tmp_path)
    paths.train_data.parent.mkdir(parents=True)
    pd.DataFrame({"user_id": ["a", "a", "b"], "item_id": ["x", "y", "x"]}).to_parquet(paths.train_data)
    pd.DataFrame({"user_id": ["a", "b", "c"], "item_id": ["z", "y", "x"]}).to_parquet(paths.test_data)
    seconds = budget.evaluation_seconds(paths, names, {}, n_items=1_000_000)
    ranking = (1 + len(names)) * 3 * 1_000_000 * baseline_tuning.RANK_S_PER_SCORE
    assert seconds == pytest.approx(expected_fits + ranking + budget.FIXED_S)


def test_the_plan_counts_the_first_steps_compilation_once():
    from retrieval.training import EpochTime

    # A first epoch of 70 s of which 10 s compiling: further epochs cost 60 s, and the warm refit pays the
    # compilation once (10 + 2 x 45 / 0.9 = 110 s): (900 - 110) / 60 = 13.2, so 13 more.
    decide = budget.plan(budget.TimeBudget(1000.0, 100.0, Clock()), "tuning", 40, refit=True, refit_epochs=2,
                         refit_scale=1.0 / 0.9)
    assert decide(EpochTime(70.0, 15.0, compile_seconds=10.0)) == 14
    assert decide(EpochTime(70.0, 15.0)) == 12  # counted in every epoch: (900 - 122.2) / 70 = 11.1 more


def test_the_first_steps_compilation_is_its_time_beyond_the_other_steps_mean():
    from retrieval.training import PlanEpochs

    planner = PlanEpochs(lambda measured: 1, cap=4, steps_per_epoch=11, warmup_steps=0, decay_steps=None,
                         record=None, dependents=[])
    planner._first_step, planner._steps = 5.0, 11
    assert planner._compile_seconds(15.0) == pytest.approx(4.0)  # the other 10 steps: 1 s each
    planner._steps = 1
    assert planner._compile_seconds(15.0) == 0.0  # a single step: nothing to compare with


def test_the_epochs_are_planned_after_the_first_epoch_and_again_after_the_second(monkeypatch):
    import types

    import tensorflow as tf

    from retrieval import training

    now = [0.0]
    monkeypatch.setattr(training.time, "perf_counter", lambda: now[0])
    seen = []

    def plan(measured):
        seen.append(measured)
        return 6 if measured.done == 1 else 9

    decay = tf.Variable(0.0)
    stop = types.SimpleNamespace(total_steps=0)
    planner = training.PlanEpochs(plan, cap=12, steps_per_epoch=4, warmup_steps=0, decay_steps=decay, record=None,
                                  dependents=[stop])
    planner.set_model(types.SimpleNamespace(stop_training=False))
    for epoch, first_step in enumerate((5.0, 1.0, 1.0)):  # the first epoch's first step compiles: 4 s more
        planner.on_epoch_begin(epoch)
        for step_seconds in (first_step, 1.0, 1.0, 1.0):
            now[0] += step_seconds
            planner.on_train_batch_end(0)
        planner.on_epoch_end(epoch)
    assert [m.done for m in seen] == [1, 2]  # not after the third
    assert seen[0].seconds == 8.0 and seen[0].compile_seconds == pytest.approx(4.0) and seen[0].steady_seconds == 4.0
    assert seen[1].seconds == 4.0 and seen[1].steady_seconds == 4.0  # the second epoch: no compilation in it
    assert planner.epochs == 9 and stop.total_steps == 36 and float(decay.numpy()) == 36.0
