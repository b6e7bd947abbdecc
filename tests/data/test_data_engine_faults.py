"""Fault harness of the Dask engine: every case ends within its deadline with one ``InputError`` line, never a hang.

A scheduler with no worker, a cluster whose only worker leaves while tasks wait, and a malformed address (whose
half-built client must not delay the exit or print a ``TimeoutError`` after the error line)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retrieval.data.engine import open_engine
from retrieval.errors import InputError

distributed = pytest.importorskip("dask.distributed")
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 2.0  # data.engine_timeout_s of these tests
DEADLINE_S = 60.0  # what each case may take on a loaded 2-core box (a hang never ends)


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_a_scheduler_without_workers_is_refused_within_the_timeout():
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        start = time.monotonic()
        with pytest.raises(InputError, match=r"data.engine_address.*has no worker \(waited 2 s"):
            with open_engine("dask", cluster.scheduler_address, timeout_s=TIMEOUT_S):
                pass
        assert time.monotonic() - start < DEADLINE_S


def test_a_cluster_whose_only_worker_leaves_ends_the_map_within_the_timeout():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        with open_engine("dask", cluster.scheduler_address, timeout_s=TIMEOUT_S) as engine:
            start = time.monotonic()
            cluster.scale(0)  # the only worker goes; the tasks wait for another that never comes
            with pytest.raises(InputError, match=r"has had no worker for 2 s"):
                engine.map(_sleep, [0.5] * 4)
            assert time.monotonic() - start < DEADLINE_S


def test_a_malformed_address_exits_2_with_its_one_line_last():
    """Through the command line: the error is the last line on stderr (what a scheduler's alert quotes)."""
    code = ("from retrieval import cli\nfrom retrieval.data.engine import open_engine\n"
            "def main(argv):\n    with open_engine('dask', 'tcp://127.0.0.1:notaport', timeout_s=5):\n        pass\n"
            "cli.run(main)\n")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=DEADLINE_S, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: field 'data.engine_address': cannot reach the Dask scheduler at 'tcp://127.0.0.1:notaport' within "
        "5 s (ValueError: invalid literal for int() with base 10: 'notaport'); check the address (tcp://host:port) "
        "and that the scheduler runs"]
    assert time.monotonic() - start < 5 + 15  # no wait of twice the timeout at exit
