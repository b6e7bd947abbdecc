"""pipelines.scheduled: exit codes map to outcomes and alerts, flags pass through, the wrapper exits with the job's
code; the cron line, the systemd service and the Airflow task of docs/scheduling.md and deploy/ work as written (run
with their example paths replaced: a missing input file exits 2 and fires the alert)."""

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines import scheduled
from retrieval import cli

ROOT = Path(__file__).resolve().parents[2]
FAKE_JOB = """
import os, sys
print(f"args: {sys.argv[1:]}", flush=True)
print("run directory: /srv/models/two_tower/r1", flush=True)
print("quality gate refused to publish: recall@20 0.01 < floor 0.05", file=sys.stderr, flush=True)
code = int(os.environ["FAKE_JOB_EXIT"])
if code < 0:
    os.kill(os.getpid(), -code)
sys.exit(code)
"""
ALERT = 'env | grep -E "^RETRIEVAL_(EXIT_CODE|OUTCOME|RUN_DIR|MESSAGE)=" | sort > "$ALERT_FILE"'


def run_scheduled(tmp_path: Path, exit_code: int, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    (tmp_path / "fake_job.py").write_text(FAKE_JOB)
    alert_file = tmp_path / "alert.txt"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "FAKE_JOB_EXIT": str(exit_code),
           "ALERT_FILE": str(alert_file)}
    result = subprocess.run([sys.executable, "-m", "pipelines.scheduled", "--job_module=fake_job",
                             f"--alert_command={ALERT}", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    alert = dict(line.split("=", 1) for line in alert_file.read_text().splitlines()) if alert_file.exists() else {}
    return result, alert


def test_a_gate_refusal_exits_3_and_fires_the_alert(tmp_path):
    result, alert = run_scheduled(tmp_path, cli.EXIT_GATE_REFUSED, "--config=configs/two_tower.py",
                                  "--config.train.epochs=1", "--force", "--verbosity=1")
    assert result.returncode == cli.EXIT_GATE_REFUSED
    assert alert == {"RETRIEVAL_EXIT_CODE": "3", "RETRIEVAL_OUTCOME": "gate_refused",
                     "RETRIEVAL_RUN_DIR": "/srv/models/two_tower/r1",
                     "RETRIEVAL_MESSAGE": "quality gate refused to publish: recall@20 0.01 < floor 0.05"}
    # the job got every flag that is not the wrapper's, and its output passed through
    assert ("args: ['--config=configs/two_tower.py', '--config.train.epochs=1', '--force', '--verbosity=1']"
            in result.stdout)
    assert "quality gate refused" in result.stderr


@pytest.mark.parametrize("code,outcome", [(1, "failure"), (4, "locked"), (-9, "failure")])
def test_other_failures_alert_with_their_outcome(tmp_path, code, outcome):
    result, alert = run_scheduled(tmp_path, code)
    expected = 128 + 9 if code == -9 else code
    assert result.returncode == expected
    assert alert["RETRIEVAL_EXIT_CODE"] == str(expected) and alert["RETRIEVAL_OUTCOME"] == outcome


def test_a_published_run_raises_no_alert_unless_asked(tmp_path):
    result, alert = run_scheduled(tmp_path, 0)
    assert result.returncode == 0 and alert == {}
    result, alert = run_scheduled(tmp_path, 0, "--alert_on=published")
    assert result.returncode == 0 and alert["RETRIEVAL_OUTCOME"] == "published"


def test_a_failing_alert_command_keeps_the_jobs_exit_code(tmp_path):
    (tmp_path / "fake_job.py").write_text(FAKE_JOB)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "FAKE_JOB_EXIT": "3"}
    result = subprocess.run([sys.executable, "-m", "pipelines.scheduled", "--job_module=fake_job",
                             "--alert_command=exit 7"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 3 and "alert command exited 7" in result.stderr


def test_outcomes():
    assert [scheduled.outcome_of(c) for c in (0, 1, 2, 3, 4, 137)] == [
        "published", "failure", "bad_input", "gate_refused", "locked", "failure"]


def test_bad_input_of_the_real_job_exits_2_and_fires_the_alert(tmp_path):
    alert_file = tmp_path / "alert.txt"
    result = subprocess.run([sys.executable, "-m", "pipelines.scheduled", f"--alert_command={ALERT}",
                             "--config.data.train_path=/nonexistent/log.csv", f"--output_dir={tmp_path / 'models'}"],
                            cwd=ROOT, env={**os.environ, "ALERT_FILE": str(alert_file)}, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == cli.EXIT_INPUT_ERROR
    alert = dict(line.split("=", 1) for line in alert_file.read_text().splitlines())
    assert alert["RETRIEVAL_OUTCOME"] == "bad_input" and alert["RETRIEVAL_RUN_DIR"] == ""
    assert alert["RETRIEVAL_MESSAGE"] == "error: field 'config.data.train_path': /nonexistent/log.csv does not exist"


# --- the documented schedules, as written -------------------------------------------------------------------------


def _as_here(command: str, tmp_path: Path) -> str:
    """The documented command with its example paths pointing here: the checkout, a missing log, a temporary
    model directory and log file."""
    for example, here in (("/opt/retrieval", str(ROOT)), ("/data/clicks/latest.parquet", str(tmp_path / "none.parquet")),
                          ("/srv/models", str(tmp_path / "models")),
                          ("/var/log/retrieval-train.log", str(tmp_path / "train.log"))):
        command = command.replace(example, here)
    return command


def _runs_and_alerts(command: str, tmp_path: Path, log: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("the documented commands use the checkout's .venv (make setup)")
    result = subprocess.run(["/bin/sh", "-c", _as_here(command, tmp_path)], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    output = log.read_text() if log.exists() else result.stderr
    assert result.returncode == cli.EXIT_INPUT_ERROR, output
    assert "none.parquet does not exist" in output
    assert "ALERT retrieval training bad_input (exit 2): error: field 'config.data.train_path'" in output


def _fenced(language: str, page: str = "scheduling.md") -> list[str]:
    text = (ROOT / "docs" / page).read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


ALL_CRON_LINES = [(page.name, line) for page in sorted((ROOT / "docs").glob("*.md"))
                  for block in _fenced("cron", page.name) for line in block.splitlines()
                  if line.strip() and not line.startswith("#")]
CRON_LINES = [(page, line) for page, line in ALL_CRON_LINES if "pipelines.refresh" not in line]
REFRESH_LINES = [(page, line) for page, line in ALL_CRON_LINES if "pipelines.refresh" in line]


@pytest.mark.parametrize("page,line", CRON_LINES)
def test_every_documented_crontab_line_works_as_written(tmp_path, page, line):
    assert "%" not in line and not line.rstrip().endswith("\\")  # cron: % is a newline, no line continuation
    fields = line.split(None, 5)
    assert all(re.fullmatch(r"[\d*/,-]+", field) for field in fields[:5]), fields[:5]
    assert ">> /var/log/retrieval-train.log 2>&1" in fields[5]
    _runs_and_alerts(fields[5], tmp_path, tmp_path / "train.log")


def test_scheduling_md_has_its_crontab_lines():
    assert [page for page, _ in CRON_LINES].count("scheduling.md") == 1
    assert [page for page, _ in REFRESH_LINES] == ["scheduling.md"]


@pytest.mark.parametrize("page,line", REFRESH_LINES)
def test_the_documented_refresh_line_works_as_written(tmp_path, page, line):
    """The hourly refresh: with no published run yet, exit 2 and the alert naming the model directory."""
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("the documented commands use the checkout's .venv (make setup)")
    fields = line.split(None, 5)
    assert all(re.fullmatch(r"[\d*/,-]+", field) for field in fields[:5]), fields[:5]
    command = _as_here(fields[5], tmp_path).replace("/var/log/retrieval-refresh.log", str(tmp_path / "refresh.log"))
    command = command.replace("/data/catalogue/items.parquet", str(tmp_path / "items.parquet"))
    result = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    output = (tmp_path / "refresh.log").read_text()
    assert result.returncode == cli.EXIT_INPUT_ERROR, output
    assert "ALERT retrieval training bad_input (exit 2): error: file " in output
    assert "models/youtube_dnn: not a run directory" in output


def test_the_systemd_units_work_as_written(tmp_path):
    service = (ROOT / "deploy" / "retrieval-train.service").read_text()
    assert service.split("[Unit]", 1)[1] in _fenced("ini")[0]  # the page shows the shipped unit
    settings = dict(line.split("=", 1) for line in service.splitlines() if "=" in line and not line.startswith("#"))
    assert settings["Type"] == "oneshot"
    assert "$" not in settings["ExecStart"]  # systemd would expand it
    _runs_and_alerts(f"cd {settings['WorkingDirectory']} && {settings['ExecStart']}", tmp_path, tmp_path / "x.log")
    timer = (ROOT / "deploy" / "retrieval-train.timer").read_text()
    assert "OnCalendar=*-*-* 03:15:00" in timer and "WantedBy=timers.target" in timer
    if shutil.which("systemd-analyze") is None:
        return
    for name, text in (("retrieval-train.service", _as_here(service, tmp_path).replace("User=retrieval", "")),
                       ("retrieval-train.timer", timer)):
        (tmp_path / name).write_text(text)
    verify = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "retrieval-train.timer"),
                             str(tmp_path / "retrieval-train.service")], capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr


def test_the_airflow_task_works_as_written(tmp_path):
    source = (ROOT / "deploy" / "airflow_retrieval_train.py").read_text()
    assert textwrap.dedent(source.split('"""', 2)[2]).strip() in _fenced("python")[0].strip()
    call = next(node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                and getattr(node.func, "id", "") == "BashOperator")
    command = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "bash_command"))
    assert not command.endswith(".sh")  # Airflow would read it as a template file
    assert shlex.split(command)[:2] == ["cd", "/opt/retrieval"]
    _runs_and_alerts(command, tmp_path, tmp_path / "x.log")
