"""pipelines.scheduled: exit codes map to outcomes and alerts, flags pass through, the wrapper exits with the job's
code; the cron line, the systemd service and the Airflow task of docs/scheduling.md and deploy/ work as written (run
with their example paths replaced: a missing input file exits 2 and fires the alert)."""

import ast
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
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
    assert "ALERT retrieval training bad_input (exit 2): error: field 'run_dir': " in output
    assert "models/youtube_dnn does not exist" in output


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


# --- the fault harness: each case ends within its deadline ----------------------------------------------------------

DEADLINE_S = 120  # generous for a loaded 2-core box; a hang would run forever
HANGING_JOB = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["PIDS_FILE"], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
print("run directory: /srv/models/two_tower/r1", flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone for our purpose
        return stat.read().split(")")[-1].split()[0] != "Z"


def _wait_for(predicate, timeout_s: float = DEADLINE_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `wrapper &` in a script gives the wrapper


def _start_hanging(tmp_path: Path, *args: str, sigint_ignored: bool = False) -> tuple[subprocess.Popen, Path, Path]:
    (tmp_path / "fake_job.py").write_text(HANGING_JOB)
    pids, alert_file = tmp_path / "pids.txt", tmp_path / "alert.txt"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "PIDS_FILE": str(pids),
           "ALERT_FILE": str(alert_file)}
    wrapper = subprocess.Popen([sys.executable, "-m", "pipelines.scheduled", "--job_module=fake_job",
                                f"--alert_command={ALERT}", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, preexec_fn=_ignore_sigint if sigint_ignored else None)
    assert _wait_for(lambda: pids.exists() and pids.read_text().strip()), "the job never started"
    return wrapper, pids, alert_file


@pytest.mark.parametrize("sig,sigint_ignored", [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True)])
def test_a_signal_to_the_wrapper_stops_the_job_and_its_children_and_alerts(tmp_path, sig, sigint_ignored):
    """Also when the wrapper started with SIGINT ignored (in the background of a script): the job still acts on it."""
    wrapper, pids, alert_file = _start_hanging(tmp_path, sigint_ignored=sigint_ignored)
    try:
        wrapper.send_signal(sig)
        assert wrapper.wait(timeout=DEADLINE_S) == 128 + sig
    finally:
        wrapper.kill()
    job, child = map(int, pids.read_text().split())
    assert _wait_for(lambda: not _alive(job) and not _alive(child), 10), "the job or its child outlived the wrapper"
    alert = dict(line.split("=", 1) for line in alert_file.read_text().splitlines())
    assert alert["RETRIEVAL_OUTCOME"] == "failure" and alert["RETRIEVAL_RUN_DIR"] == "/srv/models/two_tower/r1"
    assert alert["RETRIEVAL_MESSAGE"].startswith(f"pipelines.scheduled got {sig.name} and stopped the job")


def test_a_killed_wrapper_takes_its_job_with_it(tmp_path):
    wrapper, pids, _ = _start_hanging(tmp_path)
    wrapper.kill()  # SIGKILL: no handler of the wrapper runs
    wrapper.wait(timeout=DEADLINE_S)
    job, _ = map(int, pids.read_text().split())
    assert _wait_for(lambda: not _alive(job), 30), "the job outlived a kill -9 of its wrapper"


def test_a_hung_alert_command_is_stopped_with_its_children(tmp_path):
    (tmp_path / "fake_job.py").write_text(FAKE_JOB)
    pid_file = tmp_path / "alert_child.txt"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "FAKE_JOB_EXIT": "3"}
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pipelines.scheduled", "--job_module=fake_job",
                             f"--alert_command=sleep 600 & echo $! > {pid_file}; wait", "--alert_timeout_s=1"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=DEADLINE_S)
    assert result.returncode == 3 and "alert command ran past 1 s and was stopped" in result.stderr
    assert time.monotonic() - start < DEADLINE_S
    assert _wait_for(lambda: not _alive(int(pid_file.read_text())), 10), "the alert's child kept running"



def _scheduled_fake_job(tmp_path: Path, source: str, **run_kwargs) -> tuple[subprocess.CompletedProcess, dict]:
    """``pipelines.scheduled --job_module=fake_job`` with ``source`` as the job; its result and the alert's fields."""
    (tmp_path / "fake_job.py").write_text(source)
    alert_file = tmp_path / "alert.txt"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "ALERT_FILE": str(alert_file)}
    result = subprocess.run([sys.executable, "-m", "pipelines.scheduled", "--job_module=fake_job",
                             f"--alert_command={ALERT}"], cwd=ROOT, env=env, timeout=DEADLINE_S, **run_kwargs)
    return result, dict(line.split("=", 1) for line in alert_file.read_text().splitlines())

def test_an_unwritable_log_neither_blocks_the_job_nor_silences_the_alert(tmp_path):
    """stdout and stderr on a full disk (/dev/full): the job's output (more than a pipe holds) is drained, the job
    finishes, and the alert fires even for a published run, saying the log was lost."""
    with open("/dev/full", "w") as full:
        result, alert = _scheduled_fake_job(tmp_path, "import sys\nfor i in range(20000):\n    print('x' * 80, "
                                            "flush=True)\nprint('y' * 80, file=sys.stderr)\n", stdout=full,
                                            stderr=full)
    assert result.returncode == 0
    assert alert["RETRIEVAL_OUTCOME"] == "published"
    assert "the job's output could not be written (No space left on device)" in alert["RETRIEVAL_MESSAGE"]


def test_a_run_published_to_its_lineage_only_is_not_called_published(tmp_path):
    result, alert = _scheduled_fake_job(
        tmp_path, f"print('published: /m/two_tower/lineages/b/latest -> r2 only; {cli.LATEST_KEPT} r1 (lineage a); "
        f"serve this run with --run_dir=/m/two_tower --lineage=b')\n", capture_output=True, text=True)
    assert result.returncode == 0
    assert alert["RETRIEVAL_OUTCOME"] == "lineage_only"
    assert "latest did not move" in alert["RETRIEVAL_MESSAGE"]
