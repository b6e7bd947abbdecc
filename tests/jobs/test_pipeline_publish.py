"""Stages, the quality gate, publishing, retention and locks (no TensorFlow).

The process tests use ``spawn`` children that import only this module's light dependencies (under a second each).
"""

import json
import multiprocessing
import os
import time

import pytest

from retrieval import artifacts
from retrieval.errors import LockedError
from retrieval.jobs import gate
from retrieval.jobs.publish import ModelDirectory, file_lock
from retrieval.jobs.stages import StageRunner

SWITCHES = 2000  # of ``latest`` under a polling reader: well under a second on an idle machine


def _finish(model_dir: ModelDirectory, run_id: str) -> None:
    runner = StageRunner(model_dir.run_paths(run_id))
    runner.run("gate", lambda: {"passed": True})


def test_stage_runs_once_and_records_summary(tmp_path):
    calls = []
    runner = StageRunner(artifacts.RunPaths(tmp_path))
    assert runner.run("prepare", lambda: calls.append(1) or {"rows": 3}) == {"rows": 3}
    again = StageRunner(artifacts.RunPaths(tmp_path))
    assert again.run("prepare", lambda: calls.append(1) or {"rows": 4}) == {"rows": 3}
    assert calls == [1]
    assert again.summary("prepare") == {"rows": 3}
    assert "prepare" in again.timings


def test_failed_stage_leaves_no_marker(tmp_path):
    runner = StageRunner(artifacts.RunPaths(tmp_path))

    def boom():
        raise RuntimeError("crash")

    with pytest.raises(RuntimeError):
        runner.run("train", boom)
    assert not runner.is_done("train")


def test_gate_floors_and_regression():
    ok = gate.check({"recall@20": 0.30}, {"recall@20": 0.1}, {"recall@20": 0.31}, ["recall@20"], 0.05)
    assert ok.passed, ok.reasons
    low = gate.check({"recall@20": 0.05}, {"recall@20": 0.1}, None, ["recall@20"], 0.05)
    assert not low.passed and "below floor" in low.reasons[0]
    regressed = gate.check({"recall@20": 0.20}, {}, {"recall@20": 0.30}, ["recall@20"], 0.05)
    assert not regressed.passed and "regressed" in regressed.reasons[0]
    missing = gate.check({}, {"ndcg@20": 0.1}, None, [], 0.05)
    assert not missing.passed and "missing" in missing.reasons[0]


@pytest.mark.parametrize("new, passed", [(0.0476, True), (0.0474, False), (0.03, False)])
def test_regression_bound_is_relative_to_the_published_metric(new, passed):
    # 5% of a published recall@20 of 0.05 is 0.0025: the bound is 0.0475 (an absolute 0.05 would let anything in).
    decision = gate.check({"recall@20": new}, {}, {"recall@20": 0.05}, ["recall@20"], 0.05)
    assert decision.passed == passed, decision.reasons


def test_a_metric_at_its_floor_or_at_the_regression_bound_passes():
    at_floor = gate.check({"recall@20": 0.05, "ndcg@20": 0.02}, {"recall@20": 0.05, "ndcg@20": 0.02}, None, [], 0.05)
    assert at_floor.passed, at_floor.reasons
    at_bound = gate.check({"recall@20": 0.25}, {}, {"recall@20": 0.5}, ["recall@20"], 0.5)  # bound 0.25, exact
    assert at_bound.passed, at_bound.reasons


POPULAR = {"recall@20": 0.127, "ndcg@20": 0.06}


@pytest.mark.parametrize("model, passed", [(0.017, False), (0.2, True), (0.127 * 1.05, True), (0.1333, False)])
def test_a_model_must_beat_most_popular_by_the_margin(model, passed):
    # 0.017 is an untrained model, 0.127 * 1.05 = 0.13335 exactly at the 5% margin.
    decision = gate.check({"recall@20": model}, {"recall@20": 0.0}, None, ["recall@20", "ndcg@20"], 0.05, 0.05, POPULAR)
    assert decision.passed == passed, decision.reasons
    if not passed:
        assert "not 5% above the most-popular baseline's 0.1270" in decision.reasons[0]


def test_lift_check_off_or_without_its_inputs():
    untrained = {"recall@20": 0.017}
    assert gate.check(untrained, {}, None, ["recall@20"], 0.05, gate.OFF, POPULAR).passed
    assert gate.check(untrained, {}, None, ["recall@20"], 0.05).passed  # off unless asked
    no_baseline = gate.check(untrained, {}, None, ["recall@20"], 0.05, 0.05, {})
    assert "most-popular baseline (eval.baselines) missing" in no_baseline.reasons[0]
    no_metric = gate.check(untrained, {}, None, [], 0.05, 0.05, POPULAR)
    assert "no metric in gate.compare" in no_metric.reasons[0]


def test_popular_metrics_come_from_the_full_evaluation():
    evaluation = {"recall@20": 0.3, "baseline/most_popular/recall@20": 0.127, "baseline/random/recall@20": 0.01,
                  "baseline/most_popular/cold_start/recall@20": 0.1, "protocol": "text"}
    assert gate.popular_metrics(evaluation) == {"recall@20": 0.127, "cold_start/recall@20": 0.1}


def test_publish_switches_latest_atomically(tmp_path):
    model_dir = ModelDirectory(tmp_path)
    for run_id in ("r1", "r2"):
        (tmp_path / run_id).mkdir()
    assert model_dir.latest_run_id() is None
    model_dir.publish("r1", "L")
    assert model_dir.latest_run_id() == "r1"
    model_dir.publish("r2", "L")
    assert os.readlink(tmp_path / "latest") == "r2"
    assert model_dir.latest().root == tmp_path / "r2"
    with pytest.raises(FileNotFoundError):
        model_dir.publish("missing", "L")


