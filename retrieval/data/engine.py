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
        return self.client.gather(self.client.map(fn, list(items), pure=False))


@contextlib.contextmanager
def open_engine(name: str, address: str = "", workers: int = 2, processes: bool = True) -> Iterator[Engine]:
    """The engine ``name`` (see the module docstring); a local cluster started here is closed on exit."""
    if name == "embedded":
        yield Embedded()
        return
    if name != "dask":
        raise InputError(f"unknown engine {name!r}; expected one of {ENGINES}", field="data.engine")
    from dask.distributed import Client, LocalCluster

    if address:
        with Client(address) as client:
            logging.info("data preparation on the Dask cluster at %s", address)
            yield DaskEngine(client)
        return
    network = {"host": "127.0.0.1"} if processes else {}  # threads in this process talk in-process, no sockets
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes, dashboard_address=None,
                      **network) as cluster, Client(cluster) as client:
        logging.info("data preparation on a local Dask cluster of %d workers (%s)", workers, cluster.scheduler_address)
        yield DaskEngine(client)
