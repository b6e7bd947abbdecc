"""The evaluate and recommend entry points, run as a user would (subprocess), on a fake run directory."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.evaluation.test_evaluation_fakes import make_run

ROOT = Path(__file__).resolve().parents[2]


def _run(*args):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("cli") / "run").root


def test_evaluate_cli_writes_the_report(run_dir):
    done = _run("pipelines.evaluate", f"--run_dir={run_dir}", "--ks=2,5", "--baselines=most_popular",
                "--bootstrap=50")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "recall@5=" in done.stdout
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["protocol/ks"] == [2, 5] and metrics["protocol/baselines"] == ["most_popular"]
    assert metrics["protocol/bootstrap_resamples"] == 50 and "recall@5_ci_low" in metrics
    assert (run_dir / "report.md").exists() and (run_dir / "recall_at_k.png").exists()


def _recommend(run_dir, tmp_path, users: list, k: int):
    """``pipelines.recommend`` for ``users`` (a --users file): its output table (as a dict) and the finished process."""
    (tmp_path / "users.txt").write_text("\n".join(users) + "\n")
    out = tmp_path / "recs.parquet"
    done = _run("pipelines.recommend", f"--run_dir={run_dir}", f"--k={k}", f"--output={out}",
                f"--users={tmp_path / 'users.txt'}")
    assert done.returncode == 0, done.stderr[-2000:]
    return pq.read_table(out).to_pydict(), done


def test_recommend_cli_and_input_errors(run_dir, tmp_path):
    table, _ = _recommend(run_dir, tmp_path, ["u01", "u02"], k=3)
    assert table["user_id"] == ["u01", "u02"] and [len(x) for x in table["item_ids"]] == [3, 3]
    shards = tmp_path / "recs"
    done = _run("pipelines.recommend", f"--run_dir={run_dir}", "--k=3", f"--output={shards}", "--sharded",
                "--chunk_users=1", f"--users={tmp_path / 'users.txt'}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in shards.iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    sharded = pq.read_table(shards).to_pydict()
    assert sharded["user_id"] == table["user_id"] and sharded["item_ids"] == table["item_ids"]
    np.testing.assert_allclose(sharded["scores"], table["scores"], rtol=1e-5)  # other batch sizes, other rounding
    bad = _run("pipelines.evaluate", f"--run_dir={tmp_path / 'missing'}", "--ks=5,x")
    assert bad.returncode == 2 and "field 'ks'" in bad.stderr


def test_recommend_answers_a_user_absent_from_training_with_the_most_popular_items_and_null_scores(run_dir, tmp_path):
    """The answer HTTP and ``CandidateGenerator`` give an unknown user (it got the user tower's empty-history answer,
    issue 50), marked in the ``fallback`` column; the known users' answers are the model's."""
    from retrieval.serving.generator import most_popular

    table, done = _recommend(run_dir, tmp_path, ["u01", "nobody", "u02"], k=4)
    catalogue = pq.read_table(run_dir / "item_embeddings.parquet").column("item_id").to_pylist()
    counts = pq.read_table(run_dir / "data" / "train.parquet").to_pandas()["item_id"].value_counts()
    popular = [catalogue[i] for i in most_popular(counts.reindex(catalogue).fillna(0).to_numpy())[:4]]
    assert table["user_id"] == ["u01", "nobody", "u02"]
    assert table["item_ids"][1] == popular and table["scores"][1] is None
    assert all(len(table["scores"][row]) == 4 and table["item_ids"][row] != popular for row in (0, 2))
    assert table["fallback"] == [False, True, False]  # marked: it was only told by its null scores
    assert ("1 of 3 users had no training history: they got the 4 most popular training items (fallback, scores "
            "null)") in done.stderr  # was "(cold-start answers)"


def test_every_entry_point_takes_a_model_directory(run_dir, tmp_path):
    """recommend and evaluate resolve --run_dir like serve and export: a model directory means its published run."""
    model_dir = tmp_path / "two_tower"
    model_dir.mkdir()
    (model_dir / "r1").symlink_to(run_dir, target_is_directory=True)
    (model_dir / "latest").symlink_to("r1")
    out = tmp_path / "recs.parquet"
    done = _run("pipelines.recommend", f"--run_dir={model_dir}", "--k=3", f"--output={out}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert pq.read_table(out).num_rows > 0
    done = _run("pipelines.evaluate", f"--run_dir={model_dir}", "--ks=2,5", "--baselines=none", "--bootstrap=0",
                f"--output_dir={tmp_path / 'eval'}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "eval" / "metrics.json").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    for module, *more in (("pipelines.recommend", f"--output={out}"), ("pipelines.evaluate",),
                          ("pipelines.export", f"--base_dir={tmp_path}"), ("pipelines.serve",)):
        done = _run(module, f"--run_dir={empty}", *more)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            f"error: field 'run_dir': {empty} is not a run directory (no manifest.json) nor a model directory with "
            f"a published run ('latest')"]
