"""Runs the training job for a scheduler (cron, systemd timer, Airflow) and raises an alert when it did not publish.

    python -m pipelines.scheduled --alert_command=deploy/alert.sh --config=configs/two_tower.py --output_dir=/srv/models

Every flag that is not one of this wrapper's own is passed through to the job (``pipelines.train`` by default), so a
scheduled command is the interactive one with ``pipelines.scheduled`` and an alert command in front. The job's
output passes through line by line (redirect it to a log file); its exit code is mapped to an outcome:

==== ================ ==========================================================
0    ``published``    a new run is live (``latest`` switched)
0    ``lineage_only`` published to its lineage's link only: ``latest`` stays on
                      another lineage's run (e.g. dated input files: a new
                      lineage every day; docs/operations.md)
2    ``bad_input``    the configuration, a path, a column or the data is wrong
3    ``gate_refused`` the quality gate kept the live run (``latest`` untouched)
4    ``locked``       another process holds the run (an overlapping schedule)
else ``failure``      a crash, a signal, a bug (traceback in the log)
==== ================ ==========================================================

When the outcome is in ``--alert_on`` (every one but ``published`` by default), ``--alert_command`` runs through
``/bin/sh -c`` with ``RETRIEVAL_EXIT_CODE``, ``RETRIEVAL_OUTCOME``, ``RETRIEVAL_RUN_DIR`` (empty when the job stopped
before its data was prepared) and ``RETRIEVAL_MESSAGE`` (the job's last line on stderr) in its environment. The wrapper
exits with the job's code (128 + N after signal N), so the scheduler sees the same outcome; an alert command that
fails or hangs past ``--alert_timeout_s`` is logged and stopped with its children, and does not change it.

Neither the job nor the alert outlives the wrapper: each runs in a process group of its own, a SIGTERM, SIGINT or
SIGHUP the wrapper gets is forwarded to the job's group (the job then exits 128 + N: a ``failure``, alerted), and
both are told by the kernel to stop if the wrapper is killed outright (``retrieval.processes``). When the wrapper's
own output cannot be written (a full log disk), the job's output is still read (the job never blocks on it) and
the alert fires whatever the outcome, saying so. See docs/scheduling.md.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Optional, Sequence

from absl import app, flags, logging

from retrieval import cli, processes

OUTCOMES = {cli.EXIT_OK: "published", cli.EXIT_INPUT_ERROR: "bad_input", cli.EXIT_GATE_REFUSED: "gate_refused",
            cli.EXIT_LOCKED: "locked"}
FAILURE = "failure"
LINEAGE_ONLY = "lineage_only"  # exit 0, but latest did not move (the job's stdout said cli.LATEST_KEPT)
RUN_DIR_LINE = re.compile(r"run directory: (.+)")  # what pipelines.train prints once its data is prepared
TAIL_LINES = 20
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # what a scheduler or a terminal sends to stop a run
STOP_GRACE_S = 30.0  # a job or an alert told to stop gets this long before its whole group is killed

_ALERT_COMMAND = flags.DEFINE_string("alert_command", "", "Shell command run when the outcome is in --alert_on, "
                                     "with RETRIEVAL_EXIT_CODE, RETRIEVAL_OUTCOME, RETRIEVAL_RUN_DIR and "
                                     "RETRIEVAL_MESSAGE set (e.g. deploy/alert.sh). Empty: no alert.")
_ALERT_ON = flags.DEFINE_multi_enum("alert_on", ["bad_input", "gate_refused", "locked", LINEAGE_ONLY, FAILURE],
                                    [*OUTCOMES.values(), LINEAGE_ONLY, FAILURE],
                                    "Outcomes that raise the alert (repeat the flag).")
_ALERT_TIMEOUT = flags.DEFINE_float("alert_timeout_s", 60.0, "Seconds the alert command may run.", lower_bound=1.0)
_JOB = flags.DEFINE_string("job_module", "pipelines.train", "Module run with python -m: the job to schedule.")


def outcome_of(code: int, latest_kept: bool = False) -> str:
    """The outcome name of a job's exit code (see the module docstring); ``latest_kept``: its stdout said that
    ``latest`` stays on another lineage's run."""
    if code == cli.EXIT_OK and latest_kept:
        return LINEAGE_ONLY
    return OUTCOMES.get(code, FAILURE)


def _pump(source: IO[str], sink: IO[str], tail: Optional[collections.deque], found: dict) -> None:
    """Copies the job's lines through as they come, keeping the last ones and what they say (the run directory,
    ``latest`` kept). Reads to the end even when ``sink`` cannot be written, so the job never blocks on a full pipe."""
    for line in source:
        if "output_lost" not in found:
            try:
                sink.write(line)
                sink.flush()
            except OSError as e:  # a full log disk, a closed terminal
                found["output_lost"] = f"{e.strerror or e}"
        match = RUN_DIR_LINE.match(line.strip())
        if match:
            found["run_dir"] = match.group(1)
        if cli.LATEST_KEPT in line:
            found["latest_kept"] = True
        if tail is not None and line.strip():
            tail.append(line.strip())


