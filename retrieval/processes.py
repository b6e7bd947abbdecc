"""Child processes that do not outlive what started them: the scheduled job, an alert command, serving workers.

Two mechanisms, both Linux's and both needed:

* :func:`die_with_parent` (``prctl(PR_SET_PDEATHSIG)``) in the child: the kernel sends it a signal when the process
  that started it dies, even by ``kill -9``, which runs no handler of the parent's;
* :func:`stop_group` from the parent: a child started in its own session (``start_new_session=True``) leads a
  process group, so its own children (a shell's commands, a job's workers) are signalled with it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from typing import Optional

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Asks the kernel to send ``sig`` to this process when its parent dies (a no-op where ``prctl`` is missing).
    The parent may already be gone when this runs (it died between fork and here): then exits at once."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:
        os._exit(128 + int(sig))


def stop_group(process: subprocess.Popen, grace_s: float, sig: int = signal.SIGTERM) -> Optional[int]:
    """Sends ``sig`` to the process group that ``process`` leads, waits up to ``grace_s`` for ``process`` to exit,
    then kills the whole group; returns its exit status (None if it could not be reaped)."""
    signal_group(process.pid, sig)
    try:
        return process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    signal_group(process.pid, signal.SIGKILL)
    try:
        return process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        return None


def signal_group(pid: int, sig: int) -> None:
    """Sends ``sig`` to the process group that ``pid`` leads (nothing if the group is gone)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
