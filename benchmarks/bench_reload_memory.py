"""Server memory over hot reloads of newly published runs: resident memory of ``python -m pipelines.serve`` after N
reloads, each of a new run directory (a copy of one trained run under a new version, published by moving
``latest`` as training does).

Starts the server as a user does (one process, its own canary, ``--reload_interval_s`` short so that the benchmark
does not wait 5 s per reload), publishes copies one after the other and waits for each to be served
(``/v1/status``'s ``reloads``), asking the new run a few ``/v1/candidates`` and ``/v1/similar`` requests. At each N
of ``--reloads`` it waits a few reload intervals (the poll after a swap frees the old run, ``retrieval.serving.reload``)
and reads the server's ``VmRSS`` and ``RssAnon`` (``/proc/<pid>/status``: Linux only). Each run is deleted once its
successor is served, as a publisher that keeps a few runs would.

    python -m benchmarks.bench_reload_memory [--run_dir=artifacts/two_tower] [--reloads=0,10,20,40,80] [--smoke]
        [--record]

Without ``--run_dir`` it first trains ``configs/two_tower.py`` on the bundled data into a temporary directory
(minutes); ``--smoke`` serves the small synthetic run of ``retrieval.serving.demo_run`` instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
RELOAD_INTERVAL_S = 0.5
NOT_SERVED = ("checkpoints", "tensorboard", "stages")  # run files the server never reads: not copied
START_TIMEOUT_S, RELOAD_TIMEOUT_S = 300.0, 120.0


def proc_memory_mb(pid: int) -> dict[str, float]:
    """``VmRSS`` and ``RssAnon`` of process ``pid`` in MiB (``/proc/<pid>/status``)."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                fields[key] = int(value.split()[0]) / 1024
    return fields


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Publisher:
    """Publishes copies of ``source`` (a run directory) into ``model_dir``, each under a new version."""

    def __init__(self, source: Path, model_dir: Path):
        self.source, self.model_dir, self.count = source, model_dir, 0
        model_dir.mkdir(parents=True, exist_ok=True)

    def publish(self) -> Path:
        from retrieval.artifacts import point_link, read_json, write_json

        run = self.model_dir / f"run-{self.count:05d}"
        shutil.copytree(self.source, run, symlinks=True, ignore=shutil.ignore_patterns(*NOT_SERVED))
        manifest = read_json(run / "manifest.json")
        manifest["version"] = f"{manifest.get('version')}-copy{self.count}"
        write_json(run / "manifest.json", manifest)
        point_link(self.model_dir / "latest", run.name)
        self.count += 1
        return run


