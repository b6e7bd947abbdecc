"""The model directory ``<output_dir>/<model>/``: runs, the published ``latest`` links, retention and locks.

Links are relative symbolic links to run directories, switched atomically (``artifacts.point_link``); readers such
as the server resolve them once per load. One per lineage (``identity.lineage_of``: the runs of one data source):

* ``lineages/<lineage>/latest`` -> ``../../<run>``: the lineage's published run, the regression reference of its next
  run and the source of its warm start. Serve or read it as ``<model>/lineages/<lineage>`` (or ``.../latest``).
* ``latest`` -> ``<run>``: the production run, what the server, ``recommend`` and ``evaluate`` read by default. It
  belongs to the lineage of the run it names (the first lineage published claims it) and moves only with a run of
  that lineage, so a run on other data never replaces production; it publishes to its own lineage's link only.
  A model directory published before lineages existed keeps working: the lineage of ``latest``'s run is read from
  its ``manifest.json``, else computed from its ``config.json``.

Two kinds of lock, both ``fcntl.flock`` on files that the OS releases when the process dies (so a ``kill -9`` never
leaves a stale lock):

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
from retrieval.errors import LockedError
from retrieval.jobs import identity
from retrieval.locations import LATEST, LINEAGES

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

    def lineage_dir(self, lineage: str) -> Path:
        """Where lineage ``lineage``'s ``latest`` link lives (a directory the server and CLIs accept as a run)."""
        return self.root / LINEAGES / lineage

    def latest_run_id(self, lineage: Optional[str] = None) -> Optional[str]:
        """The run ``latest`` names (production), or lineage ``lineage``'s published run; None if there is none."""
        link = self.root / LATEST if lineage is None else self.lineage_dir(lineage) / LATEST
        if not link.is_symlink():
            return None
        return Path(os.readlink(link)).name

    def latest(self, lineage: Optional[str] = None) -> Optional[artifacts.RunPaths]:
        run_id = self.latest_run_id(lineage)
        return self.run_paths(run_id) if run_id else None

    def lineage_of_run(self, run_id: str) -> Optional[str]:
        """The lineage a run recorded in its manifest, else the one its ``config.json`` gives (runs from before
        lineages); None if it has neither."""
        paths = self.run_paths(run_id)
        manifest = artifacts.read_json(paths.manifest) if paths.manifest.is_file() else {}
        if (manifest.get("lineage") or {}).get("name"):
            return manifest["lineage"]["name"]
        return identity.lineage_of(artifacts.read_json(paths.config)).name if paths.config.is_file() else None

    def production_lineage(self) -> Optional[str]:
        """The lineage that ``latest`` belongs to (None: nothing published yet)."""
        run_id = self.latest_run_id()
        return self.lineage_of_run(run_id) if run_id else None

    def published(self, lineage: str) -> Optional[artifacts.RunPaths]:
        """Lineage ``lineage``'s published run: its link, else ``latest`` when that belongs to the lineage (a model
        directory published before lineages); None when the lineage has published nothing."""
        run = self.latest(lineage)
        if run is None and self.production_lineage() == lineage:
            run = self.latest()
        return run

    def publish(self, run_id: str, lineage: str) -> bool:
        """Points lineage ``lineage``'s link at ``run_id``, and ``latest`` too when ``lineage`` is production's (or
        nothing is published yet); returns whether ``latest`` moved. Call under ``publish_lock``."""
        if not (self.root / run_id).is_dir():
            raise FileNotFoundError(self.root / run_id)
        production = self.production_lineage()
        link_dir = self.lineage_dir(lineage)
        link_dir.mkdir(parents=True, exist_ok=True)
        artifacts.point_link(link_dir / LATEST, os.path.join("..", "..", run_id))
        logging.info("published %s -> %s", link_dir / LATEST, run_id)
        if production not in (None, lineage):
            logging.warning("%s stays on %s (lineage %s): run %s is of lineage %s; serve it from %s",
                            self.root / LATEST, self.latest_run_id(), production, run_id, lineage, link_dir)
            return False
        artifacts.point_link(self.root / LATEST, run_id)
        logging.info("published %s -> %s", self.root / LATEST, run_id)
        return True

    def published_runs(self) -> set[str]:
        """Every run a link names: ``latest`` and each lineage's."""
        lineages = self.root / LINEAGES
        names = [p.name for p in lineages.iterdir() if p.is_dir()] if lineages.is_dir() else []
        return {run for run in [self.latest_run_id()] + [self.latest_run_id(n) for n in names] if run}

    def finished_runs(self) -> List[str]:
        """Run ids whose gate has decided (published or refused), oldest first."""
        runs = [p for p in self.root.iterdir() if p.is_dir() and not p.is_symlink() and (p / COMPLETE_MARKER).exists()]
        return [p.name for p in sorted(runs, key=lambda p: (p / COMPLETE_MARKER).stat().st_mtime)]

    def _manifest(self, run_id: str) -> dict:
        path = self.run_paths(run_id).manifest
        try:
            return artifacts.read_json(path) if path.is_file() else {}
        except ValueError:  # a damaged manifest names no run
            return {}

    def trained_run(self, run_id: str) -> str:
        """The run that trained ``run_id``'s towers: itself, or for a catalogue refresh the run its manifest names
        (``trained_run``; refreshes written before that field: the first run of its ``refreshed_from`` chain)."""
        seen = {run_id}
        while True:
            manifest = self._manifest(run_id)
            parent = manifest.get("trained_run") or manifest.get("refreshed_from")
            if not parent or parent in seen:
                return run_id
            seen.add(parent)
            run_id = parent

    def dependencies(self, run_id: str) -> set[str]:
        """The runs ``run_id`` was made from: for a catalogue refresh, the run it was refreshed from and the run that
        trained the towers it embeds with (their report, checkpoints and training record live there only)."""
        parent = self._manifest(run_id).get("refreshed_from")
        return {parent, self.trained_run(run_id)} - {run_id} if parent else set()

    def retain(self, keep_last: int) -> List[str]:
        """Deletes finished runs beyond the newest ``keep_last``; never a published run (of any lineage), an
        unfinished one, or a run that one of those depends on (:meth:`dependencies`: what a catalogue refresh
        embeds from)."""
        if keep_last <= 0:
            return []
        finished = self.finished_runs()
        unfinished = [p.name for p in self.root.iterdir() if p.is_dir() and not p.is_symlink() and
                      not p.name.startswith(".") and p.name != LINEAGES and p.name not in finished]
        kept = self.published_runs() | set(unfinished)
        kept |= set().union(*(self.dependencies(run) for run in kept))
        removable = [r for r in finished[:-keep_last] if r not in kept]
        for run_id in removable:
            doomed = self.root / f".{run_id}.deleting"
            os.rename(self.root / run_id, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            logging.info("retention: removed run %s", run_id)
        return removable
