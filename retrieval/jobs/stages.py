"""Resumable stages of a run.

A stage that finished leaves ``stages/<name>.json`` (its summary, duration and the process's peak RSS so far, which
tells an operator which stage sets the memory a run needs) in the run directory, written
atomically after the stage's own artifacts. Rerunning the same run skips finished stages and so resumes after a crash
at any moment: a stage killed half-way left no marker and runs again (training itself resumes from its last
checkpoint).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Optional

from absl import logging

from retrieval import artifacts
from retrieval.memory import peak_rss_mb


class StageRunner:
    """Runs named stages once per run directory, logging counts and timings."""

    def __init__(self, paths: artifacts.RunPaths):
        self.paths = paths
        self.timings: Dict[str, float] = {}

    def marker(self, name: str):
        return self.paths.stages / f"{name}.json"

    def is_done(self, name: str) -> bool:
        return self.marker(name).exists()

    def summary(self, name: str) -> Optional[Dict[str, Any]]:
        return artifacts.read_json(self.marker(name))["summary"] if self.is_done(name) else None

    def run(self, name: str, fn: Callable[[], Optional[Dict[str, Any]]]) -> Dict[str, Any]:
        """Runs ``fn`` unless the stage already finished; returns the stage's summary either way."""
        if self.is_done(name):
            record = artifacts.read_json(self.marker(name))
            self.timings[name] = record["seconds"]
            logging.info("stage %-9s already done (%.1fs; %s)", name, record["seconds"], self.marker(name))
            return record["summary"]
        logging.info("stage %-9s starting", name)
        start = time.perf_counter()
        summary = fn() or {}
        seconds = time.perf_counter() - start
        peak = round(peak_rss_mb())
        artifacts.write_json(self.marker(name), {"summary": summary, "seconds": round(seconds, 3),
                                                 "peak_rss_mb": peak})
        self.timings[name] = round(seconds, 3)
        logging.info("stage %-9s done in %.1fs (peak RSS so far %d MiB; summary in %s)", name, seconds, peak,
                     self.marker(name))  # the summary itself can be hundreds of characters: it stays in the file
        return summary
