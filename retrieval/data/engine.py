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
    """Tasks on a ``dask.distributed`` cluster; a task's exception is raised here, as the embedded engine would."""

    def __init__(self, client):
        self.client = client

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list:
        """Tasks whose worker died are rescheduled by Dask (``distributed.scheduler.allowed-failures`` times); a task
        that kills every worker it runs on ends the stage with an ``InputError`` (a rerun starts the stage again)."""
        from distributed import KilledWorker

        try:
            return self.client.gather(self.client.map(fn, list(items), pure=False))
        except KilledWorker as e:
            raise InputError(f"Dask workers died running a prepare task ({e}); check the workers' memory and logs, "
                             "then rerun: finished stages are kept", field="data.engine_address") from None


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
            logging.info("data preparation on the Dask cluster at %s", address)
            yield DaskEngine(client)
        return
    network = {"host": "127.0.0.1"} if processes else {}  # threads in this process talk in-process, no sockets
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes, dashboard_address=None,
                      **network) as cluster, Client(cluster) as client:
        logging.info("data preparation on a local Dask cluster of %d workers (%s)", workers, cluster.scheduler_address)
        yield DaskEngine(client)


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
    if thread.is_alive():
        raise failure("no answer")
    error = outcome.get("error")
    if isinstance(error, (OSError, TimeoutError, asyncio.TimeoutError, ValueError, TypeError)):
        raise failure(f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    return outcome["client"]
