"""Reload memory stays flat: 100 hot reloads of a small run, with requests in flight, grow the server's resident
memory by less than 20 MB after a warm-up (in a fresh process, so other tests' memory does not count)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELOADS, WARM_UP, BOUND_MB = 100, 10, 20.0

SCRIPT = r"""
import json, sys, threading
from pathlib import Path

import httpx

from retrieval import memory
from retrieval.artifacts import point_link
from retrieval.index.run_index import build_run_index
from retrieval.serving.app import create_app
from retrieval.serving.demo_run import write_demo_run
from retrieval.serving.reload import GeneratorHolder
from retrieval.serving.server import BackgroundServer

root, reloads, warm_up = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if sys.argv[4:] == ["--keep-freed"]:  # to measure what release_freed saves (benchmarks/JOURNAL.md)
    memory.release_freed = lambda: None
for name in ("a", "b"):
    build_run_index(write_demo_run(root / name, version=name))
point_link(root / "latest", "a")
holder = GeneratorHolder(root)
stop, answered = threading.Event(), [0]
with BackgroundServer(create_app(holder)) as server:
    def client():
        with httpx.Client(timeout=60) as http:
            while not stop.is_set():
                answered[0] += http.post(server.url + "/v1/candidates", json={"user_id": "u3", "k": 10}).is_success
    thread = threading.Thread(target=client)
    thread.start()
    rss = []
    for i in range(warm_up + reloads):
        point_link(root / "latest", "ab"[(i + 1) % 2])
        assert holder.poll(), holder.status()
        rss.append(memory.current_rss_mb())
    stop.set()
    thread.join()
print(json.dumps({"rss": rss, "answered": answered[0], "reloads": holder.reloads}))
"""


def test_rss_is_flat_over_100_reloads(tmp_path):
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), str(RELOADS), str(WARM_UP)], cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
                              "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    rss = result["rss"]
    assert result["reloads"] == RELOADS + WARM_UP and result["answered"] > 0
    growth = max(rss[WARM_UP:]) - rss[WARM_UP - 1]
    assert growth < BOUND_MB, f"RSS grew {growth:.1f} MB over {RELOADS} reloads (after warm-up: {rss[WARM_UP - 1]:.0f})"
