"""The peak memory of this process, as the stage markers (``retrieval.jobs.stages``) and the benchmarks report it."""

from __future__ import annotations

import ctypes
import gc
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


def current_rss_mb() -> float:
    """Resident set size of this process now, in MiB (``VmRSS`` of ``/proc/self/status``; on other systems the peak,
    :func:`peak_rss_mb`). What a long-running server's growth is measured with."""
    try:
        with open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith("VmRSS:")).split()[1]) / 1024
    except (OSError, StopIteration):
        return peak_rss_mb()


def freeze_live_objects() -> None:
    """Collects garbage, then moves every object alive now to the permanent generation (``gc.freeze``), so that later
    full collections (:func:`release_freed`) scan only objects created since. A server calls it once before loading
    its first run: the modules it has imported (TensorFlow's alone are hundreds of thousands of objects) are never
    garbage, and scanning them made each hot reload's collection ~0.2 s of held interpreter lock (a reload of a small
    run: 0.38 -> 0.09 s)."""
    gc.collect()
    gc.freeze()


def release_freed() -> None:
    """Returns memory that this process has freed to the OS: a garbage collection, Arrow's pool's unused memory,
    and the C heap's free pages (glibc ``malloc_trim``). Freed memory otherwise stays resident in the allocators'
    arenas: a server that reloads a run every few minutes grew by 1-3 MB per reload without it."""
    gc.collect()
    try:
        import pyarrow

        pyarrow.default_memory_pool().release_unused()
    except ImportError:
        pass
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl): nothing to trim
            pass
