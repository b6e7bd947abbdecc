"""User-facing errors.

``InputError`` is the one exception type for mistakes in a user's data or configuration. It names the file, the
column, the row (0-based data row, header excluded) or the config field, so the absl entry points can print it on one
line and exit non-zero without a traceback. Programming errors still raise ordinary exceptions.

Exit codes of the entry points (``retrieval.cli.run``; documented in the README, stable for schedulers):

==== ===========================================================================
0    success
1    unexpected failure (a bug or an environment problem; traceback printed)
2    bad input or configuration (``InputError``; one line, no traceback)
3    the quality gate refused to publish (``GateError``); ``latest`` untouched
4    another run holds the lock of this model directory (``LockedError``)
==== ===========================================================================

The ground floor of the package: it imports nothing of it, so every module may raise these.
"""

from __future__ import annotations

from typing import Any, Optional

EXIT_OK = 0
EXIT_INPUT_ERROR = 2
EXIT_GATE_REFUSED = 3
EXIT_LOCKED = 4
# Said with exit 2 when a parameter-server task went away (by the chief and by a worker that outlives it).
LOST_TASK_ADVICE = "the run keeps its last checkpoint: restart the lost task and rerun the same run id to resume"


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters with the full length said, so that a message quoting a
    user's (possibly huge) input stays one readable line."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(str(value))} characters)"


def shown_list(values: list, limit: int = 10) -> str:
    """The first ``limit`` items of a list (each :func:`shown`), with how many more there are."""
    head = ", ".join(shown(v, 40) for v in values[:limit])
    return f"[{head}{f', ... {len(values) - limit} more' if len(values) > limit else ''}]"


class InputError(ValueError):
    """A problem with user input, located as precisely as possible."""

    def __init__(self, message: str, *, path: Optional[str] = None, column: Optional[str] = None,
                 row: Optional[Any] = None, field: Optional[str] = None):
        self.message = message
        self.path = path
        self.column = column
        self.row = row
        self.field = field
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.path is not None:
            where.append(f"file {self.path}")
        if self.field is not None:
            where.append(f"field {self.field!r}")
        if self.column is not None:
            where.append(f"column {self.column!r}")
        if self.row is not None:
            where.append(f"row {self.row} (0-based, header excluded)")
        return f"{', '.join(where)}: {self.message}" if where else self.message


class GateError(RuntimeError):
    """The quality gate refused to publish a run (metrics below a floor or regressed)."""


class LockedError(RuntimeError):
    """Another process holds the lock of the directory this run wants to write."""
