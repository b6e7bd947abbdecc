"""Helpers shared by the benchmarks: summary statistics of repeated measurements and the peak memory of a process."""

from __future__ import annotations

import statistics
from typing import Sequence

from retrieval.memory import peak_rss_mb  # noqa: F401  (re-exported for the benchmarks)


def spread(values: Sequence[float]) -> dict[str, float]:
    """``{"median", "min", "max"}`` of repeated measurements (the median resists one disturbed repeat on a shared
    machine; min and max show how much the repeats disagree)."""
    if not values:
        raise ValueError("spread of no values")
    return {"median": float(statistics.median(values)), "min": float(min(values)), "max": float(max(values))}
