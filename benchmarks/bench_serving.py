"""Serving latency and throughput over loopback HTTP, against the same requests answered in-process.

A synthetic published run (``retrieval.serving.demo_run``; full: 64-d, 5000 users; smoke: 16-d, 200 users) is
indexed (``auto``) and served by the real command, ``python -m pipelines.serve``, in its own process. Requests mix
known users (stored history), request histories of 10 items and cold users, k = 100. Rows: one sequential client
(p50/p99 latency, QPS) and 4 concurrent clients (QPS, p50/p99), each bounded by a request count and a time limit,
and the library call ``CandidateGenerator.recommend`` in this process as the reference (HTTP overhead = the ratio).

    python -m benchmarks.bench_serving [--smoke]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import faiss
import httpx
import numpy as np

from retrieval.artifacts import point_link
from retrieval.serving import CandidateGenerator, build_run_index
from retrieval.serving.demo_run import write_demo_run

K, CLIENTS = 100, 4


def _requests(generator: CandidateGenerator, count: int, seed: int) -> list[dict]:
    """A seeded mix: 1/2 known users, 1/4 request histories of 10 items, 1/4 cold users."""
    rng = np.random.default_rng(seed)
    users, items = generator.histories.user_ids, generator.index.id_map.item_ids
    kinds = rng.choice(3, size=count, p=[0.5, 0.25, 0.25])
    return [{"user_id": str(rng.choice(users)), "k": K} if kind == 0 else
            {"history": rng.choice(items, 10).tolist(), "k": K} if kind == 1 else
            {"user_id": f"cold-{i}", "k": K} for i, kind in enumerate(kinds)]


def _library_seconds(generator: CandidateGenerator, requests: list[dict]) -> list[float]:
    """Seconds per ``recommend`` call in this process, FAISS on one thread as the server runs it."""
    threads, seconds = faiss.omp_get_max_threads(), []
    faiss.omp_set_num_threads(1)
    try:
        for body in requests:
            start = time.perf_counter()
            generator.recommend(body.get("user_id"), body.get("history"), K)
            seconds.append(time.perf_counter() - start)
    finally:
        faiss.omp_set_num_threads(threads)
    return seconds


def _percentiles(seconds: list[float]) -> dict:
    ms = np.asarray(seconds) * 1000.0
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3)}


def _client(url: str, requests: list[dict], deadline: float, latencies: list, errors: list) -> None:
    nodelay = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])  # as RPC clients do
    with httpx.Client(base_url=url, timeout=30, transport=nodelay) as http:
        for body in requests:
            if time.monotonic() > deadline:
                return
            start = time.perf_counter()
            response = http.post("/v1/candidates", json=body)
            latencies.append(time.perf_counter() - start)
            if response.status_code != 200:
                errors.append(response.status_code)


def _load(url: str, requests: list[dict], clients: int, limit_s: float) -> dict:
    """``clients`` threads share ``requests`` round-robin until done or ``limit_s`` passes."""
    latencies, errors, deadline = [], [], time.monotonic() + limit_s
    threads = [threading.Thread(target=_client, args=(url, requests[i::clients], deadline, latencies, errors))
               for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    return {"requests": len(latencies), "errors": len(errors), "qps": round(len(latencies) / elapsed, 1),
            **_percentiles(latencies)}


def _serve(model_dir: Path, log: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "pipelines.serve", f"--run_dir={model_dir}", f"--port={port}",
                                "--log_level=warning"], stdout=subprocess.DEVNULL, stderr=log.open("w"))
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")


def run(smoke: bool) -> list[dict]:
    size = (dict(num_items=2000, num_users=200, dimension=16, clusters=8) if smoke else
            dict(num_items=50_000, num_users=5000, dimension=64, clusters=50))
    count, limit_s = (60, 5.0) if smoke else (2000, 30.0)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "demo"
        paths = write_demo_run(model_dir / "run", history_length=20, **size)
        index = build_run_index(paths)
        point_link(model_dir / "latest", "run")
        generator = CandidateGenerator.from_run(model_dir)
        requests = _requests(generator, count, seed=0)
        library = _library_seconds(generator, requests[: max(10, count // 10)] + requests)
        library = library[max(10, count // 10):]  # the first ones warmed up
        common = {"items": len(generator.index), "users": len(generator.histories), "factory": index.factory, "k": K}
        rows = [{"name": "library", **common, "clients": 1, "requests": len(library),
                 "qps": round(len(library) / sum(library), 1), **_percentiles(library)}]
        process, url = _serve(model_dir, Path(tmp) / "serve.log")
        try:
            _load(url, requests[: max(10, count // 10)], 1, limit_s)  # warm-up
            for clients in (1, CLIENTS):
                row = {"name": f"http_{clients}_clients", **common, "clients": clients,
                       **_load(url, requests, clients, limit_s)}
                row["p50_vs_library"] = round(row["p50_ms"] / rows[0]["p50_ms"], 2)
                rows.append(row)
        finally:
            process.terminate()
            process.wait(timeout=30)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run, a few seconds of requests")
    for row in run(parser.parse_args().smoke):
        print(json.dumps(row))
