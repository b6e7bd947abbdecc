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
