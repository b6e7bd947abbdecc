"""The model directory ``<output_dir>/<model>/``: runs, the published ``latest`` link, retention and locks.

``latest`` is a relative symbolic link to a run directory, switched atomically (``artifacts.point_link``); readers
such as the server resolve it once per load. Two kinds of lock, both ``fcntl.flock`` on files that the OS releases when
the process dies (so a ``kill -9`` never leaves a stale lock):

* a run lock (``<run>/.lock``), held for a whole run, so two processes never write the same run at once;
* the publish lock (``<model>/.publish.lock``), held while the gate reads ``latest``, switches it and prunes old runs,
  so two runs finishing together publish one after the other, each gated against what is live at that moment.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from pathlib import Path
from typing import Iterator, List, Optional

from absl import logging

from retrieval import artifacts
from retrieval.cli import LockedError

LATEST = "latest"
COMPLETE_MARKER = "stages/gate.json"


@contextlib.contextmanager
def file_lock(path: Path, blocking: bool, timeout_s: float = 600.0) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``path``; raises ``LockedError`` if it cannot be had."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not blocking or time.monotonic() > deadline:
                    raise LockedError(f"{path} is held by another process") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ModelDirectory:
    """The runs of one model under ``root`` and the one that is published."""

    def __init__(self, root: os.PathLike):
        self.root = Path(root)

    def run_paths(self, run_id: str) -> artifacts.RunPaths:
        return artifacts.RunPaths(self.root / run_id)

    def run_lock(self, run_id: str):
        return file_lock(self.root / run_id / ".lock", blocking=False)

    def publish_lock(self):
        return file_lock(self.root / ".publish.lock", blocking=True)

    def latest_run_id(self) -> Optional[str]:
        link = self.root / LATEST
        if not link.is_symlink():
            return None
        return os.readlink(link)

    def latest(self) -> Optional[artifacts.RunPaths]:
        run_id = self.latest_run_id()
        return self.run_paths(run_id) if run_id else None

    def publish(self, run_id: str) -> None:
        """Points ``latest`` at ``run_id`` (call under ``publish_lock``)."""
        if not (self.root / run_id).is_dir():
            raise FileNotFoundError(self.root / run_id)
        artifacts.point_link(self.root / LATEST, run_id)
        logging.info("published %s -> %s", self.root / LATEST, run_id)

    def finished_runs(self) -> List[str]:
        """Run ids whose gate has decided (published or refused), oldest first."""
        runs = [p for p in self.root.iterdir() if p.is_dir() and not p.is_symlink() and (p / COMPLETE_MARKER).exists()]
        return [p.name for p in sorted(runs, key=lambda p: (p / COMPLETE_MARKER).stat().st_mtime)]

    def retain(self, keep_last: int) -> List[str]:
        """Deletes finished runs beyond the newest ``keep_last``; never ``latest``'s target or an unfinished run."""
        if keep_last <= 0:
            return []
        latest = self.latest_run_id()
        finished = self.finished_runs()
        removable = [r for r in finished[:-keep_last] if r != latest]
        for run_id in removable:
            doomed = self.root / f".{run_id}.deleting"
            os.rename(self.root / run_id, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            logging.info("retention: removed run %s", run_id)
        return removable
