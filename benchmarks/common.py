"""Helpers shared by the benchmarks: summary statistics of repeated measurements and the peak memory of a process."""

from __future__ import annotations

import resource
import statistics
import sys
from typing import Sequence


def spread(values: Sequence[float]) -> dict[str, float]:
    """``{"median", "min", "max"}`` of repeated measurements (the median resists one disturbed repeat on a shared
    machine; min and max show how much the repeats disagree)."""
    if not values:
        raise ValueError("spread of no values")
    return {"median": float(statistics.median(values)), "min": float(min(values)), "max": float(max(values))}


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (``ru_maxrss``: KiB on Linux, bytes on macOS). Run
    each measured side in its own process so that one side's peak does not hide the other's."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024
