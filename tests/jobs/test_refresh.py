"""The catalogue refresh's safeguards: tables of other ids, catalogue changes too large to publish unasked,
retention that keeps what a refresh embeds from, the canary's check of a refresh, and kills at every step."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from retrieval import artifacts
from retrieval.errors import GateError
from retrieval.jobs.job import TrainingJob
from retrieval.jobs.publish import ModelDirectory
from tests.jobs.conftest import random_titles
from tests.jobs.test_pipeline_job import make_config

ROOT = Path(__file__).resolve().parents[2]
COMMAND_DEADLINE_S = 180  # one refresh command, TensorFlow included, on 2 shared cores


@pytest.fixture(scope="module")
def trained(log_path, tmp_path_factory):
    """A published catalogue run (item table of genres and titles) and its table; tests refresh copies of it."""
    directory = tmp_path_factory.mktemp("catalogue")
    items = pd.read_csv(log_path / "items.csv")
    items["title"] = random_titles(np.random.default_rng(0), len(items))
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


def grown_by(table: pd.DataFrame, count: int, prefix: str = "new") -> pd.DataFrame:
    return pd.concat([table, table.iloc[:count].assign(item_id=[f"{prefix}{k}" for k in range(count)])])


def open_manifests(model_dir: Path) -> list[str]:
    return [run for run in runs_of(model_dir)
            if artifacts.read_json(model_dir / run / "manifest.json")["status"] == "running"]


@pytest.mark.parametrize("point", ["embedded", "gate", "lineage_link", "latest_link"])
def test_a_refresh_killed_at_any_point_is_resumed_or_completed(model_dir, trained, tmp_path, point):
    table = grown_by(trained[1], 5)
    table.to_csv(tmp_path / "items.csv", index=False)
    command = [sys.executable, "-m", "tests.jobs.refresh_kill", f"--run_dir={model_dir}",
               f"--item_features_path={tmp_path / 'items.csv'}"]
    killed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=COMMAND_DEADLINE_S,
                            env={**os.environ, "REFRESH_KILL_POINT": point})
    assert killed.returncode == -9, killed.stderr[-3000:]
    (started,) = set(runs_of(model_dir)) - {"trained"}
    directory = ModelDirectory(model_dir)
    if point == "lineage_link":  # the state that wedged every later refresh
        assert directory.latest_run_id() == "trained"
        assert directory.latest_run_id(directory.lineage_of_run("trained")) == started
    done = subprocess.run(command[:2] + ["pipelines.refresh"] + command[3:], cwd=ROOT, capture_output=True,
                          text=True, timeout=COMMAND_DEADLINE_S)
    assert done.returncode == 0, done.stderr[-3000:]
    lineage = directory.lineage_of_run("trained")
    assert directory.latest_run_id() == directory.latest_run_id(lineage) and not open_manifests(model_dir)
    assert artifacts.read_json(model_dir / "latest" / "manifest.json")["status"] == "published"
    gate = artifacts.read_json(model_dir / started / "stages" / "gate.json")
    assert gate["summary"]["passed"] and "peak_rss_mb" in gate  # written by the gate stage, not forged
    if point in ("embedded", "gate"):  # resumed: the same run, published
        assert "(resumed)" in done.stdout and directory.latest_run_id() == started
        assert runs_of(model_dir) == sorted(["trained", started])
    else:  # completed first (both links, manifest); the same table then has nothing left to publish
        assert artifacts.read_json(model_dir / started / "manifest.json")["status"] == "published"
        assert directory.latest_run_id() == started and runs_of(model_dir) == sorted(["trained", started])
        assert "nothing to refresh: " in done.stdout


def test_a_killed_refresh_of_another_table_is_removed(model_dir, trained, tmp_path):
    grown_by(trained[1], 5).to_csv(tmp_path / "first.csv", index=False)
    killed = subprocess.run([sys.executable, "-m", "tests.jobs.refresh_kill", f"--run_dir={model_dir}",
                             f"--item_features_path={tmp_path / 'first.csv'}"], cwd=ROOT, capture_output=True,
                            text=True, timeout=COMMAND_DEADLINE_S, env={**os.environ, "REFRESH_KILL_POINT": "embedded"})
    assert killed.returncode == -9, killed.stderr[-3000:]
    (abandoned,) = set(runs_of(model_dir)) - {"trained"}
    done = run_refresh(model_dir, grown_by(trained[1], 3, prefix="other"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert abandoned not in runs_of(model_dir) and len(runs_of(model_dir)) == 2


def test_a_refused_refresh_keeps_only_its_record(model_dir, trained, monkeypatch):
    from retrieval.jobs.refresh import refresh
    from retrieval.serving import canary

    def refuse(self, generator):
        raise canary.CanaryError("the user tower returns non-finite vectors for 3 of 300 sample users")

    monkeypatch.setattr(canary.Canary, "__call__", refuse)
    with pytest.raises(GateError, match="the serving canary refused the refreshed run: the user tower returns non-"):
        refresh(model_dir, write(grown_by(trained[1], 5), model_dir.parent / "items.csv"))
    (refused,) = set(runs_of(model_dir)) - {"trained"}
    assert sorted(path.name for path in (model_dir / refused).iterdir()) == [".lock", "manifest.json", "stages"]
    manifest = artifacts.read_json(model_dir / refused / "manifest.json")
    assert manifest["status"] == "rejected" and not manifest["gate"]["passed"]
    assert manifest["gate"]["checked"][1] == ("[FAIL] canary: the serving canary refused the refreshed run: the user "
                                              "tower returns non-finite vectors for 3 of 300 sample users")
    directory = ModelDirectory(model_dir)
    assert directory.latest_run_id() == "trained" and refused in directory.finished_runs()  # retention may remove it


def test_a_catalogue_too_small_for_the_canary_says_so(model_dir, trained, tmp_path):
    """...and the gate's lines are marked as the training gate's are (``gate.mark``: they were not)."""
    done = run_refresh(model_dir, trained[1].iloc[:20], tmp_path, "--allow_large_change")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    checked = lines[lines.index("gate passed:") + 1:][:3]
    assert checked[0].startswith("  [pass] index self-check recall@") and " vs floor " in checked[0]
    assert checked[1] == ("  [skip] canary passed; its quality check skipped: 20 catalogue items are too few for a "
                          "recall@20 check: random answers would find about 100% of the held-out items (at least 80 "
                          "items needed)")
    assert checked[2].startswith("  [pass] lineage ") and checked[2].endswith(" still publishes trained")


def test_the_dump_training_read_refreshes_its_run(model_dir, trained, tmp_path):
    """The daily dump with a column training was not told about (a url): training read it, so refresh does."""
    table = trained[1]
    dump = table.assign(url=[f"https://shop.example/{item}" for item in table["item_id"]])
    done = run_refresh(model_dir, grown_by(dump, 4), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{len(table) + 4} items (4 new, 0 removed" in done.stdout


def test_a_refresh_of_an_unchanged_table_publishes_nothing(model_dir, trained, tmp_path):
    """An hourly refresh of the same dump made a new run and a server reload every hour, changing nothing."""
    table = grown_by(trained[1], 4)
    assert run_refresh(model_dir, table, tmp_path).returncode == 0
    runs = runs_of(model_dir)
    latest = (model_dir / "latest").resolve()
    again = run_refresh(model_dir, table, tmp_path)  # another file, the same contents
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip().startswith("nothing to refresh: ") and "(no new run)" in again.stdout
    assert runs_of(model_dir) == runs and (model_dir / "latest").resolve() == latest
