"""Hot reload: follow the published ``latest`` run without a failed request.

``GeneratorHolder.current`` is the one reference requests use. A background thread resolves the watched path
(``<model>/latest`` or a run directory) every few seconds; when it names another run, the new ``CandidateGenerator``
is loaded completely (user tower, index, histories) and only then assigned to ``current`` in one statement, which is
atomic in Python. A request reads ``current`` once and keeps that object to the end, so in-flight requests finish on
the old run and later ones start on the new; the old run is freed when its last request returns. A run that fails to
load is logged and skipped (the server keeps the old one) until ``latest`` moves again.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Optional

from absl import logging

from retrieval.artifacts import PathLike
from retrieval.errors import InputError
from retrieval.serving.generator import CandidateGenerator, resolve_run_dir


class GeneratorHolder:
    """The current ``CandidateGenerator`` of a watched path, swapped atomically when that path's run changes."""

    def __init__(self, source: PathLike, loader: Callable[[Path], CandidateGenerator] = CandidateGenerator.from_run):
        self.source = Path(source)
        self._loader = loader
        self.target = resolve_run_dir(self.source)
        self.current = loader(self.target)
        self.reloads = 0
        self._failed: Optional[Path] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def poll(self) -> bool:
        """Swaps in the run the watched path resolves to now, if it is another one; True when it swapped."""
        try:
            target = resolve_run_dir(self.source)
        except InputError as e:  # e.g. `latest` being replaced by hand, non-atomically: keep serving
            logging.warning("cannot resolve %s: %s", self.source, e)
            return False
        if target in (self.target, self._failed):
            return False
        logging.info("run changed: %s -> %s; loading", self.target, target)
        try:
            generator = self._loader(target)
        except Exception:  # a broken new run must not take the server down; the old run keeps serving
            logging.exception("cannot load %s; still serving %s", target, self.target)
            self._failed = target
            return False
        self.current = generator
        self.target, self._failed = target, None
        self.reloads += 1
        logging.info("now serving %s (version %s)", target, generator.version)
        return True

    def start(self, interval_s: float) -> None:
        """Polls every ``interval_s`` seconds in a daemon thread (no-op if ``interval_s`` <= 0)."""
        if interval_s <= 0 or self._thread is not None:
            return

        def watch() -> None:
            while not self._stop.wait(interval_s):
                self.poll()

        self._thread = threading.Thread(target=watch, name="run-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
