"""Helpers shared by the benchmarks: summary statistics of repeated measurements (peak memory: retrieval.memory)."""

from __future__ import annotations

import statistics
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
