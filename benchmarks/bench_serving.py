"""Serving latency and throughput at 1M and 10M items, over loopback HTTP and in-process, k = 100.

For each size a published run is written: the item catalogue of ``bench_index`` (the same seeded clustered mixture,
64-d, cosine, Parquet shards written without holding it whole, or reused from ``bench_index --keep_dir`` through
``--catalogue_dir``), 5000 training users whose 20-item histories are neighbourhoods of a random item among the
first 50k, a mean-of-history user tower over those 50k (``demo_run.write_user_tower``: the serving contract) and the
``auto`` index built by ``build_run_index`` from the shards (or the kept one). Requests are a seeded mix: 1/2 known
users (stored history), 1/4 request histories of 10 items, 1/4 cold users (popularity fallback).

Rows, each bounded by a request count and a time limit: ``library_1_client`` (``CandidateGenerator.recommend`` one
request at a time, FAISS on one thread, the reference), ``batcher_<n>_clients`` (n threads through the in-process
``MicroBatcher``), and the real command ``python -m pipelines.serve`` in its own process with ``http_1_client`` and
``http_<n>_clients`` (keep-alive ``http.client`` connections, one per client thread), plus, up to
``--unbatched_max`` items, ``http_<n>_clients_unbatched`` (``--batch_max_size=0``: each request alone). p50/p99 are
per-request latencies; ratios are against ``library_1_client`` of the same size. The HTTP rows are repeated for each
``--workers`` count (server processes sharing the port and the memory-mapped index, ``pipelines.serve --workers``;
rows of more than one worker are named ``..._<w>_workers``), each with the server's memory: ``server_rss_mb`` (the
processes' resident sets added up, shared pages counted once per process) and ``server_pss_mb`` (proportional set
size: shared pages, such as the mapped index, divided among the processes that map them), and the CPU time per
request of the server (all its processes) and of the clients (this process). The clients run on the same machine as
the server and share its cores. Targets: p99 < 10 ms for one HTTP client at 10M items, >= 1000 QPS
with 8 HTTP clients at 1M items, 0 errors.

Unless ``--smoke`` or ``--no-record``, the rows are also recorded (``benchmarks.record``): appended to
``results.json``'s ``separate_runs`` with the machine facts, and on the ``RESULTS.md`` page rewritten from it.

    python -m benchmarks.bench_serving [--smoke] [--sizes=1000000,10000000] [--catalogue_dir=DIR] [--max_wait_ms=0]
        [--workers=1,2] [--no-record]
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

import faiss
import httpx
import numpy as np
import pandas as pd

from benchmarks.bench_index import write_catalogue
from benchmarks.record import add_record_flag, record, should_record
from retrieval.artifacts import RunPaths, point_link, write_json
from retrieval.index.factory import prepare_vectors
from retrieval.index.run_index import build_run_index
from retrieval.index.source import ParquetVectors
from retrieval.serving import CandidateGenerator
from retrieval.serving.batcher import MicroBatcher, Request
from retrieval.serving.demo_run import write_user_tower

K, CLIENTS, DIMENSION, HISTORY, USERS, HEAD = 100, 8, 64, 20, 5000, 50_000
TARGET_P99_MS, TARGET_QPS = 10.0, 1000.0


def write_run(run_dir: Path, count: int, catalogue_dir: Path | None, smoke: bool) -> RunPaths:
    """A published run of ``count`` items (module docstring); the index is built unless ``catalogue_dir`` has one."""
    paths = RunPaths(run_dir)
    run_dir.mkdir(parents=True)
    kept = catalogue_dir / f"items-{count}" if catalogue_dir else None
    if kept is not None and kept.is_dir():
        paths.item_embeddings.symlink_to(kept.absolute(), target_is_directory=True)
    else:
        write_catalogue(paths.item_embeddings, count, DIMENSION, seed=0)
    users = 200 if smoke else USERS
    head = ParquetVectors(paths.item_embeddings).take(np.arange(min(HEAD, count)))
    head_ids = np.arange(len(head)).astype(str)
    rng = np.random.default_rng(0)
    anchors = rng.choice(len(head), users)
    unit = prepare_vectors(head, "cosine")
    _, neighbours = faiss.knn(unit[anchors], unit, HISTORY)  # coherent histories: an item's neighbourhood
    neighbours = rng.permuted(neighbours, axis=1)
    paths.train_data.parent.mkdir(parents=True)
    pd.DataFrame({"user_id": np.repeat([f"u{u}" for u in range(users)], HISTORY),
                  "item_id": head_ids[neighbours.reshape(-1)],
                  "timestamp": np.tile(np.arange(HISTORY, dtype=np.int64), users)}).to_parquet(paths.train_data)
    write_user_tower(paths.user_tower, head_ids, head, HISTORY, "cosine")
    write_json(paths.manifest, {"model_type": "item2vec", "run_id": run_dir.name, "version": "1", "metric": "cosine",
                                "max_history": HISTORY, "seed": 0})
    index = catalogue_dir / f"index-{count}" if catalogue_dir else None
    if index is not None and index.is_dir():
        paths.index.symlink_to(index.absolute(), target_is_directory=True)
    else:
        build_run_index(paths)
    return paths


def _requests(generator: CandidateGenerator, count: int, seed: int) -> list[dict]:
    """A seeded mix: 1/2 known users, 1/4 request histories of 10 items (of the tower's 50k), 1/4 cold users."""
    rng = np.random.default_rng(seed)
    users, items = generator.histories.user_ids, generator.index.id_map.item_ids[:HEAD]
    kinds = rng.choice(3, size=count, p=[0.5, 0.25, 0.25])
    return [{"user_id": str(rng.choice(users)), "k": K} if kind == 0 else
            {"history": rng.choice(items, 10).tolist(), "k": K} if kind == 1 else
            {"user_id": f"cold-{i}", "k": K} for i, kind in enumerate(kinds)]


def _percentiles(seconds: list[float]) -> dict:
    ms = np.asarray(seconds) * 1000.0
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3)}


