"""Runs the training job for a scheduler (cron, systemd timer, Airflow) and raises an alert when it did not publish.

    python -m pipelines.scheduled --alert_command=deploy/alert.sh --config=configs/two_tower.py --output_dir=/srv/models

Every flag that is not one of this wrapper's own is passed through to the job (``pipelines.train`` by default), so a
scheduled command is the interactive one with ``pipelines.scheduled`` and an alert command in front. The job's
output passes through line by line (redirect it to a log file); its exit code is mapped to an outcome:

==== ================ ==========================================================
0    ``published``    a new run is live (``latest`` switched)
2    ``bad_input``    the configuration, a path, a column or the data is wrong
3    ``gate_refused`` the quality gate kept the live run (``latest`` untouched)
4    ``locked``       another process holds the run (an overlapping schedule)
else ``failure``      a crash, a signal, a bug (traceback in the log)
==== ================ ==========================================================

When the outcome is in ``--alert_on`` (every one but ``published`` by default), ``--alert_command`` runs through
``/bin/sh -c`` with ``RETRIEVAL_EXIT_CODE``, ``RETRIEVAL_OUTCOME``, ``RETRIEVAL_RUN_DIR`` (empty when the job stopped
before creating its run) and ``RETRIEVAL_MESSAGE`` (the job's last line on stderr) in its environment. The wrapper
exits with the job's code (128 + N after signal N), so the scheduler sees the same outcome; an alert command that
fails or hangs past ``--alert_timeout_s`` is logged and does not change it. See docs/scheduling.md.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import threading
from typing import IO, Optional, Sequence

from absl import app, flags, logging

from retrieval import cli

OUTCOMES = {cli.EXIT_OK: "published", cli.EXIT_INPUT_ERROR: "bad_input", cli.EXIT_GATE_REFUSED: "gate_refused",
            cli.EXIT_LOCKED: "locked"}
FAILURE = "failure"
RUN_DIR_LINE = re.compile(r"run directory: (.+)")  # what pipelines.train prints once its run exists
TAIL_LINES = 20

_ALERT_COMMAND = flags.DEFINE_string("alert_command", "", "Shell command run when the outcome is in --alert_on, "
                                     "with RETRIEVAL_EXIT_CODE, RETRIEVAL_OUTCOME, RETRIEVAL_RUN_DIR and "
                                     "RETRIEVAL_MESSAGE set (e.g. deploy/alert.sh). Empty: no alert.")
_ALERT_ON = flags.DEFINE_multi_enum("alert_on", ["bad_input", "gate_refused", "locked", FAILURE],
                                    [*OUTCOMES.values(), FAILURE], "Outcomes that raise the alert (repeat the flag).")
_ALERT_TIMEOUT = flags.DEFINE_float("alert_timeout_s", 60.0, "Seconds the alert command may run.", lower_bound=1.0)
_JOB = flags.DEFINE_string("job_module", "pipelines.train", "Module run with python -m: the job to schedule.")


def outcome_of(code: int) -> str:
    """The outcome name of a job's exit code (see the module docstring)."""
    return OUTCOMES.get(code, FAILURE)


def _pump(source: IO[str], sink: IO[str], tail: Optional[collections.deque], found: dict) -> None:
    """Copies the job's lines through as they come, keeping the last ones and the run directory it names."""
    for line in source:
        sink.write(line)
        sink.flush()
        match = RUN_DIR_LINE.match(line.strip())
        if match:
            found["run_dir"] = match.group(1)
        if tail is not None and line.strip():
            tail.append(line.strip())


def run_job(module: str, args: Sequence[str]) -> tuple[int, str, str]:
    """Runs ``python -m module args``: (exit code, its run directory or "", its last line on stderr)."""
    process = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, bufsize=1, errors="replace")
    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    found: dict = {}
    pumps = [threading.Thread(target=_pump, args=(process.stdout, sys.stdout, None, found), daemon=True),
             threading.Thread(target=_pump, args=(process.stderr, sys.stderr, tail, found), daemon=True)]
    for pump in pumps:
        pump.start()
    code = process.wait()
    for pump in pumps:
        pump.join()
    return (128 - code if code < 0 else code), found.get("run_dir", ""), tail[-1] if tail else ""


def alert(command: str, code: int, run_dir: str, message: str, timeout_s: float) -> bool:
    """Runs the alert command with the outcome in its environment; False (and a logged error) if it failed."""
    env = {**os.environ, "RETRIEVAL_EXIT_CODE": str(code), "RETRIEVAL_OUTCOME": outcome_of(code),
           "RETRIEVAL_RUN_DIR": run_dir, "RETRIEVAL_MESSAGE": message}
    try:
        result = subprocess.run(["/bin/sh", "-c", command], env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        logging.error("alert command ran past %.0f s and was stopped: %s", timeout_s, command)
        return False
    if result.returncode != 0:
        logging.error("alert command exited %d: %s", result.returncode, command)
    return result.returncode == 0


def main(argv: Sequence[str]) -> None:
    verbosity = flags.FLAGS["verbosity"]  # absl's own flag, parsed here: the job gets it too
    code, run_dir, message = run_job(_JOB.value, [*argv[1:], *([f"--verbosity={verbosity.value}"]
                                                               if verbosity.present else [])])
    outcome = outcome_of(code)
    logging.info("scheduled %s: exit %d (%s)%s", _JOB.value, code, outcome, f", run {run_dir}" if run_dir else "")
    if _ALERT_COMMAND.value and outcome in _ALERT_ON.value:
        alert(_ALERT_COMMAND.value, code, run_dir, message, _ALERT_TIMEOUT.value)
    sys.exit(code)


def parse_flags(argv: Sequence[str]) -> list[str]:
    """This wrapper's flags; every other argument is left for the job (``known_only``)."""
    try:
        return flags.FLAGS(list(argv), known_only=True)
    except flags.Error as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(cli.EXIT_INPUT_ERROR)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
