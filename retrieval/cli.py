"""Shared behaviour of the absl entry points in ``pipelines/``: exit codes and one-line user errors.

Exit codes (documented in the README, stable for schedulers):

==== ===========================================================================
0    success
1    unexpected failure (a bug or an environment problem; traceback printed)
2    bad input or configuration (``InputError``; one line, no traceback)
3    the quality gate refused to publish (``GateError``); ``latest`` untouched
4    another run holds the lock of this model directory
==== ===========================================================================
"""

from __future__ import annotations

import sys
from typing import Callable, Sequence

from absl import app, logging

from retrieval.errors import GateError, InputError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_INPUT_ERROR = 2
EXIT_GATE_REFUSED = 3
EXIT_LOCKED = 4


class LockedError(RuntimeError):
    """Another process holds the lock of the directory this run wants to write."""


def run(main: Callable[[Sequence[str]], None]) -> None:
    """``absl.app.run`` with user errors mapped to one log line and a documented exit code."""

    def guarded(argv: Sequence[str]) -> None:
        try:
            main(argv)
        except InputError as e:
            logging.error("input error: %s", e)
            print(f"error: {e}", file=sys.stderr)
            sys.exit(EXIT_INPUT_ERROR)
        except GateError as e:
            logging.error("quality gate: %s", e)
            print(f"quality gate refused to publish: {e}", file=sys.stderr)
            sys.exit(EXIT_GATE_REFUSED)
        except LockedError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(EXIT_LOCKED)

    app.run(guarded)