def test_retention_keeps_latest_and_unfinished(tmp_path):
    model_dir = ModelDirectory(tmp_path)
    for i in range(5):
        (tmp_path / f"r{i}").mkdir()
        _finish(model_dir, f"r{i}")
        os.utime(model_dir.run_paths(f"r{i}").stages / "gate.json", (1000 + i, 1000 + i))
    (tmp_path / "in_progress").mkdir()
    model_dir.publish("r0", "L")
    removed = model_dir.retain(keep_last=2)
    assert sorted(removed) == ["r1", "r2"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "in_progress", "latest", "lineages", "r0", "r3", "r4"]


def test_retention_orders_runs_by_finish_time_not_by_name(tmp_path):
    model_dir = ModelDirectory(tmp_path)
    # The run started first ran longest: by name it is the oldest, by completion the newest (and the published one).
    for finished_at, run_id in [(3, "20240101T000000"), (1, "20240101T010000"), (2, "20240101T020000")]:
        (tmp_path / run_id).mkdir()
        _finish(model_dir, run_id)
        os.utime(model_dir.run_paths(run_id).stages / "gate.json", (1000 + finished_at, 1000 + finished_at))
    model_dir.publish("20240101T000000", "L")
    assert model_dir.finished_runs() == ["20240101T010000", "20240101T020000", "20240101T000000"]
    assert model_dir.retain(keep_last=2) == ["20240101T010000"]
    assert not (tmp_path / "20240101T010000").exists() and (tmp_path / "20240101T020000").exists()


def _hold_lock(path, ready, release):
    with file_lock(path, blocking=False):
        ready.set()
        release.wait(10)


def test_run_lock_refuses_a_second_process(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(tmp_path / ".lock", ready, release))
    holder.start()
    try:
        assert ready.wait(20)
        with pytest.raises(LockedError):
            with file_lock(tmp_path / ".lock", blocking=False):
                pass
    finally:
        release.set()
        holder.join(10)
    with file_lock(tmp_path / ".lock", blocking=False):
        pass


def _poll_latest(root, ready, stop, counts):
    """Reads ``latest`` as fast as it can until ``stop``; ``counts`` = [reads, reads that found no valid run]."""
    model_dir = ModelDirectory(root)
    ready.set()
    while not stop.is_set():
        missing = 0
        for _ in range(200):
            try:
                missing += model_dir.latest_run_id() not in ("r1", "r2")
            except FileNotFoundError:  # gone between its is_symlink and readlink
                missing += 1
        counts[0] += 200
        counts[1] += missing


def test_latest_never_goes_missing_while_switched(tmp_path):
    model_dir = ModelDirectory(tmp_path)
    for run_id in ("r1", "r2"):
        (tmp_path / run_id).mkdir()
    model_dir.publish("r1", "L")
    ctx = multiprocessing.get_context("spawn")
    ready, stop, counts = ctx.Event(), ctx.Event(), ctx.Array("q", 2)
    reader = ctx.Process(target=_poll_latest, args=(tmp_path, ready, stop, counts))
    reader.start()
    switches, deadline = 0, time.monotonic() + 60
    try:
        assert ready.wait(20)
        # Switch SWITCHES times and on until the reader (on a loaded machine maybe slow to run) has read as often.
        while (switches < SWITCHES or counts[0] < SWITCHES) and time.monotonic() < deadline:
            model_dir.publish(("r2", "r1")[switches % 2], "L")
            switches += 1
    finally:
        stop.set()
        reader.join(20)
    reads, missing = counts[:]
    assert reads >= SWITCHES, f"the reader made only {reads} reads"
    assert missing == 0, f"{missing} of {reads} reads during {switches} switches found no latest"
    assert model_dir.latest_run_id() == ("r2", "r1")[(switches - 1) % 2]


def _take_publish_lock(root, started, acquired):
    started.set()
    with ModelDirectory(root).publish_lock():
        acquired.set()


def test_publish_lock_makes_a_second_process_wait(tmp_path):
    model_dir = ModelDirectory(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    started, acquired = ctx.Event(), ctx.Event()
    waiter = ctx.Process(target=_take_publish_lock, args=(tmp_path, started, acquired))
    try:
        with model_dir.publish_lock():
            waiter.start()
            assert started.wait(20)
            assert not acquired.wait(0.5), "a second process entered the publish lock while it was held"
        assert acquired.wait(10), "the second process never got the released publish lock"
    finally:
        waiter.join(10)


def test_the_last_line_says_what_was_published_where(tmp_path):
    """pipelines.train's last line: latest moved, or only the lineage's link (pipelines.scheduled alerts on it)."""
    from types import SimpleNamespace

    from pipelines.train import published_line
    from retrieval import cli

    model = ModelDirectory(tmp_path / "two_tower")
    for run, lineage in (("r1", "a"), ("r2", "b")):
        (model.root / run).mkdir(parents=True)
        (model.root / run / "manifest.json").write_text(json.dumps({"lineage": {"name": lineage}}))
        model.publish(run, lineage)
    job = SimpleNamespace(model_dir=model, run_id="r2", stages=SimpleNamespace(summary=lambda stage: {
        "production": False, "lineage": "b", "link": "lineages/b/latest"}))
    assert published_line(job) == (f"published: {model.root}/lineages/b/latest -> r2 only; {cli.LATEST_KEPT} r1 "
                                   f"(lineage a); serve this run with --run_dir={model.root} --lineage=b")
    job.run_id, job.stages = "r1", SimpleNamespace(summary=lambda stage: {"production": True})
    assert published_line(job) == f"published: {model.root}/latest -> r1 (serve it: --run_dir={model.root})"
