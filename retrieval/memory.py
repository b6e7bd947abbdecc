"""The peak memory of this process, as the stage markers (``retrieval.pipeline.stages``) and the benchmarks report it."""

from __future__ import annotations

import resource
import sys


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB. On Linux ``VmHWM`` of ``/proc/self/status``: the high
    water mark of this process's own address space. ``ru_maxrss`` is not used there because a child started by
    ``subprocess`` keeps the value of the parent it was forked from (a parent that built a 1M-vector index would set
    the floor of every child). Elsewhere ``ru_maxrss`` (KiB, bytes on macOS). Run each measured side in its own
    process so that one side's peak does not hide the other's."""
    try:
        with open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith("VmHWM:")).split()[1]) / 1024
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024
