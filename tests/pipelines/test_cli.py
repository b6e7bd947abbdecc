"""The command line answers fast and quietly: a wrong path, a wrong column or ``--help`` exits before TensorFlow loads
(seconds, not the minute a cold TensorFlow import can take), and TensorFlow's start-up lines stay hidden unless asked
for. Each case runs the pipeline's module as ``__main__`` in a fresh interpreter and reports whether TensorFlow was
imported."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retrieval import cli, quiet

ROOT = Path(__file__).resolve().parents[2]
FAST_S = 15.0  # the bound for a wrong input path; a cold TensorFlow import alone takes longer under load
PROBE = """
import json, runpy, sys
sys.argv = {argv!r}
code = 0
try:
    runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
print(json.dumps({{"code": code, "tensorflow": "tensorflow" in sys.modules}}))
"""


def probe(module: str, *args: str, env: dict | None = None) -> tuple[dict, str, float]:
    """Runs ``python -m module args`` in a fresh interpreter: (exit code and whether TensorFlow was imported, stderr,
    seconds)."""
    code = PROBE.format(argv=[module, *args], module=module)
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, **(env or {})})
    elapsed = time.monotonic() - start
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr, elapsed


@pytest.mark.parametrize("args,message", [
    (("--config.data.train_path=/nonexistent/log.csv",), "config.data.train_path': /nonexistent/log.csv does not exist"),
    (("--config.data.item_column=item",), "config.data.item_column': data/interactions.csv has no column(s) ['item']"),
    (("--config.data.timestamp_column=tstamp",),  # else split and trained in file order, silently
     "config.data.timestamp_column': data/interactions.csv has no column(s) ['tstamp']"),
    (("--config.train.batch_size=1000000000",), "config.train.batch_size': must be an integer in [1, 1048576]"),
    (("--output_dir=/proc/retrieval",), "output_dir"),
    (("--config.eval.baselines=most_popular,rp3beta",),  # a comma list is read as one name: say how to write it
     "got ('most_popular,rp3beta',) (on the command line a tuple is written in parentheses: "
     "\"('most_popular', 'rp3beta')\")"),
    (("--config.index.factory=IVF64,Bogus",),  # else refused only after the whole training
     "config.index.factory': FAISS cannot build 'IVF64,Bogus' for vectors of dimension 128"),
])
def test_bad_input_exits_2_before_tensorflow_loads(tmp_path, args, message):
    args = (f"--output_dir={tmp_path}", "--run_id=r1", *args)
    outcome, stderr, elapsed = probe("pipelines.train", *args)
    assert outcome == {"code": cli.EXIT_INPUT_ERROR, "tensorflow": False}, stderr
    assert message in stderr and "Traceback" not in stderr
    assert elapsed < FAST_S
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("module", ["pipelines.scheduled", "pipelines.evaluate", "pipelines.serve"])
def test_every_entry_points_help_exits_0(module):
    outcome, stderr, _ = probe(module, "--help")
    assert outcome["code"] == 0, stderr


def test_help_lists_the_flags_and_exits_0_without_tensorflow():
    outcome, _, _ = probe("pipelines.train", "--help")
    assert outcome == {"code": 0, "tensorflow": False}
    result = subprocess.run([sys.executable, "-m", "pipelines.train", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0
    for flag in ("--config", "--output_dir", "--run_id", "--force"):
        assert flag in result.stdout


@pytest.mark.parametrize("module,args", [
    ("pipelines.evaluate", ("--run_dir=/nonexistent/run",)),
    ("pipelines.recommend", ("--run_dir=/nonexistent/run", "--output=/tmp/recs.parquet")),
])
def test_other_pipelines_check_their_paths_before_tensorflow(module, args):
    outcome, stderr, _ = probe(module, *args)
    assert outcome == {"code": cli.EXIT_INPUT_ERROR, "tensorflow": False}, stderr
    assert "does not exist" in stderr


def test_serve_refuses_a_wrong_run_dir_before_tensorflow(tmp_path):
    outcome, stderr, elapsed = probe("pipelines.serve", f"--run_dir={tmp_path}", "--port=0")
    assert outcome == {"code": cli.EXIT_INPUT_ERROR, "tensorflow": False}, stderr
    assert "not a run directory" in stderr and "Traceback" not in stderr
    assert elapsed < FAST_S
    help_outcome, _, _ = probe("pipelines.serve", "--help")
    assert help_outcome == {"code": 0, "tensorflow": False}


def _tensorflow_start(env: dict) -> str:
    code = "import retrieval, tensorflow as tf; tf.constant(1) + 1"
    clean = {k: v for k, v in os.environ.items() if k not in (quiet.LEVEL_ENV, quiet.QUIET_ENV)}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**clean, **env}).stderr


def test_tensorflow_starts_quietly_unless_asked():
    assert _tensorflow_start({}) == ""
    loud = _tensorflow_start({quiet.LEVEL_ENV: "0"})  # the environment's own level: nothing is filtered
    assert "oneDNN" in loud or "cuda" in loud.lower() or "cpu_feature_guard" in loud


def test_the_filter_passes_other_lines_on(capfd):
    with quiet.filtered_stderr():
        os.write(2, b"I0000 00:00:1795544421.004778    6277 port.cc:153] oneDNN custom operations are on.\n"
                    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
                    b"a warning of our own\nlast line without newline")
    assert capfd.readouterr().err == "a warning of our own\nlast line without newline"


def test_verbosity_shows_tensorflow_start_up(monkeypatch):
    monkeypatch.setenv(quiet.QUIET_ENV, "1")
    monkeypatch.setenv(quiet.LEVEL_ENV, "3")
    quiet.verbose()
    assert os.environ[quiet.QUIET_ENV] == "0" and os.environ[quiet.LEVEL_ENV] == "0"
    assert not any(isinstance(finder, quiet._QuietTensorFlowImport) for finder in sys.meta_path)


def test_faiss_loader_and_tensorflow_chatter_stay_out_of_the_log(monkeypatch):
    import logging

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    try:
        monkeypatch.setenv(quiet.QUIET_ENV, "1")
        quiet.install()
        logging.getLogger("faiss.loader").info("Could not load library with AVX512-SPR support due to: "
                                               "ModuleNotFoundError(\"No module named 'faiss.swigfaiss_avx512_spr'\")")
        logging.getLogger("absl").info("Sharding callback duration: 21 microseconds")
        logging.getLogger("tensorflow").info("Function `serve` contains input name(s) x with unsupported characters "
                                             "which will be renamed to y in the SavedModel.")
        logging.getLogger("tensorflow").info("a line of our own")
        assert [r.getMessage() for r in records] == ["a line of our own"]
        quiet.verbose()
        logging.getLogger("faiss.loader").info("Loading faiss with AVX2 support.")
        assert records[-1].getMessage() == "Loading faiss with AVX2 support."
    finally:
        logging.getLogger().removeHandler(handler)
        quiet._set_log_filters(False)


def _item_table(path: Path, rows: list[str], header: str = "item_id,genres,year") -> str:
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return str(path)


BUNDLED_ITEMS = [f"i{i},g{i % 7},{1990 + i % 30}" for i in range(2000)]  # data/interactions.csv's ids: i0 .. i1999


@pytest.mark.parametrize("rows,features,message", [
    ([f"x{i},g1,2000" for i in range(2000)], "genres:multi",  # another id scheme: 2,000 phantom items were served
     "column 'item_id': 0 of the 2,000 items of the training log have a row in the item table (0.0%), and 2,000 of "
     "its 2,000 rows are items the training log never saw: at least 10% must match"),
    (BUNDLED_ITEMS + ["i4,g2,1999"], "genres:multi", "column 'item_id', row 2000 (0-based, header excluded): duplicate id 'i4' (first seen at row 4)"),
    (BUNDLED_ITEMS[:7] + ["i7,g1,abc"] + BUNDLED_ITEMS[8:], "genres:multi,year:numeric",
     "column 'year', row 7 (0-based, header excluded): non-numeric value 'abc' in a numeric feature"),
    (BUNDLED_ITEMS, "genres:multi,title:text",
     "config.data.item_features': {table} has no column(s) ['title']; its columns are ['item_id', 'genres', 'year']"),
])
def test_a_bad_item_table_exits_2_before_tensorflow_loads_and_leaves_nothing(tmp_path, rows, features, message):
    """Bad contents of the item table were found only once TensorFlow had loaded (6-13 s) and left an empty model
    directory; an item table of another id scheme trained and published phantom items (issue 50)."""
    table = _item_table(tmp_path / "items.csv", rows)
    out = tmp_path / "out"
    outcome, stderr, elapsed = probe("pipelines.train", f"--output_dir={out}", "--run_id=r1",
                                     "--config=configs/catalogue.py", f"--config.data.item_features_path={table}",
                                     f"--config.data.item_features={features}")
    assert outcome == {"code": cli.EXIT_INPUT_ERROR, "tensorflow": False}, stderr
    assert message.format(table=table) in stderr and "Traceback" not in stderr
    assert len([line for line in stderr.splitlines() if line.startswith("error:")]) == 1
    assert elapsed < FAST_S
    assert not out.exists()


def test_data_refused_once_tensorflow_loaded_leaves_no_directory(tmp_path):
    """What only the prepared data can tell (here: no user can hold an item out) exits 2 with the run directory
    removed, and the model and output directories it created too (an empty one was left, issue 50)."""
    log = tmp_path / "single.csv"
    log.write_text("user_id,item_id,timestamp\n" + "".join(f"u{i},i{i % 5},{i}\n" for i in range(50)))
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "pipelines.train", f"--output_dir={out}", "--run_id=r1",
                             f"--config.data.train_path={log}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == cli.EXIT_INPUT_ERROR, result.stderr
    assert "the leave_last_n split leaves no test interactions" in result.stderr.splitlines()[-1]
    assert not out.exists()
