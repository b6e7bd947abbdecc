"""What a server is told before it loads anything: request limits, micro-batching and canary defaults, the settings
of one server process, and the run directory it serves.

TensorFlow-free on purpose: ``pipelines.serve`` builds its flags from these defaults and checks ``--run_dir`` with
``resolve_run_dir`` before ``retrieval.serving.workers`` (and with it TensorFlow) is imported, so a wrong path is
refused in about a second.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from retrieval import locations
from retrieval.artifacts import PathLike

DEFAULT_MAX_BATCH = 32  # requests answered by one user-tower call and one index search (retrieval.serving.batcher)
DEFAULT_MAX_WAIT_S = 0.0
READ_TIMEOUT_S = 10.0  # seconds a client has to send a whole request (retrieval.serving.server)
CANARY_USERS = 64  # training users whose queries the canary sends to a new run (retrieval.serving.canary)
CANARY_RECALL_FLOOR = 0.9  # recall against exact search a new run's index must reach on them


@dataclasses.dataclass(frozen=True)
class Limits:
    """Request limits (all enforced with a 4xx)."""

    max_k: int = 1000
    max_history: int = 1000
    max_exclude: int = 1000
    max_id_length: int = 256
    max_body_bytes: int = 256 * 1024


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """Everything a server process needs (picklable: workers receive it)."""

    run_dir: str
    host: str = "127.0.0.1"
    port: int = 8000
    reload_interval_s: float = 5.0
    limits: Limits = Limits()
    faiss_threads: Optional[int] = 1
    batch_max_size: int = DEFAULT_MAX_BATCH
    batch_max_wait_s: float = DEFAULT_MAX_WAIT_S
    read_timeout_s: float = READ_TIMEOUT_S
    canary_users: int = CANARY_USERS
    canary_recall_floor: float = CANARY_RECALL_FLOOR
    mmap_index: bool = True
    log_level: str = "info"


def resolve_run_dir(path: PathLike) -> Path:
    """A run directory, or a model directory whose ``latest`` link names one, resolved to the real run directory
    (``retrieval.locations.resolve_run_dir``, the resolution of every entry point's ``--run_dir``)."""
    return locations.resolve_run_dir(str(path))
