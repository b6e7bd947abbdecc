"""What a newcomer hits with pipelines.train on data that cannot work: one line, exit 2, before any training, and no
half-made run directory left behind."""

import subprocess
import sys
from pathlib import Path

import pytest

from retrieval import cli

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 300  # a cold TensorFlow import and the prepare stage on a loaded 2-core box


def _train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.train", "--config=configs/two_tower.py",
                           f"--output_dir={tmp_path / 'models'}", "--run_id=r1", *overrides], cwd=ROOT,
                          capture_output=True, text=True, timeout=DEADLINE_S)


@pytest.mark.parametrize("case", ["single_user", "test_equals_train"])
def test_nothing_to_evaluate_is_said_before_training(tmp_path, case):
    log = tmp_path / "log.csv"
    users = 1 if case == "single_user" else 40
    log.write_text("user_id,item_id,timestamp\n" + "".join(f"u{u},i{(u + i) % 30},{i}\n" for u in range(users)
                                                             for i in range(25)))
    overrides = [f"--config.data.train_path={log}"]
    if case == "test_equals_train":
        overrides += ["--config.data.split=files", f"--config.data.test_path={log}"]
    result = _train(tmp_path, *overrides)
    assert result.returncode == cli.EXIT_INPUT_ERROR, result.stderr[-3000:]
    key = "config.data.test_path" if case == "test_equals_train" else "config.data.split"
    errors = [line for line in result.stderr.splitlines() if "nothing can be evaluated" in line]
    assert len(errors) == 1 and errors[0].startswith(f"error: field '{key}': nothing can be evaluated: none of the")
    assert result.stderr.strip().splitlines()[-1] == errors[0]
    assert "stage train" not in result.stderr  # refused before training
    assert "run directory:" not in result.stdout
    assert not (tmp_path / "models" / "two_tower" / "r1").exists()


def test_item2vec_ids_with_whitespace_are_refused_before_training_by_their_row_in_the_file(tmp_path):
    log = tmp_path / "log.csv"
    rows = [f"u{u},i{(u + i) % 30},{i}" for u in range(40) for i in range(25)]
    rows[123] = rows[123].split(",")[0] + ",shoe 42," + rows[123].split(",")[2]
    log.write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    result = subprocess.run([sys.executable, "-m", "pipelines.train", "--config=configs/item2vec.py",
                             f"--output_dir={tmp_path / 'models'}", "--run_id=r1", f"--config.data.train_path={log}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S)
    assert result.returncode == cli.EXIT_INPUT_ERROR, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: file {log}, column 'item_id', row 123 (0-based, header excluded): item id 'shoe 42' is empty or contains whitespace, which the "
        "word2vec files of an Item2Vec run cannot hold; clean the ids or train configs/two_tower.py")
    assert "stage train" not in result.stderr


def test_a_bad_timestamp_names_its_row_once_and_leaves_no_run_behind(tmp_path):
    log = tmp_path / "log.csv"
    rows = [f"u{u},i{(u + i) % 30},{1000 + i}" for u in range(40) for i in range(25)]
    rows[57] = "u2,i7,yesterday"
    log.write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    result = _train(tmp_path, f"--config.data.train_path={log}")
    assert result.returncode == cli.EXIT_INPUT_ERROR, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "yesterday" in line]
    assert len(errors) == 1 and errors[0].startswith(f"error: file {log}, column 'timestamp', row 57")
    assert "run directory:" not in result.stdout
    assert not (tmp_path / "models" / "two_tower" / "r1").exists()
