"""Helpers shared by the benchmarks: summary statistics of repeated measurements, timing of training steps (peak
memory: retrieval.memory)."""

from __future__ import annotations

import statistics
import time
from typing import Sequence


def spread(values: Sequence[float]) -> dict[str, float]:
    """``{"median", "min", "max"}`` of repeated measurements (the median resists one disturbed repeat on a shared
    machine; min and max show how much the repeats disagree)."""
    if not values:
        raise ValueError("spread of no values")
    return {"median": float(statistics.median(values)), "min": float(min(values)), "max": float(max(values))}


def marked_step(marks: dict, step: int) -> int:
    """The first step at or after ``step`` in ``marks`` (keyed by training step): a timing callback sees only the
    last step of each execution of ``train.steps_per_execution`` steps."""
    return min(marked for marked in marks if marked >= step)


def timed_logger(stop_at: int):
    """``training.ProgressLogger`` that also notes the wall clock and the process CPU time (all threads: the step,
    the input pipeline) after every execution (``train.steps_per_execution`` steps), in the class attribute
    ``marks`` (``{step: (wall, cpu)}``), and stops training after step ``stop_at``."""
    from retrieval import training

    class TimedLogger(training.ProgressLogger):
        marks: dict[int, tuple[float, float]] = {}

        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            self.marks[self.step] = (time.perf_counter(), time.process_time())
            if self.step >= stop_at:
                self.model.stop_training = True

    return TimedLogger
