"""Hot reload: follow the published ``latest`` run, serving only runs that passed a canary.

``GeneratorHolder.current`` is the one reference requests use. A background thread resolves the watched path
(``<model>/latest`` or a run directory) every few seconds; when it names another run, the new ``CandidateGenerator``
is loaded completely (user tower, index, histories), put through the ``Canary`` (real queries through the user tower
and the index, see ``canary``), and only if both succeed assigned to ``current`` in one statement, which is atomic in
Python. A request reads ``current`` once and keeps that object to the end, so in-flight requests finish on the old run
and later ones start on the new; the old run is freed when its last request returns.

A run that fails to load or fails the canary is refused: the old run keeps serving, the refusal (run name, time,
one-line reason) is kept in ``status()`` (served over HTTP as ``/v1/status`` and ``/healthz``, which says
``degraded`` while ``latest`` names a refused run), and the run is not tried again until ``latest`` moves. At startup
a refused run raises ``CanaryError`` instead (nothing to fall back to). Reported paths are relative to the model
directory: the HTTP API never shows where the server's files are.

Memory stays flat over reloads (``tests/test_serving_reload_memory.py``: RSS over 100 reloads within 20 MB of RSS
after a warm-up). No cache holds an old generator, but a loaded run (its SavedModel's objects) lives in reference
cycles, which only Python's cyclic collector frees, and its full collections are rare in a server: old runs piled up,
0.45 MB per reload of a 400-item run, 1-3 MB of real ones. So the poll after a swap, when the requests that still
held the old run have finished, collects them and hands the freed memory back to the OS (``memory.release_freed``;
about 0.1-0.3 s of the watcher thread once per reload). Collecting the old run also destroys its user tower's lookup
tables, which TensorFlow's loader would otherwise keep for the life of the process (``export.destroy_tables_with``:
0.45 MB per reload of the bundled two-tower run; ``benchmarks/bench_reload_memory.py`` measures a server over
reloads of new runs).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from pathlib import Path
from typing import Callable, Optional

from absl import logging

from retrieval import memory
from retrieval.artifacts import PathLike
from retrieval.errors import InputError
from retrieval.periodic import Periodic
from retrieval.serving.canary import Canary, CanaryError, one_line
from retrieval.serving.generator import CandidateGenerator, resolve_run_dir


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclasses.dataclass(frozen=True)
class Served:
    """The run being served: its generator, run directory, when it was swapped in and its canary's measurements."""

    generator: CandidateGenerator
    run_dir: Path
    since: str
    canary: Optional[dict]


@dataclasses.dataclass(frozen=True)
class ReloadAttempt:
    """One attempt to serve a newly published run: ``outcome`` is ``swapped`` or ``refused`` (with ``error``)."""

    run: str
    at: str
    outcome: str
    error: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class _State:
    """Everything requests read, replaced as a whole (one writer: the watcher), so a reader never sees a mix."""

    served: Served
    reloads: int = 0
    last_attempt: Optional[ReloadAttempt] = None
    refused: Optional[Path] = None  # the run `latest` names, when it was refused


class GeneratorHolder:
    """The current ``CandidateGenerator`` of a watched path, swapped atomically when that path names another run
    that loads and passes ``canary`` (None skips the canary)."""

    def __init__(self, source: PathLike, loader: Callable[[Path], CandidateGenerator] = CandidateGenerator.from_run,
                 canary: Optional[Callable[[CandidateGenerator], dict]] = Canary()):
        self.source = Path(source).absolute()
        self._loader, self._canary = loader, canary
        self._watcher: Optional[Periodic] = None
        self._release_pending = False  # an old run was swapped out: free its memory again at the next poll
        target = resolve_run_dir(self.source)
        memory.freeze_live_objects()
        model_dir = self.source if (self.source / "latest").exists() else self.source.parent
        self._bases = sorted({str(model_dir), os.path.realpath(model_dir), str(target.parent)}, key=len, reverse=True)
        try:
            self._state = _State(self._load(target))
        except CanaryError as e:
            raise CanaryError(f"run {target} refused: {e}") from None

    current = property(lambda self: self._state.served.generator, doc="the generator requests use")
    target = property(lambda self: self._state.served.run_dir, doc="the served run directory")
    reloads = property(lambda self: self._state.reloads, doc="successful swaps since startup")

    def _load(self, target: Path) -> Served:
        """Loads and checks ``target``; any failure becomes a one-line ``CanaryError`` with relative paths."""
        try:
            generator = self._loader(target)
            report = self._canary(generator) if self._canary is not None else None
        except CanaryError as e:
            raise CanaryError(self._relative(e.message)) from None
        except Exception as e:  # a broken run may fail to load in any way; it must not take the server down
            logging.debug("loading %s failed", target, exc_info=True)
            raise CanaryError(f"cannot load the run: {self._relative(one_line(e))}") from None
        return Served(generator, target, _now(), report)

    def _relative(self, text: str) -> str:
        """``text`` with the model directory's absolute path removed from every path in it."""
        for base in self._bases:
            text = text.replace(base + os.sep, "")
        return text

    def poll(self) -> bool:
        """Swaps in the run the watched path resolves to now, if it is another one and passes; True when it swapped."""
        if self._release_pending:
            self._release_pending = False
            memory.release_freed()
        state = self._state
        try:
            target = resolve_run_dir(self.source)
        except InputError as e:  # e.g. `latest` being replaced by hand, non-atomically: keep serving
            logging.warning("cannot resolve %s: %s", self.source, e)
            return False
        if target == state.served.run_dir:
            if state.refused is not None:  # `latest` rolled back to the served run
                self._state = dataclasses.replace(state, refused=None)
            return False
        if target == state.refused:
            return False
        logging.info("run changed: %s -> %s; loading and running the canary", state.served.run_dir, target)
        try:
            served = self._load(target)
        except CanaryError as e:
            logging.warning("refused run %s: %s; still serving %s", target, e, state.served.run_dir)
            self._state = dataclasses.replace(state, refused=target,
                                              last_attempt=ReloadAttempt(target.name, _now(), "refused", str(e)))
            return False
        self._state = _State(served, state.reloads + 1, ReloadAttempt(target.name, served.since, "swapped"))
        logging.info("now serving %s (version %s)", target, served.generator.version)
        self._release_pending = True
        return True

    def status(self) -> dict:
        """What ``/v1/status`` reports: ``status`` (``ok``, or ``degraded`` while ``latest`` names a refused run),
        the served run (name, version, run id, since, canary), successful reloads and the last reload attempt."""
        state = self._state
        served = state.served
        return {"status": "ok" if state.refused is None else "degraded",
                "serving": {"run": served.run_dir.name, "version": served.generator.version,
                            "run_id": served.generator.run_id, "since": served.since, "canary": served.canary},
                "reloads": state.reloads,
                "last_reload": None if state.last_attempt is None else dataclasses.asdict(state.last_attempt)}

    def start(self, interval_s: float) -> None:
        """Polls every ``interval_s`` seconds in a daemon thread (no-op if ``interval_s`` <= 0)."""
        if interval_s <= 0 or self._watcher is not None:
            return
        self._watcher = Periodic(self._watch, interval_s, "run-watcher")
        self._watcher.start()

    def _watch(self) -> bool:
        self.poll()
        return False  # the watcher ends only with stop()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
