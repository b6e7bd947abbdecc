"""Prometheus metrics of the HTTP server (``GET /metrics``, text exposition format, ``prometheus_client``).

Series (all prefixed ``retrieval_``):

* ``http_requests_total{route, method, status}``: answered requests. ``route`` is the API's path, or ``other`` for
  paths the API does not have, and ``method`` one of HTTP's, or ``other`` for a made-up one (so a scan of random
  URLs or methods cannot create unbounded series).
* ``http_request_duration_seconds{route}``: latency histogram, from the request's arrival at the app to its last
  response byte handed to the server (excludes time in the kernel's queues and the 408 of the read deadline, which
  the protocol answers before the app sees a request).
* ``reloads_total{outcome}``: attempts to serve a newly published run, ``swapped`` or ``refused`` (load or canary
  failure; the old run keeps serving).
* ``model_info{version, run_id, run}``: 1 for the run being served (in multiprocess mode, 0 for runs served before
  it: a series cannot leave the shared files).

One server process keeps its series in memory. Several worker processes (``retrieval.serving.workers``) share a
directory named by ``PROMETHEUS_MULTIPROC_DIR`` (set before ``prometheus_client`` is imported; the supervisor does
it), and ``/metrics`` of any worker reports the sum over the workers (counters, histogram) and each live worker's
``model_info`` with a ``pid`` label: prometheus_client's multiprocess mode.
"""

from __future__ import annotations

import os
import time
from typing import Optional

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from retrieval.serving.reload import GeneratorHolder

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
OTHER_ROUTE = "other"
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
OTHER_METHOD = "other"


def multiprocess_dir() -> Optional[str]:
    """The shared directory of multiprocess mode, or None in single-process mode."""
    return os.environ.get(MULTIPROC_ENV) or None


class ServerMetrics:
    """The server's series in a registry of their own (several apps in one process, e.g. tests, do not clash)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, routes: frozenset[str] = frozenset()):
        self.routes = routes
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("retrieval_http_requests", "HTTP requests answered, by route, method and status.",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("retrieval_http_request_duration_seconds", "HTTP request latency in the app.",
                                 ["route"], buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self.reloads = Counter("retrieval_reloads", "Attempts to serve a newly published run, by outcome.",
                               ["outcome"], registry=self.registry)
        self.model = Gauge("retrieval_model_info", "1 for the run being served (version, run id, run directory).",
                           ["version", "run_id", "run"], registry=self.registry, multiprocess_mode="liveall")
        for outcome in ("swapped", "refused"):
            self.reloads.labels(outcome)  # exported at 0 from the start
        self._model_labels: Optional[tuple[str, str, str]] = None

    def route(self, path: str) -> str:
        return path if path in self.routes else OTHER_ROUTE

    def observe(self, path: str, method: str, status: int, seconds: float) -> None:
        route = self.route(path)
        method = method if method in HTTP_METHODS else OTHER_METHOD  # a client's made-up method: one series
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def serving(self, holder: GeneratorHolder) -> None:
        """Sets ``model_info`` to the run ``holder`` serves."""
        status = holder.status()["serving"]
        labels = (str(status["version"]), str(status["run_id"]), str(status["run"]))
        if labels == self._model_labels:
            return
        if self._model_labels is not None:
            if multiprocess_dir() is None:
                self.model.remove(*self._model_labels)  # one series however many runs a server has served
            else:
                self.model.labels(*self._model_labels).set(0)  # a removed series would linger in the shared files
        self.model.labels(*labels).set(1)
        self._model_labels = labels

    def watch(self, holder: GeneratorHolder) -> None:
        """Counts ``holder``'s reload attempts: its ``poll`` (what the watcher thread calls) is wrapped on this
        instance, so any holder is metered without a subclass."""
        self.serving(holder)
        poll = holder.poll

        def metered_poll() -> bool:
            before = holder.status()["last_reload"]
            swapped = poll()
            after = holder.status()["last_reload"]
            if after is not None and after != before:
                self.reloads.labels(after["outcome"]).inc()
                self.serving(holder)
            return swapped

        holder.poll = metered_poll

    def exposition(self) -> bytes:
        """The text format of every series: this process's, or every worker's in multiprocess mode."""
        directory = multiprocess_dir()
        if directory is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=directory)
        return generate_latest(registry)


class RequestMetrics:
    """ASGI middleware timing every HTTP request and counting it by route, method and status (outermost, so that
    the 413 and 415 of the other middleware are counted too)."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500

        async def send_and_record(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            self.metrics.observe(scope["path"], scope["method"], status, time.perf_counter() - start)
