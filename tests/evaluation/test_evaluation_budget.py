"""Evaluation within a budget: EASE^R skipped (logged, recorded, reported) when it does not fit
``baseline_memory_mb``, computed when it does; progress lines while ranking and while a baseline fits."""

import logging
import re
import time

import numpy as np
import pytest

from retrieval.evaluation import baselines, csr, evaluator, report


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    n_users, n_items, dim = 40, 25, 4
    train = csr.from_pairs(rng.integers(0, n_users, 200), rng.integers(2, n_items, 200), n_users)
    test = csr.from_pairs(np.arange(n_users), rng.integers(2, n_items, n_users), n_users)
    return (rng.standard_normal((n_users, dim)).astype(np.float32),
            rng.standard_normal((n_items, dim)).astype(np.float32), train, test)


def _evaluate(data, **kwargs):
    users, items, train, test = data
    return evaluator.evaluate(users, items, train, test, ks=(5,), n_bootstrap=0,
                              baselines=("most_popular", "ease"), **kwargs)


def test_ease_over_the_budget_is_skipped_with_its_reason(data, caplog):
    needed = baselines.ease_memory_mb(25)
    with caplog.at_level(logging.WARNING, logger="absl"):
        metrics = _evaluate(data, baseline_memory_mb=needed / 2)
    assert metrics["protocol/skipped_baselines"] == ["ease"]
    assert "eval.baseline_memory_mb" in metrics["protocol/skipped/ease"]
    assert "baseline/ease/recall@5" not in metrics and "baseline/most_popular/recall@5" in metrics
    assert any("baseline ease skipped" in record.getMessage() for record in caplog.records)
    text = report.render_markdown(metrics)
    assert "Baseline ease skipped: 23 items need about" in text  # 25 rows, 2 reserved


def test_ease_within_the_budget_runs(data):
    metrics = _evaluate(data, baseline_memory_mb=baselines.ease_memory_mb(25))
    assert metrics["protocol/skipped_baselines"] == [] and "baseline/ease/recall@5" in metrics


def test_ease_on_its_most_clicked_items_says_so_in_the_report(data, caplog):
    """``eval.ease_max_items`` below the catalogue: EASE^R is fitted, its parameters carry the cap, and one line (log
    and report) says how many items it modelled and what share of the training pairs they hold."""
    _, _, train, _ = data
    with caplog.at_level(logging.INFO, logger="absl"):
        metrics = _evaluate(data, baseline_defaults=baselines.config_defaults(ease_max_items=10))
    assert metrics["baseline/ease/params/items"] == 10 and "baseline/ease/recall@5" in metrics
    counts = np.sort(np.bincount(train.indices, minlength=25)[2:])[::-1]
    share = counts[:10].sum() / counts.sum()
    note = f"models the 10 most clicked of 23 items ({share:.0%} of the training pairs; eval.ease_max_items)"
    assert metrics["baseline/ease/note"] == note
    assert sum(f"baseline ease {note}" == r.getMessage() for r in caplog.records) == 1
    assert f"- ease: {note}" in report.render_markdown({**metrics, "protocol/baselines": ["most_popular", "ease"]})


def test_progress_lines_count_users_and_estimate_the_rest(data, caplog):
    with caplog.at_level(logging.INFO, logger="absl"):
        metrics = _evaluate(data, progress_interval_s=0.0, max_block_bytes=4 * 25 * 16)  # blocks of 16 users
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluation: ")]
    total = 3 * metrics["count/eval_users"]  # the model and two baselines, users with history (no cold start)
    assert metrics["count/cold_start_users"] == 0
    assert lines[0].startswith(f"evaluation: 16 of {total} user rankings done ({1600 / total:.0f}%, now model)")
    assert lines[-1].startswith(f"evaluation: {total} of {total}") and "about 0 s left" in lines[-1]


def test_progress_is_quiet_between_intervals():
    ticks = iter([0.0, 1.0, 2.0, 31.0])
    progress = evaluator.Progress(100, interval_s=30.0, clock=lambda: next(ticks))
    progress.advance(10, "model")
    progress.advance(10, "model")
    assert progress.done == 20 and progress._last == 0.0
    progress.advance(10, "model")
    assert progress._last == 31.0


def test_the_evaluated_lines_give_rounded_metrics(data, caplog):
    with caplog.at_level(logging.INFO, logger="absl"):
        _evaluate(data)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluated ")]
    assert len(lines) == 3 and all(re.fullmatch(r"evaluated \w+: recall@5 = \d\.\d{4}", line) for line in lines)


def test_a_long_baseline_fit_logs_a_line_every_interval_with_its_totals(data, caplog, monkeypatch):
    make = baselines.make

    def slow(name, *args):
        if name == "ease":
            time.sleep(2.5)
        return make(name, *args)

    monkeypatch.setattr(baselines, "make", slow)
    with caplog.at_level(logging.INFO, logger="absl"):
        _evaluate(data, progress_interval_s=1.0)
    lines = [r.getMessage() for r in caplog.records if "fitting baseline" in r.getMessage()]
    what = f"evaluation: fitting baseline ease (2 of 2) on 23 items and {data[2].indices.size} training pairs"
    beats = [line for line in lines if "so far" in line]
    assert len(beats) >= 2 and all(re.fullmatch(rf"{re.escape(what)}, \d+ s so far", line) for line in beats)
    assert re.fullmatch(rf"{re.escape(what)} took \d+\.\d s", lines[-1])
    assert not [line for line in lines if "most_popular" in line]  # a short fit logs nothing


def test_cold_item_rankings_log_progress_with_their_total(caplog):
    from tests.evaluation.test_evaluation_cold_items import _evaluated

    with caplog.at_level(logging.INFO, logger="absl"):
        _evaluated(4, progress_interval_s=0.0)
    lines = [r.getMessage() for r in caplog.records if "now cold items" in r.getMessage()]
    assert lines[0].startswith("evaluation: 4 of 8 user rankings done (50%, now cold items, model, whole catalogue)")
    assert lines[-1].startswith("evaluation: 8 of 8 user rankings done (100%, now cold items, model, among_cold)")
