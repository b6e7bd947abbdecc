"""Quiet start-up: TensorFlow's C++ start-up lines (oneDNN notice, CUDA probing, CPU features) are hidden unless asked
for, so a command's first lines are its own.

TensorFlow writes those lines to file descriptor 2 while its libraries load, before its log level is read, so
``TF_CPP_MIN_LOG_LEVEL`` does not reach them. :func:`install` (run once by ``import retrieval``) therefore, when the
environment does not set ``TF_CPP_MIN_LOG_LEVEL`` itself:

* sets ``TF_CPP_MIN_LOG_LEVEL=3`` (TensorFlow's own C++ log lines after start-up, e.g. the ``cuInit`` error of a
  machine without a GPU; real failures still raise Python exceptions with their message), and
  ``RETRIEVAL_QUIET_TF=1`` so that child processes stay quiet too;
* wraps the first ``import tensorflow``: while it runs, file descriptor 2 goes through a filter that drops C++ log
  lines (``I0000 00:00:...``, ``W...``, ``E...``) and absl's notice before them and passes every other line on at once.

* drops a few Python log records that say nothing to a user of a run: FAISS's loader trying each instruction set
  (``faiss.loader``: ``ModuleNotFoundError(... swigfaiss_avx512_spr ...)`` in every process), TensorFlow's
  ``Sharding callback duration`` and signature-renaming (``unsupported characters``) lines, and what its saver says
  on every export (:data:`NOISY_RECORDS`): TF-Keras's ``Skipping full serialization of TF-Keras layer ... because it
  is not built`` (a warning for each layer called only through a method, such as the content profile or a dropout:
  the SavedModels are ``tf.Module`` signatures read with ``tf.saved_model.load``, never Keras layers, so nothing is
  missing), ``Found untraced functions``, and ``Assets written to`` / ``Writing fingerprint to`` naming the
  temporary directory that is renamed at once.

:func:`verbose` undoes all of it; the pipelines call it for ``--verbosity=1`` or more (``retrieval.cli``). Setting
``TF_CPP_MIN_LOG_LEVEL`` (any value) or ``RETRIEVAL_QUIET_TF=0`` in the environment also keeps everything.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import os
import re
import sys
import threading
from typing import Iterator

QUIET_ENV = "RETRIEVAL_QUIET_TF"
LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
_NOISE = re.compile(rb"[IWE]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\]|WARNING: All log messages before absl::|"
                    rb"To enable the following instructions:")
_JOIN_TIMEOUT_S = 5.0
# logger -> pattern of the messages dropped from it (None: every record below WARNING)
_TF_CHATTER = re.compile(r"Sharding callback duration|.* with unsupported characters which will be renamed|"
                         r"Skipping full serialization of TF-Keras layer|Found untraced functions such as|"
                         r"Assets written to: |Writing fingerprint to ")
NOISY_RECORDS = {"faiss.loader": None, "tensorflow": _TF_CHATTER, "absl": _TF_CHATTER}  # TF logs through both


class _DropNoise(logging.Filter):
    """Drops the records of :data:`NOISY_RECORDS` (never a warning or an error of FAISS's loader)."""

    def __init__(self, pattern):
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        if self.pattern is None:
            return record.levelno >= logging.WARNING
        return not self.pattern.match(record.getMessage())


def _set_log_filters(on: bool) -> None:
    from absl import logging as absl_logging  # noqa: F401  (absl creates its "absl" logger first, of its own class)

    for name, pattern in NOISY_RECORDS.items():
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, _DropNoise)]:
            logger.removeFilter(old)
        if on:
            logger.addFilter(_DropNoise(pattern))


def _forward(read_fd: int, write_fd: int) -> None:
    """Copies lines from ``read_fd`` to ``write_fd`` until end of file, dropping TensorFlow's start-up lines."""
    pending = b""
    while chunk := os.read(read_fd, 65536):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if not _NOISE.match(line):
                os.write(write_fd, line + b"\n")
    if pending and not _NOISE.match(pending):
        os.write(write_fd, pending)
    os.close(read_fd)


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """File descriptor 2 passes through :func:`_forward` inside the block (lines appear as they are written)."""
    sys.stderr.flush()
    saved = os.dup(2)
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    forwarder = threading.Thread(target=_forward, args=(read_fd, saved), name="quiet-stderr", daemon=True)
    forwarder.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last write end closes: the forwarder reads to the end and stops
        forwarder.join(_JOIN_TIMEOUT_S)
        os.close(saved)


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` like the next finders do, then runs its loading inside :func:`filtered_stderr`."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        _remove_finder()  # one import only; also keeps the lookup below from coming back here
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            load = spec.loader.exec_module

            def quiet_load(module):
                with filtered_stderr():
                    load(module)

            spec.loader.exec_module = quiet_load
        return spec


def _remove_finder() -> None:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _QuietTensorFlowImport)]


def install() -> None:
    """Quiet start-up unless the environment asks otherwise (see the module docstring); idempotent."""
    if LEVEL_ENV not in os.environ:
        os.environ[LEVEL_ENV] = "3"
        os.environ.setdefault(QUIET_ENV, "1")
    if os.environ.get(QUIET_ENV) == "1" and "tensorflow" not in sys.modules:
        _remove_finder()
        sys.meta_path.insert(0, _QuietTensorFlowImport())
    _set_log_filters(os.environ.get(QUIET_ENV) == "1")


def verbose() -> None:
    """TensorFlow's start-up and C++ log lines are shown (before TensorFlow loads; afterwards only the level moves),
    and the Python log records of :data:`NOISY_RECORDS` too."""
    _remove_finder()
    _set_log_filters(False)
    if os.environ.get(QUIET_ENV) == "1":
        os.environ[QUIET_ENV] = "0"
        os.environ[LEVEL_ENV] = "0"