class _Forwarder:
    """While installed, sends the signals in ``FORWARDED`` that this process gets to the job's process group."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.received: Optional[int] = None
        self.at = 0.0  # when the first forwarded signal came
        self.previous = {sig: signal.signal(sig, self._forward) for sig in FORWARDED}

    def _forward(self, sig: int, frame) -> None:
        del frame
        if self.received is None:
            self.at = time.monotonic()
        self.received = sig
        processes.signal_group(self.process.pid, sig)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _start_job_process() -> None:
    """Runs in the job's process before it starts: the signals the wrapper forwards act on the job (a wrapper
    started in the background by a script inherits SIGINT ignored, and so would the job: it would outlive the grace
    period and be killed), and the job dies with the wrapper."""
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    processes.die_with_parent()


def run_job(module: str, args: Sequence[str]) -> tuple[int, str, str, dict]:
    """Runs ``python -m module args`` in its own process group: (exit code, its run directory or "", its last line
    on stderr, what its output said: ``latest_kept``, ``output_lost``, ``signal``)."""
    process = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, bufsize=1, errors="replace", start_new_session=True,
                               preexec_fn=_start_job_process)
    forwarder = _Forwarder(process)
    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    found: dict = {}
    pumps = [threading.Thread(target=_pump, args=(process.stdout, sys.stdout, None, found), daemon=True),
             threading.Thread(target=_pump, args=(process.stderr, sys.stderr, tail, found), daemon=True)]
    for pump in pumps:
        pump.start()
    try:
        code = None
        while code is None:
            try:
                code = process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
            if code is None and forwarder.received and time.monotonic() - forwarder.at > STOP_GRACE_S:
                processes.stop_group(process, STOP_GRACE_S, signal.SIGKILL)  # told to stop and still running
    finally:
        forwarder.restore()
    processes.signal_group(process.pid, signal.SIGKILL)  # what the job left running in its group
    for pump in pumps:
        pump.join(timeout=STOP_GRACE_S)
    if forwarder.received:
        found["signal"] = signal.Signals(forwarder.received).name
    return (128 - code if code < 0 else code), found.get("run_dir", ""), tail[-1] if tail else "", found


def alert(command: str, code: int, outcome: str, run_dir: str, message: str, timeout_s: float) -> bool:
    """Runs the alert command with the outcome in its environment, in a process group of its own (a command that
    hangs is stopped with every process it started); False (and a logged error) if it failed."""
    env = {**os.environ, "RETRIEVAL_EXIT_CODE": str(code), "RETRIEVAL_OUTCOME": outcome,
           "RETRIEVAL_RUN_DIR": run_dir, "RETRIEVAL_MESSAGE": message}
    process = subprocess.Popen(["/bin/sh", "-c", command], env=env, start_new_session=True,
                               preexec_fn=processes.die_with_parent)
    try:
        returncode = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        processes.stop_group(process, STOP_GRACE_S, signal.SIGKILL)
        logging.error("alert command ran past %.0f s and was stopped: %s", timeout_s, command)
        return False
    if returncode != 0:
        logging.error("alert command exited %d: %s", returncode, command)
    return returncode == 0


def _message(found: dict, last_line: str) -> str:
    """What the alert says: the job's last line on stderr, and why the wrapper itself had to step in."""
    notes = []
    if found.get("signal"):
        notes.append(f"pipelines.scheduled got {found['signal']} and stopped the job")
    if found.get("output_lost"):
        notes.append(f"the job's output could not be written ({found['output_lost']})")
    if found.get("latest_kept"):
        notes.append("published to its lineage only; latest did not move (docs/operations.md)")
    return "; ".join([*notes, last_line] if last_line else notes)


def _exit(code: int) -> None:
    """Exits with ``code`` even when this process's own output cannot be flushed (a full log disk)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        os._exit(code)
    sys.exit(code)


def main(argv: Sequence[str]) -> None:
    verbosity = flags.FLAGS["verbosity"]  # absl's own flag, parsed here: the job gets it too
    code, run_dir, last_line, found = run_job(_JOB.value, [*argv[1:], *([f"--verbosity={verbosity.value}"]
                                                                        if verbosity.present else [])])
    outcome = outcome_of(code, found.get("latest_kept", False))
    logging.info("scheduled %s: exit %d (%s)%s", _JOB.value, code, outcome, f", run {run_dir}" if run_dir else "")
    if _ALERT_COMMAND.value and (outcome in _ALERT_ON.value or found.get("output_lost")):
        alert(_ALERT_COMMAND.value, code, outcome, run_dir, _message(found, last_line), _ALERT_TIMEOUT.value)
    _exit(code)


def parse_flags(argv: Sequence[str]) -> list[str]:
    """This wrapper's flags; every other argument is left for the job (``known_only``)."""
    try:
        return flags.FLAGS(list(argv), known_only=True)
    except flags.Error as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(cli.EXIT_INPUT_ERROR)
    except SystemExit as e:  # --help
        sys.exit(cli.help_exit_code(e.code, argv))


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
