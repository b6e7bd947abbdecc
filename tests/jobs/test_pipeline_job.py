"""The training job end to end on tiny synthetic data: publish, resume after kill -9, gate, concurrency, warm start.

Runs in-process where possible (one TensorFlow import); the crash and concurrency tests start real processes of
``python -m pipelines.train``.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from retrieval import artifacts
from retrieval.data.vocab import Vocabulary
from retrieval.errors import EXIT_GATE_REFUSED, GateError, InputError
from retrieval.jobs import config_checks
from retrieval.jobs.job import TrainingJob
from retrieval.jobs.publish import ModelDirectory

ROOT = Path(__file__).resolve().parents[2]


def tiny_overrides(log_dir: Path) -> dict:
    """Small, fast settings (flat keys as on the command line)."""
    return {
        "data.train_path": str(log_dir / "interactions.csv"),
        "model.embedding_dim": 16, "model.item_tower.id_embedding_dim": 16, "model.user_tower.hidden_units": (32,),
        "model.user_tower.share_item_embeddings": True, "model.max_history": 10, "model.temperature": 0.1,
        "train.batch_size": 256, "train.warmup_steps": 5,
        "train.learning_rate": 0.01, "train.log_every_steps": 50, "train.epochs": 20,
        "eval.ks": (10, 20), "eval.bootstrap": 0, "eval.baselines": ("most_popular",), "index.recall_k": 20,
        "gate.floors": "recall@20=0.0", "train.validation_fraction": 0.0,  # the holdout: test_pipeline_tuning.py
        "train.variants": (),  # tuned beside the configured towers: test_pipeline_tuning.py
    }


def make_config(log_dir: Path, **extra):
    from configs.base import override
    from configs.two_tower import get_config

    return override(get_config(), {**tiny_overrides(log_dir), **extra})


def cli_args(log_dir: Path, output_dir: Path, run_id: str, **extra) -> list:
    def render(value):
        return repr(value) if isinstance(value, tuple) else str(value)

    settings = {**tiny_overrides(log_dir), **extra}
    return [sys.executable, "-m", "pipelines.train", "--config=configs/two_tower.py", f"--output_dir={output_dir}",
            f"--run_id={run_id}"] + [f"--config.{key}={render(value)}" for key, value in settings.items()]


def test_run_publishes_every_artifact(log_path, tmp_path):
    # Static log-Q: on 200 items the margin over popularity is widest (the estimator is exercised by the other tests).
    job = TrainingJob(make_config(log_path, **{"model.objective.log_q": "static"}), str(tmp_path), "r1")
    outcome = job.run()
    paths = job.paths
    for artifact in (paths.config, paths.manifest, paths.item_vocab, paths.user_vocab, paths.train_data,
                     paths.test_data, paths.user_tower / "saved_model.pb", paths.item_embeddings,
                     paths.index / "index.faiss", paths.metrics, paths.report, paths.plot):
        assert artifact.exists(), artifact
    manifest = artifacts.read_json(paths.manifest)
    assert manifest["status"] == "published" and manifest["model_type"] == "two_tower"
    assert manifest["max_history"] == 10  # sequences infer from what they trained on (not model.inference_history)
    assert manifest["inference_part_size"] == 0  # and pool it whole
    assert set(manifest["stage_seconds"]) >= {"prepare", "train", "export", "evaluate", "index", "gate", "publish"}
    assert manifest["packages"]["tensorflow"].startswith("2.21")
    assert list(manifest["data_fingerprint"].values())[0]
    assert os.readlink(tmp_path / "two_tower" / "latest") == "r1"
    assert outcome.metrics["recall@20"] > artifacts.read_json(paths.metrics)["baseline/most_popular/recall@20"]

    # A completed run is not redone: every stage is skipped.
    again = TrainingJob(make_config(log_path, **{"model.objective.log_q": "static"}), str(tmp_path), "r1")
    before = {p.name: p.stat().st_mtime_ns for p in paths.stages.iterdir()}
    again.run()
    assert {p.name: p.stat().st_mtime_ns for p in paths.stages.iterdir()} == before

    # The gate blocks a model that regressed against the published one, and leaves latest alone.
    broken = make_config(log_path, **{"train.learning_rate": 0.0, "train.epochs": 1, "gate.max_regression": 0.05})
    with pytest.raises(GateError, match="regressed"):
        TrainingJob(broken, str(tmp_path), "r2").run()
    assert os.readlink(tmp_path / "two_tower" / "latest") == "r1"
    assert artifacts.read_json(ModelDirectory(tmp_path / "two_tower").run_paths("r2").manifest)["status"] == \
        "rejected"

    # Warm start: ids known to the published run keep their trained embeddings at initialisation. Copied without
    # training (a fresh user tower), it is no better than most-popular: the lift check is off for this mechanics test.
    warm = make_config(log_path, **{"publish.warm_start": True, "train.epochs": 1, "train.learning_rate": 0.0,
                                    "gate.max_regression": 1.0, "gate.min_lift_over_popular": -1.0})
    TrainingJob(warm, str(tmp_path), "r3").run()
    with np.load(paths.root / "id_tables.npz") as old, \
            np.load(tmp_path / "two_tower" / "r3" / "id_tables.npz") as new:
        old_vocab = Vocabulary.load(paths.item_vocab)
        new_vocab = Vocabulary.load(tmp_path / "two_tower" / "r3" / "vocab" / "items.parquet")
        assert list(new_vocab.ids) == list(old_vocab.ids)  # same data: the vocabulary is stable
        np.testing.assert_allclose(new["item"][2:], old["item"][2:], atol=1e-6)


def test_an_untrained_model_is_not_published(log_path, tmp_path):
    # Learning rate 0: the model keeps its random initialisation; the absolute floor (0.0) alone would publish it.
    untrained = make_config(log_path, **{"train.learning_rate": 0.0, "train.epochs": 1})
    with pytest.raises(GateError, match="not 5% above the most-popular baseline"):
        TrainingJob(untrained, str(tmp_path), "untrained").run()
    assert not (tmp_path / "two_tower" / "latest").exists()


def test_bad_config_is_an_input_error(log_path, tmp_path):
    with pytest.raises(InputError, match="data.split"):
        TrainingJob(make_config(log_path, **{"data.split": "sideways"}), str(tmp_path))
    with pytest.raises(InputError, match="not found|No such file|does not exist"):
        TrainingJob(make_config(log_path, **{"data.train_path": str(tmp_path / "missing.csv")}), str(tmp_path),
                    "x").run()


def test_tables_larger_than_the_machine_are_refused_before_a_model_is_built(log_path, tmp_path, monkeypatch):
    job = TrainingJob(make_config(log_path), str(tmp_path), "big")
    monkeypatch.setattr(config_checks, "physical_memory_bytes", lambda: 16 << 10)  # 16 KiB: less than 200 x 16 x 3 floats
    with pytest.raises(InputError, match=r"config\.model\.embedding_dim.*embedding tables of \d+ items"):
        job.run()
    assert not list((tmp_path / "two_tower" / "big" / "checkpoints").glob("ckpt-*"))


def test_cli_reports_bad_input_in_one_line(log_path, tmp_path):
    result = subprocess.run(cli_args(log_path, tmp_path, "bad", **{"data.user_column": "customer"}), cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "customer" in result.stderr and "Traceback" not in result.stderr


def registered_checkpoints(directory: Path) -> list:
    """Checkpoints TensorFlow has registered in ``directory``'s ``checkpoint`` state file (written by
    ``CheckpointManager.save`` after the checkpoint's files are complete) whose index file is there: the ones a
    resume can use. A ``ckpt-N.index`` file alone may belong to a save still in progress."""
    state = directory / "checkpoint"
    if not state.exists():
        return []
    names = re.findall(r'all_model_checkpoint_paths: "([^"]+)"', state.read_text())
    return [name for name in names if (directory / f"{Path(name).name}.index").exists()]


def _wait_for_checkpoint(directory: Path, process: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if registered_checkpoints(directory):
            return
        time.sleep(0.2)
    raise AssertionError(f"no registered checkpoint appeared in {directory} (exit {process.poll()})")


def test_kill_during_training_then_rerun_publishes_once(log_path, tmp_path):
    args = cli_args(log_path, tmp_path, "crash", **{"train.epochs": 40, "train.checkpoint_every_steps": 20})
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_checkpoint(tmp_path / "two_tower" / "crash" / "checkpoints", process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    run_dir = tmp_path / "two_tower" / "crash"
    assert not (run_dir / "stages" / "train.json").exists()
    resumed = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    assert os.readlink(tmp_path / "two_tower" / "latest") == "crash"
    assert resumed.stdout.strip().splitlines()[-1] == (f"published: {tmp_path / 'two_tower' / 'latest'} -> crash "
                                                       f"(serve it: --run_dir={tmp_path / 'two_tower'})")
    table = [line for line in resumed.stdout.splitlines() if line.startswith("|")]
    assert table and max(map(len, table)) <= 120
    assert artifacts.read_json(run_dir / "stages" / "publish.json")["summary"]["latest"] == "crash"


def test_concurrent_runs_leave_latest_consistent(log_path, tmp_path):
    # Concurrency, not quality, is tested: one epoch, and the gate compares nothing but the absolute floor.
    quick = {"train.epochs": 1, "gate.max_regression": 1.0, "gate.min_lift_over_popular": -1.0}
    runs = [subprocess.Popen(cli_args(log_path, tmp_path, run_id, **quick), cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for run_id in ("a", "b")]
    codes = [process.wait(600) for process in runs]
    assert codes == [0, 0], [process.stderr.read()[-2000:] for process in runs]
    latest = os.readlink(tmp_path / "two_tower" / "latest")
    assert latest in ("a", "b")
    assert artifacts.read_json(tmp_path / "two_tower" / latest / "manifest.json")["status"] == "published"
    # Same run id twice at once: the second is refused (exit 4) instead of writing the same directory.
    first = subprocess.Popen(cli_args(log_path, tmp_path, "same"), cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "two_tower" / "same" / "config.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        second = subprocess.run(cli_args(log_path, tmp_path, "same"), cwd=ROOT, capture_output=True, text=True,
                                timeout=300)
        assert second.returncode == 4, second.stderr[-2000:]
    finally:
        first.wait(600)
    assert first.returncode == 0


def test_gate_refusal_exit_code(log_path, tmp_path):
    low = cli_args(log_path, tmp_path, "low", **{"gate.floors": "recall@20=0.99", "train.epochs": 1})
    result = subprocess.run(low, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == EXIT_GATE_REFUSED, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if "below floor" in line]
    assert len(errors) == 1 and errors[0].startswith("quality gate refused to publish: recall@20=")  # said once
    assert "| system | recall@20 | NDCG@20 |" in result.stdout  # what was refused is shown
    assert re.search(r"gate refused:\n  \[FAIL\] recall@20 0\.\d{4} vs floor 0\.9900\n", result.stdout)
    assert max(len(line) for line in result.stdout.splitlines() if line.startswith("|")) <= 120
    assert not (tmp_path / "two_tower" / "latest").exists()
