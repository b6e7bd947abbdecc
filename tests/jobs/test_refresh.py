"""The catalogue refresh's safeguards: tables of other ids, catalogue changes too large to publish unasked,
retention that keeps what a refresh embeds from, the canary's check of a refresh, and kills at every step."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from retrieval import artifacts
from retrieval.jobs.job import TrainingJob
from tests.jobs.test_pipeline_job import make_config

ROOT = Path(__file__).resolve().parents[2]
COMMAND_DEADLINE_S = 180  # one refresh command, TensorFlow included, on 2 shared cores


@pytest.fixture(scope="module")
def trained(log_path, tmp_path_factory):
    """A published catalogue run (item table of genres and titles) and its table; tests refresh copies of it."""
    directory = tmp_path_factory.mktemp("catalogue")
    items = pd.read_csv(log_path / "items.csv")
    rng = np.random.default_rng(0)
    words = np.array(["red", "blue", "tent", "boot", "lamp", "desk", "cup", "rope"])
    items["title"] = [" ".join(rng.choice(words, 2)) for _ in range(len(items))]
    items.to_csv(directory / "items.csv", index=False)
    config = make_config(log_path, **{"data.item_features_path": str(directory / "items.csv"),
                                      "data.item_features": "genres:multi,title:text", "train.epochs": 3,
                                      "model.item_tower.content_match": True, "eval.bootstrap": 20})
    TrainingJob(config, str(directory / "out"), "trained").run()
    return directory / "out" / "two_tower", items


@pytest.fixture
def model_dir(trained, tmp_path):
    """A copy of the trained model directory (its links kept), for one test to refresh."""
    copy = tmp_path / "two_tower"
    shutil.copytree(trained[0], copy, symlinks=True)
    return copy


def run_refresh(model_dir: Path, table: pd.DataFrame, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    path = tmp_path / f"items-{len(list(tmp_path.glob('items-*.csv')))}.csv"
    table.to_csv(path, index=False)
    return subprocess.run([sys.executable, "-m", "pipelines.refresh", f"--run_dir={model_dir}",
                           f"--item_features_path={path}", *flags], cwd=ROOT, capture_output=True, text=True,
                          timeout=COMMAND_DEADLINE_S)


def one_error(done: subprocess.CompletedProcess) -> str:
    errors = [line for line in done.stderr.splitlines() if line.startswith(("error:", "quality gate"))]
    assert len(errors) == 1, done.stderr[-3000:]
    return errors[0]


def runs_of(model_dir: Path) -> list[str]:
    return sorted(p.name for p in model_dir.iterdir() if p.is_dir() and not p.is_symlink() and p.name != "lineages")


def test_a_table_of_other_ids_is_refused_naming_the_counts(model_dir, trained, tmp_path):
    phantom = trained[1].assign(item_id=[f"x{k}" for k in range(len(trained[1]))])
    done = run_refresh(model_dir, phantom, tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    error = one_error(done)
    assert "0 of the 200 items of the model's training log have a row" in error and "200 of its 200 rows" in error
    assert runs_of(model_dir) == ["trained"]


def test_a_refresh_that_removes_half_the_catalogue_needs_the_flag(model_dir, trained, tmp_path):
    half = trained[1].iloc[::2]
    done = run_refresh(model_dir, half, tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "removes 100 of the 200 items of the published catalogue (50%" in one_error(done)
    assert "--allow_large_change" in one_error(done) and runs_of(model_dir) == ["trained"]
    done = run_refresh(model_dir, half, tmp_path, "--allow_large_change")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "100 items (0 new, 100 removed" in done.stdout


def test_a_refresh_that_adds_too_many_items_needs_the_flag(model_dir, trained, tmp_path):
    table = trained[1]
    grown = pd.concat([table, table.iloc[:60].assign(item_id=[f"new{k}" for k in range(60)])])
    done = run_refresh(model_dir, grown, tmp_path)
    assert done.returncode == 2 and "adds 60 items to the 200 items of the published catalogue (30%" in one_error(done)
    assert runs_of(model_dir) == ["trained"]


def test_retention_keeps_the_run_a_refresh_embeds_from(model_dir, trained):
    from retrieval.jobs.refresh import refresh

    config = artifacts.read_json(model_dir / "trained" / "config.json")
    artifacts.write_json(model_dir / "trained" / "config.json", {**config, "publish": {**config["publish"],
                                                                                       "keep_last": 1}})
    table = trained[1]
    first = refresh(model_dir, write(table.iloc[1:], model_dir.parent / "first.csv"))
    second = refresh(model_dir, write(table.iloc[2:], model_dir.parent / "second.csv"))
    assert second.refreshed_from == Path(first.run_dir).name
    for name in ("report.md", "recall_at_k.png", "checkpoints", "stages/train.json"):
        assert (model_dir / "trained" / name).exists(), name
    assert {"trained", Path(first.run_dir).name, Path(second.run_dir).name} <= set(runs_of(model_dir))
    third = refresh(model_dir, write(table.iloc[3:], model_dir.parent / "third.csv"))
    assert runs_of(model_dir) == sorted(["trained", Path(second.run_dir).name, Path(third.run_dir).name])


def write(table: pd.DataFrame, path: Path) -> str:
    table.to_csv(path, index=False)
    return str(path)
