"""Stages, the quality gate, publishing, retention and locks (no TensorFlow)."""

import multiprocessing
import os

import pytest

from retrieval import artifacts
from retrieval.cli import LockedError
from retrieval.pipeline import gate
from retrieval.pipeline.publish import ModelDirectory, file_lock
from retrieval.pipeline.stages import StageRunner


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


def test_publish_switches_latest_atomically(tmp_path):
    model_dir = ModelDirectory(tmp_path)
    for run_id in ("r1", "r2"):
        (tmp_path / run_id).mkdir()
    assert model_dir.latest_run_id() is None
    model_dir.publish("r1")
    assert model_dir.latest_run_id() == "r1"
    model_dir.publish("r2")
    assert os.readlink(tmp_path / "latest") == "r2"
    assert model_dir.latest().root == tmp_path / "r2"
    with pytest.raises(FileNotFoundError):
        model_dir.publish("missing")


def test_retention_keeps_latest_and_unfinished(tmp_path):
    model_dir = ModelDirectory(tmp_path)
    for i in range(5):
        (tmp_path / f"r{i}").mkdir()
        _finish(model_dir, f"r{i}")
        os.utime(model_dir.run_paths(f"r{i}").stages / "gate.json", (1000 + i, 1000 + i))
    (tmp_path / "in_progress").mkdir()
    model_dir.publish("r0")
    removed = model_dir.retain(keep_last=2)
    assert sorted(removed) == ["r1", "r2"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "in_progress", "latest", "r0", "r3", "r4"]


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
