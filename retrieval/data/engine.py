"""Where the data preparation's tasks run: in this process (``embedded``, the default) or on a Dask cluster.

The streaming prepare stage (:mod:`retrieval.data.streaming`) is a few maps of independent tasks (one per input piece,
then one per shard) with small reductions in between; an engine only has to run ``fn`` over a list of arguments and
return the results in order. ``dask`` submits the tasks through ``dask.distributed`` to the scheduler at
``data.engine_address``, or, when that is empty, to a ``LocalCluster`` of ``data.engine_workers`` worker processes on
127.0.0.1 started for the stage and closed after it. Tasks read and write files by path, so the workers of a real
cluster need the run directory and the log on a shared file system.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator, Protocol, Sequence

from absl import logging

from retrieval.errors import InputError

ENGINES = ("embedded", "dask")


class Engine(Protocol):
    """Runs ``fn`` over ``items`` and returns the results in the order of ``items``."""

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list: ...


class Embedded:
    """Every task in this process, one after the other (memory: one task at a time)."""

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list:
        return [fn(item) for item in items]


class DaskEngine:
    """Tasks on a ``dask.distributed`` cluster; a task's exception is raised here, as the embedded engine would.
    A cluster left without workers for ``timeout_s`` (``data.engine_timeout_s``) ends the stage with an
    ``InputError``: Dask itself would wait for a worker forever."""

    def __init__(self, client, timeout_s: float = 30.0, address: str = ""):
        self.client = client
        self.timeout_s = timeout_s
        self.address = address or "the local cluster"

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list:
        """Tasks whose worker died are rescheduled by Dask (``distributed.scheduler.allowed-failures`` times); a task
        that kills every worker it runs on ends the stage with an ``InputError`` (a rerun starts the stage again)."""
        from distributed import KilledWorker

        futures = self.client.map(fn, list(items), pure=False)
        try:
            self._wait(futures)
            return self.client.gather(futures)
        except KilledWorker as e:
            raise InputError(f"Dask workers died running a prepare task ({e}); check the workers' memory and logs, "
                             "then rerun: finished stages are kept", field="data.engine_address") from None

    def _wait(self, futures: list) -> None:
        """Returns when every future is done (a failed one raises in ``gather``); InputError after ``timeout_s``
        without any worker on the cluster."""
        workerless_since = None
        while not all(future.done() for future in futures):
            time.sleep(0.2)
            if self._workers():
                workerless_since = None
                continue
            workerless_since = workerless_since or time.monotonic()
            if time.monotonic() - workerless_since > self.timeout_s:
                self.client.cancel(futures)
                raise InputError(f"the Dask cluster at {self.address} has had no worker for {self.timeout_s:g} s "
                                 "(data.engine_timeout_s) with prepare tasks waiting; start workers, then rerun: "
                                 "finished stages are kept", field="data.engine_address")

    def _workers(self) -> int:
        return len(self.client.scheduler_info().get("workers", {}))


@contextlib.contextmanager
def open_engine(name: str, address: str = "", workers: int = 2, processes: bool = True,
                timeout_s: float = 30.0) -> Iterator[Engine]:
    """The engine ``name`` (see the module docstring); a local cluster started here is closed on exit. Connecting
    to ``address`` waits at most ``timeout_s`` (``data.engine_timeout_s``): an unreachable, malformed or silent
    address is an ``InputError`` naming ``data.engine_address``, never a hang."""
    if name == "embedded":
        yield Embedded()
        return
    if name != "dask":
        raise InputError(f"unknown engine {name!r}; expected one of {ENGINES}", field="data.engine")
    from dask.distributed import Client, LocalCluster

    if address:
        with _connect(Client, address, timeout_s) as client:
            try:
                client.wait_for_workers(1, timeout=timeout_s)
            except TimeoutError:
                raise InputError(f"the Dask scheduler at {address!r} has no worker (waited {timeout_s:g} s, "
                                 "data.engine_timeout_s); start workers for it", field="data.engine_address") from None
            logging.info("data preparation on the Dask cluster at %s", address)
            yield DaskEngine(client, timeout_s, address)
        return
    network = {"host": "127.0.0.1"} if processes else {}  # threads in this process talk in-process, no sockets
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes, dashboard_address=None,
                      **network) as cluster, Client(cluster) as client:
        logging.info("data preparation on a local Dask cluster of %d workers (%s)", workers, cluster.scheduler_address)
        yield DaskEngine(client, timeout_s)


def _connect(client_type, address: str, timeout_s: float):
    """A ``dask.distributed.Client`` connected to ``address`` within ``timeout_s``, or an ``InputError``.

    The client's own ``timeout`` bounds the TCP connect but not a scheduler that accepts and never answers, so the
    connection is made in a daemon thread and abandoned after ``timeout_s`` (the process then exits with code 2)."""
    import asyncio
    import threading

    def failure(reason: str) -> InputError:
        return InputError(f"cannot reach the Dask scheduler at {address!r} within {timeout_s:g} s ({reason}); check "
                          "the address (tcp://host:port) and that the scheduler runs", field="data.engine_address")

    outcome: dict = {}

    def connect() -> None:
        try:
            outcome["client"] = client_type(address, timeout=f"{timeout_s}s", set_as_default=False)
        except BaseException as e:  # handed to the caller's thread below
            outcome["error"] = e

    thread = threading.Thread(target=connect, name="dask-connect", daemon=True)
    thread.start()
    thread.join(timeout_s + 1.0)
    if "error" in outcome:
        _disarm(outcome["error"], client_type)
    if thread.is_alive():
        raise failure("no answer")
    error = outcome.pop("error", None)
    if isinstance(error, (OSError, TimeoutError, asyncio.TimeoutError, ValueError, TypeError)):
        raise failure(f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    return outcome["client"]


def _disarm(error: BaseException, client_type) -> None:
    """Marks the client whose constructor raised ``error`` as closed: its finaliser would otherwise try to close it
    at exit, waiting twice the timeout and printing a ``TimeoutError`` after the one error line."""
    trace = error.__traceback__
    while trace is not None:
        candidate = trace.tb_frame.f_locals.get("self")
        if isinstance(candidate, client_type):
            candidate.status = "closed"
        trace = trace.tb_next
