"""Resume identity: a rerun of a run id with another configuration or other input files is refused (exit 2) unless
``force``; the same configuration resumes. Stages are stubbed: this tests the check at the start of ``run``, not
training."""

from pathlib import Path

import pytest

from configs.base import override
from configs.two_tower import get_config
from retrieval import artifacts
from retrieval.errors import InputError
from retrieval.jobs import identity
from retrieval.jobs.job import TrainingJob


@pytest.fixture
def log(tmp_path) -> Path:
    path = tmp_path / "log.csv"
    path.write_text("user_id,item_id,timestamp\nu1,i1,1\nu1,i2,2\n")
    return path


def config(log: Path, **changes):
    return override(get_config(), {"data.train_path": str(log), **changes})


def run(cfg, output_dir: Path, force: bool = False) -> TrainingJob:
    """A job whose stages are stubbed out (each returns a passing summary): only the run's start is real."""
    job = TrainingJob(cfg, str(output_dir), "r1", force=force)
    job.stages.run = lambda name, fn: {"passed": True, "reasons": []}
    job.run()
    return job


def test_the_same_configuration_resumes_and_the_fingerprint_is_recorded(log, tmp_path):
    job = run(config(log), tmp_path)
    manifest = artifacts.read_json(job.paths.manifest)
    assert manifest["fingerprint"] == identity.RunIdentity.of(config(log)).digest
    assert manifest["data_fingerprint"][str(log)] != "missing"
    run(config(log), tmp_path)


@pytest.mark.parametrize("changes,named", [
    ({"train.epochs": 3}, f"train.epochs {get_config().train.epochs} -> 3"),
    ({"model.temperature": 0.3}, "model.temperature 0.1 -> 0.3"),
])
def test_a_changed_configuration_is_refused(log, tmp_path, changes, named):
    run(config(log), tmp_path)
    with pytest.raises(InputError, match=rf"run_id.*different configuration.*{named}.*--force"):
        run(config(log, **changes), tmp_path)


def test_a_different_train_path_or_changed_contents_are_refused(log, tmp_path):
    run(config(log), tmp_path)
    other = tmp_path / "other.csv"
    other.write_text(log.read_text())
    with pytest.raises(InputError, match="data.train_path"):
        run(config(other), tmp_path)
    log.write_text(log.read_text() + "u2,i1,3\n")
    with pytest.raises(InputError, match=f"contents of {log}"):
        run(config(log), tmp_path)


def test_force_redoes_the_run_from_scratch(log, tmp_path):
    job = run(config(log), tmp_path)
    for directory in (job.paths.stages, job.paths.checkpoints):
        directory.mkdir(exist_ok=True)
        (directory / "old").write_text("from the first configuration")
    job = run(config(log, **{"train.epochs": 3}), tmp_path, force=True)
    assert not (job.paths.stages / "old").exists() and not (job.paths.checkpoints / "old").exists()
    assert artifacts.read_json(job.paths.config)["train"]["epochs"] == 3
    run(config(log, **{"train.epochs": 3}), tmp_path)  # the forced run is now the recorded one


def test_a_run_recorded_without_a_fingerprint_is_compared_key_by_key(log, tmp_path):
    job = run(config(log), tmp_path)
    manifest = artifacts.read_json(job.paths.manifest)
    del manifest["fingerprint"]
    artifacts.write_json(job.paths.manifest, manifest)
    assert identity.changes(job.paths, identity.RunIdentity.of(config(log))) == []
    # the model's and the trainer's seeds reference the top-level one
    assert identity.changes(job.paths, identity.RunIdentity.of(config(log, seed=7))) == [
        "model.seed 42 -> 7", "seed 42 -> 7", "train.seed 42 -> 7"]
