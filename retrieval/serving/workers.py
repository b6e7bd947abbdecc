"""Running the HTTP server: one process, or several worker processes sharing one listening socket.

One server process answers requests on one core: the HTTP stack (uvicorn, FastAPI, pydantic) and the request's
Python run under one interpreter lock, so a second core only helps the micro-batcher's TensorFlow and FAISS calls.
``serve(settings, workers=N)`` scales across cores the way gunicorn and ``uvicorn --workers`` do: the supervisor
binds the socket, starts N worker processes (spawned, so nothing of TensorFlow is forked) that all accept on it (the
kernel hands each new connection to one of them), and restarts a worker that dies. Each worker is a whole server:
it loads the published run itself, runs the canary, follows ``latest`` with its own watcher and reloads on its own,
so a reload that fails (or a worker that crashes) in one leaves the others serving. Workers may serve different
runs for the few seconds between their polls after ``latest`` moves; every answer names its ``model_version``.

Memory: the FAISS index is memory-mapped (``mmap_index``), so N workers share one copy of it in the page cache;
each worker holds its own user tower, id map, item vectors (for ``/v1/similar``) and stored histories.

Metrics: the supervisor points ``PROMETHEUS_MULTIPROC_DIR`` at a temporary directory, so ``/metrics`` of any worker
reports every worker's requests (``retrieval.serving.metrics``).

Startup: ``serve`` returns (or raises) only when the server stops; a first run that fails to load or fails its
canary raises ``CanaryError`` (an ``InputError``: exit 2), from the supervisor when any worker reports it.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import queue
import signal
import socket
import tempfile
import threading
import time
from typing import Optional

import uvicorn
from absl import logging
from prometheus_client import multiprocess

from retrieval import processes
from retrieval.errors import InputError
from retrieval.serving.app import create_app
from retrieval.serving.canary import Canary, CanaryError
from retrieval.serving.generator import CandidateGenerator
from retrieval.serving.metrics import MULTIPROC_ENV
from retrieval.serving.reload import GeneratorHolder
from retrieval.serving.server import uvicorn_config
from retrieval.serving.settings import ServeSettings

STARTUP_TIMEOUT_S = 900.0  # loading a 10M-item run and its canary
RESTART_DELAY_S = 5.0
STOP_TIMEOUT_S = 30.0


def load_holder(settings: ServeSettings) -> GeneratorHolder:
    """The hot-reload holder of ``settings.run_dir``, its first run loaded and through the canary."""
    return GeneratorHolder(settings.run_dir,
                           loader=functools.partial(CandidateGenerator.from_run, mmap_index=settings.mmap_index),
                           canary=Canary(num_users=settings.canary_users, recall_floor=settings.canary_recall_floor))


def _run_server(settings: ServeSettings, holder: GeneratorHolder, sockets: Optional[list] = None) -> None:
    """Serves ``holder`` until uvicorn stops (a signal), then closes the batcher and the watcher."""
    holder.start(settings.reload_interval_s)
    app = None
    try:
        app = create_app(holder, settings.limits, settings.faiss_threads, settings.batch_max_size,
                         settings.batch_max_wait_s)
        config = uvicorn_config(app, settings.host, settings.port, settings.log_level, settings.read_timeout_s)
        uvicorn.Server(config).run(sockets=sockets)
    finally:
        if app is not None and app.state.batcher is not None:
            app.state.batcher.close()
        holder.stop()


def _worker(settings: ServeSettings, sock: socket.socket, ready, verbosity: int) -> None:
    """A worker process: loads the run, reports ``("ready" | "error", pid, message)``, serves on ``sock``. It stops
    (SIGTERM: uvicorn's graceful shutdown) when its supervisor dies, even by ``kill -9``: a restarted server would
    otherwise find the port taken by orphans."""
    processes.die_with_parent(signal.SIGTERM)
    logging.set_verbosity(verbosity)
    try:
        holder = load_holder(settings)
    except InputError as e:
        ready.put(("error", os.getpid(), str(e)))
        raise SystemExit(2) from None
    ready.put(("ready", os.getpid(), holder.current.version))
    _run_server(settings, holder, [sock])


class _Supervisor:
    """Starts, watches and stops the worker processes of ``serve``."""

    def __init__(self, settings: ServeSettings, sock: socket.socket, workers: int):
        self.settings, self.sock, self.workers = settings, sock, workers
        self.context = multiprocessing.get_context("spawn")
        self.ready = self.context.Queue()
        self.processes: list = []

    def spawn(self):
        process = self.context.Process(target=_worker, name="retrieval-serve-worker", daemon=False,
                                       args=(self.settings, self.sock, self.ready, logging.get_verbosity()))
        process.start()
        return process

    def start(self, stop: threading.Event) -> None:
        """Starts every worker and waits until each has loaded the run (or ``stop`` is set); the first error stops
        them all."""
        self.processes = [self.spawn() for _ in range(self.workers)]
        waiting, deadline = {p.pid for p in self.processes}, time.monotonic() + STARTUP_TIMEOUT_S
        while waiting and not stop.is_set():
            try:
                kind, pid, message = self.ready.get(timeout=1.0)
            except queue.Empty:
                dead = [p for p in self.processes if p.pid in waiting and not p.is_alive()]
                if dead or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"worker {dead[0].pid} exited with code {dead[0].exitcode} while starting"
                                       if dead else "the workers did not start in time") from None
                continue
            if kind == "error":
                self.stop()
                raise CanaryError(message)
            waiting.discard(pid)
            logging.info("worker %d serving version %s", pid, message)

    def watch(self, stop: threading.Event) -> None:
        """Restarts workers that exit (after ``RESTART_DELAY_S``) until ``stop`` is set."""
        while not stop.wait(1.0):
            for i, process in enumerate(self.processes):
                if process.is_alive():
                    continue
                logging.warning("worker %d exited with code %s; starting another", process.pid, process.exitcode)
                multiprocess.mark_process_dead(process.pid)
                if stop.wait(RESTART_DELAY_S):
                    return
                self.processes[i] = self.spawn()
            self._drain_ready()

    def _drain_ready(self) -> None:
        while True:
            try:
                kind, pid, message = self.ready.get_nowait()
            except queue.Empty:
                return
            log = logging.info if kind == "ready" else logging.warning
            log("restarted worker %d: %s %s", pid, kind, message)

    def stop(self) -> None:
        """SIGTERM to every worker (uvicorn finishes requests in flight), SIGKILL after ``STOP_TIMEOUT_S``."""
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()


def bind(host: str, port: int) -> socket.socket:
    """A bound TCP socket that spawned workers can inherit (as uvicorn binds for ``--workers``); the workers listen
    on it once they have loaded the run."""
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and without it Nagle's
    # algorithm meets the client's delayed ACK (40 ms per response measured with keep-alive clients)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InputError(f"cannot bind {host}:{port}: {e.strerror}", field="port") from None
    sock.set_inheritable(True)
    return sock


def serve(settings: ServeSettings, workers: int = 1) -> None:
    """Serves ``settings.run_dir`` over HTTP with ``workers`` processes (module docstring) until SIGINT or SIGTERM."""
    if workers < 1:
        raise InputError(f"need at least one worker, got {workers}", field="workers")
    if workers == 1:
        holder = load_holder(settings)
        sock = bind(settings.host, settings.port)  # bound here, so the line below names the port --port=0 got
        logging.info("serving %s (version %s) on http://%s:%d", holder.target, holder.current.version,
                     settings.host, sock.getsockname()[1])
        _run_server(settings, holder, [sock])
        return

    sock = bind(settings.host, settings.port)
    port = sock.getsockname()[1]
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    with tempfile.TemporaryDirectory(prefix="retrieval-metrics-") as metrics_dir:
        os.environ[MULTIPROC_ENV] = metrics_dir
        supervisor = _Supervisor(dataclasses.replace(settings, port=port), sock, workers)
        try:
            supervisor.start(stop)
            logging.info("serving %s with %d workers on http://%s:%d", settings.run_dir, workers, settings.host, port)
            supervisor.watch(stop)
        finally:
            supervisor.stop()
            os.environ.pop(MULTIPROC_ENV, None)
            for s, handler in previous.items():
                signal.signal(s, handler)
            sock.close()