def _wait(condition, timeout_s: float, what: str, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with code {server.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def measure(source: Path, reloads: Sequence[int], interval_s: float = RELOAD_INTERVAL_S,
            work_dir: Optional[Path] = None) -> list[dict]:
    """The rows: the server's memory after each N of ``reloads`` hot reloads of new copies of ``source``."""
    import httpx

    from retrieval.artifacts import read_json

    reloads = sorted(set(reloads))
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        publisher = Publisher(source, Path(tmp) / "model")
        published = [publisher.publish()]
        users = [str(u) for u in _some_users(source)]
        item = str(_first_item(source))
        port = free_port()
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
        log = Path(tmp) / "server.log"  # a file, not a pipe: a full pipe would block the server's logging
        server = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "pipelines.serve", f"--run_dir={publisher.model_dir}",
             f"--port={port}", f"--reload_interval_s={interval_s}", "--log_level=warning"], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=log.open("w"))
        url = f"http://127.0.0.1:{port}"
        rows = []
        try:
            with httpx.Client(base_url=url, timeout=60) as http:
                def answers(path: str) -> bool:
                    try:
                        return http.get(path).is_success
                    except httpx.TransportError:
                        return False

                def reloaded() -> int:
                    return int(http.get("/v1/status").json()["reloads"])

                def ask() -> None:  # what a client asks the new run
                    for user in users:
                        assert http.post("/v1/candidates", json={"user_id": user, "k": 10}).is_success
                    assert http.post("/v1/similar", json={"item_id": item, "k": 10}).is_success

                _wait(lambda: answers("/healthz"), START_TIMEOUT_S, "the server to start", server)
                ask()
                start = time.monotonic()
                for done in range(max(reloads) + 1):
                    if done in reloads:
                        time.sleep(max(1.0, 3 * interval_s))  # the poll after a swap frees the old run
                        memory = proc_memory_mb(server.pid)
                        rows.append({"reloads": done, "rss MB": round(memory["VmRSS"], 1),
                                     "anon MB": round(memory["RssAnon"], 1), "wall s": round(time.monotonic() - start, 1)})
                        print(rows[-1], flush=True)
                    if done == max(reloads):
                        break
                    published.append(publisher.publish())
                    try:
                        _wait(lambda n=done + 1: reloaded() >= n, RELOAD_TIMEOUT_S, f"reload {done + 1}", server)
                    except RuntimeError:
                        print(http.get("/v1/status", timeout=5).json(), file=sys.stderr)
                        raise
                    ask()
                    shutil.rmtree(published.pop(0))  # the run served before: a publisher keeps a few
                status = http.get("/v1/status").json()
                assert status["serving"]["version"] == read_json(published[-1] / "manifest.json")["version"], status
        except BaseException:
            if server.poll() is None:
                server.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack to the log
                server.wait(60)
            print(log.read_text()[-6000:], file=sys.stderr)
            raise
        finally:
            server.terminate()
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    base = rows[0]
    for previous, row in zip([None] + rows[:-1], rows, strict=True):
        row["growth MB"] = round(row["rss MB"] - base["rss MB"], 1)
        row["MB per reload since previous row"] = (None if previous is None else round(
            (row["rss MB"] - previous["rss MB"]) / (row["reloads"] - previous["reloads"]), 3))
    return rows


def _some_users(run: Path, count: int = 3) -> list:
    import pyarrow.parquet as pq

    from retrieval.artifacts import RunPaths

    users = pq.read_table(RunPaths(run).train_data, columns=["user_id"]).column("user_id").to_pylist()
    return list(dict.fromkeys(users))[:count]


def _first_item(run: Path):
    import pyarrow.parquet as pq

    from retrieval.artifacts import RunPaths

    return pq.read_table(RunPaths(run).item_embeddings, columns=["item_id"]).column("item_id")[0].as_py()


def trained_run(output: Path, smoke: bool) -> Path:
    """A run to copy: the synthetic demo run (``smoke``) or ``configs/two_tower.py`` trained on the bundled data."""
    import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

    if smoke:
        from retrieval.index.run_index import build_run_index
        from retrieval.serving.demo_run import write_demo_run

        run = output / "demo"
        build_run_index(write_demo_run(run, version="demo"))
        return run
    from configs import two_tower
    from retrieval.jobs.job import TrainingJob

    TrainingJob(two_tower.get_config(), str(output), "trained").run()
    return (output / "two_tower" / "latest").resolve()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run_dir", default=None, help="a run or model directory (its latest run) to copy; default: "
                                                        "train configs/two_tower.py first")
    parser.add_argument("--reloads", default="0,10,20,40,80", help="reload counts at which memory is read")
    parser.add_argument("--interval_s", type=float, default=RELOAD_INTERVAL_S, help="the server's reload interval")
    parser.add_argument("--smoke", action="store_true", help="the demo run, reloads 0,2,4")
    from benchmarks.record import add_record_flag, record, should_record
    from benchmarks.results_page import markdown_table

    add_record_flag(parser)
    args = parser.parse_args(argv)
    reloads = [0, 2, 4] if args.smoke else [int(n) for n in args.reloads.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        if args.run_dir:
            from retrieval.serving.settings import resolve_run_dir

            source = resolve_run_dir(args.run_dir)
        else:
            source = trained_run(Path(tmp), args.smoke)
        rows = measure(source, reloads, args.interval_s)
    print(markdown_table(rows))
    if should_record(args):
        record("bench_reload_memory", rows, "python -m benchmarks.bench_reload_memory " + " ".join(argv or sys.argv[1:]),
               note=f"pipelines.serve, --reload_interval_s={args.interval_s}; each reload a new copy of {source.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