def _load(call, requests: list[dict], clients: int, limit_s: float) -> dict:
    """``clients`` threads share ``requests`` round-robin until done or ``limit_s`` passes; ``call(client, body)``
    answers one request and says whether it succeeded (``client``: that thread's state, from ``call(None, None)``)."""
    latencies, errors, deadline = [], [], time.monotonic() + limit_s

    def client(bodies: list[dict]) -> None:
        state = call(None, None)
        for body in bodies:
            if time.monotonic() > deadline:
                return
            start = time.perf_counter()
            ok = call(state, body)
            latencies.append(time.perf_counter() - start)
            if not ok:
                errors.append(body)

    threads = [threading.Thread(target=client, args=(requests[i::clients],)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    return {"clients": clients, "requests": len(latencies), "errors": len(errors),
            "qps": round(len(latencies) / elapsed, 1), **_percentiles(latencies)}


def _library(generator: CandidateGenerator):
    def call(state, body) -> bool:
        if body is None:
            faiss.omp_set_num_threads(1)  # per thread, as the server runs its searches
        else:
            generator.recommend(body.get("user_id"), body.get("history"), body["k"])
        return True
    return call


def _batched(batcher: MicroBatcher):
    def call(state, body) -> bool:
        if body is not None:
            batcher.submit(Request(body.get("user_id"), body.get("history"), body["k"])).result()
        return True
    return call


def _http(port: int):
    """Keep-alive ``http.client`` connections with TCP_NODELAY (as RPC clients do), one per client thread."""
    def call(connection, body) -> bool | http.client.HTTPConnection:
        if body is None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.connect()
            connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return connection
        connection.request("POST", "/v1/candidates", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        return response.status == 200 and len(json.loads(payload)["items"]) > 0
    return call


def _serve(model_dir: Path, log: Path, workers: int, *flags: str) -> tuple[subprocess.Popen, int]:
    """``pipelines.serve`` with ``workers`` processes, returned once every worker answers (``/metrics`` lists one
    ``model_info`` series per live worker)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "pipelines.serve", f"--run_dir={model_dir}", f"--port={port}",
                                "--log_level=warning", "--reload_interval_s=0", f"--workers={workers}", *flags],
                               stdout=subprocess.DEVNULL, stderr=log.open("w"))
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and process.poll() is None:
        try:
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            if sum(line.startswith("retrieval_model_info{") for line in metrics.splitlines()) >= workers:
                return process, port
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")


def _tree(pid: int) -> list[int]:
    """``pid`` and its child processes (the server's workers)."""
    return [pid] + [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
                    for child in (task / "children").read_text().split()]


def _memory_mb(pid: int) -> dict:
    """RSS and PSS (``/proc/<pid>/smaps_rollup``) of ``pid`` and its child processes, added up, in MB."""
    totals = {"Rss:": 0, "Pss:": 0}
    for one in _tree(pid):
        for line in Path(f"/proc/{one}/smaps_rollup").read_text().splitlines():
            key = line.split()[0]
            if key in totals:
                totals[key] += int(line.split()[1])
    return {"server_rss_mb": round(totals["Rss:"] / 1024, 1), "server_pss_mb": round(totals["Pss:"] / 1024, 1)}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its child processes so far."""
    ticks = 0
    for one in _tree(pid):
        fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _measured(pid: int, port: int, requests: list[dict], clients: int, limit_s: float) -> dict:
    """One HTTP row, with the CPU milliseconds per request that the server and the clients spent: with ``c`` cores
    for the server, its QPS cannot exceed ``c * 1000 / server_cpu_ms_per_request``."""
    server, client = _cpu_s(pid), time.process_time()
    row = _load(_http(port), requests, clients, limit_s)
    answered = max(1, row["requests"])
    return {**row, "server_cpu_ms_per_request": round((_cpu_s(pid) - server) * 1000 / answered, 3),
            "client_cpu_ms_per_request": round((time.process_time() - client) * 1000 / answered, 3)}


def _http_rows(model_dir: Path, log: Path, requests: list[dict], warm: list[dict], limit_s: float,
               unbatched: bool, max_wait_s: float, workers: Sequence[int]) -> list[dict]:
    rows = []
    settings = [(w, "" if w == 1 else f"_{w}_workers", (f"--batch_max_wait_ms={max_wait_s * 1000}",), (1, CLIENTS))
                for w in workers]
    if unbatched:
        settings.append((1, "_unbatched", ("--batch_max_size=0",), (CLIENTS,)))
    for count, suffix, flags, client_counts in settings:
        process, port = _serve(model_dir, log, count, *flags)
        try:
            _load(_http(port), warm, 1, limit_s)
            for clients in client_counts:
                name = f"http_{clients}_client{'s' if clients > 1 else ''}{suffix}"
                rows.append({"name": name, "workers": count,
                             **_measured(process.pid, port, requests, clients, limit_s), **_memory_mb(process.pid)})
        finally:
            process.terminate()
            process.wait(timeout=60)
    return rows


def _in_process(model_dir: Path, num_requests: int, limit_s: float,
                max_wait_s: float) -> tuple[list[dict], dict, list[dict], list[dict]]:
    """(library and batcher rows, facts of the run, requests, warm-up requests); the generator is freed on return,
    so that one copy of a 10M catalogue is in memory at a time (the server loads its own)."""
    generator = CandidateGenerator.from_run(model_dir)
    requests = _requests(generator, num_requests, seed=0)
    warm = _requests(generator, max(10, num_requests // 10), seed=1)
    facts = {"items": len(generator.index), "users": len(generator.histories), "factory": generator.index.factory,
             "search_params": generator.index.search_params, "k": K, "batch_max_wait_ms": max_wait_s * 1000}
    _load(_library(generator), warm, 1, limit_s)
    rows = [{"name": "library_1_client", **_load(_library(generator), requests, 1, limit_s)}]
    batcher = MicroBatcher(lambda: generator, max_wait_s=max_wait_s)
    rows.append({"name": f"batcher_{CLIENTS}_clients", **_load(_batched(batcher), requests, CLIENTS, limit_s)})
    batcher.close()
    return rows, facts, requests, warm


def measure(count: int, root: Path, catalogue_dir: Path | None, smoke: bool, unbatched_max: int,
            max_wait_s: float, workers: Sequence[int] = (1,)) -> list[dict]:
    """Every row for a catalogue of ``count`` items (module docstring)."""
    start = time.perf_counter()
    model_dir = root / f"model-{count}"
    write_run(model_dir / "run", count, catalogue_dir, smoke)
    point_link(model_dir / "latest", "run")
    prepared_s = round(time.perf_counter() - start, 1)
    num_requests, limit_s = (60, 5.0) if smoke else (3000, 30.0)
    rows, facts, requests, warm = _in_process(model_dir, num_requests, limit_s, max_wait_s)
    gc.collect()
    rows += _http_rows(model_dir, root / "serve.log", requests, warm, limit_s, count <= unbatched_max, max_wait_s,
                       workers)
    reference = rows[0]
    for row in rows:
        row.update({**facts, "prepare_s": prepared_s,
                    "p50_vs_library": round(row["p50_ms"] / reference["p50_ms"], 2),
                    "qps_vs_library": round(row["qps"] / reference["qps"], 2)})
        if row["name"] == "http_1_client" and count >= 10_000_000:
            row["meets_target"] = bool(row["p99_ms"] < TARGET_P99_MS and row["errors"] == 0)
        if row["name"].startswith(f"http_{CLIENTS}_clients") and "unbatched" not in row["name"] and count == 1_000_000:
            row["meets_target"] = bool(row["qps"] >= TARGET_QPS and row["errors"] == 0)
    return rows


def run(smoke: bool, sizes: Sequence[int] | None = None, catalogue_dir: Path | None = None,
        unbatched_max: int = 1_000_000, max_wait_s: float = 0.0, workers: Sequence[int] = (1, 2)) -> list[dict]:
    sizes = sizes or ((20_000,) if smoke else (1_000_000, 10_000_000))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for count in sizes:
            rows += measure(count, Path(tmp), catalogue_dir, smoke, unbatched_max, max_wait_s, workers)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="20k items (Flat), a few seconds of requests")
    parser.add_argument("--sizes", type=lambda text: [int(n) for n in text.split(",")], default=None,
                        help="catalogue sizes, comma-separated (default 1000000,10000000)")
    parser.add_argument("--catalogue_dir", type=Path, default=None,
                        help="reuse items-<size>/ and index-<size>/ kept by bench_index --keep_dir")
    parser.add_argument("--unbatched_max", type=int, default=1_000_000,
                        help="largest size also served without micro-batching (a reference)")
    parser.add_argument("--max_wait_ms", type=float, default=0.0,
                        help="the micro-batcher's bounded wait, in process and in the server (--batch_max_wait_ms)")
    parser.add_argument("--workers", type=lambda text: [int(n) for n in text.split(",")], default=[1, 2],
                        help="server process counts to measure over HTTP, comma-separated (default 1,2)")
    add_record_flag(parser)
    args = parser.parse_args()
    rows = run(args.smoke, args.sizes, args.catalogue_dir, args.unbatched_max, args.max_wait_ms / 1000, args.workers)
    for row in rows:
        print(json.dumps(row))
    if should_record(args):
        record("serving", rows, "python -m benchmarks.bench_serving " + " ".join(sys.argv[1:]))
