"""Value rules of configuration keys: type, range, choices, pattern; each one line in a table.

A :class:`Rule` says whether a value is acceptable and, for the error message, what is allowed::

    integer(low=1)                  an integer >= 1
    number(low=0, high=1, ...)      a finite number in (0, 1)   (NaN and infinities never pass)
    flag()                          true or false
    one_of(("adam", "adagrad"))     one of 'adam', 'adagrad'
    text(nonempty=True)             a non-empty string
    integers(1, 64, nonempty=True)  a tuple of integers in [1, 64], at least one (and at most MAX_ITEMS of them)
    names(("random", "item_knn"))   a tuple of names among 'random', 'item_knn'

Booleans are not integers here (``True`` is not a batch size), integers are numbers. Every number a user can set has
an upper bound too (``tests/test_validation.py`` checks it): a value that would run away (a batch of 10^9 examples,
10^6 epochs) is refused up front instead of aborting or running for days.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from typing import Any, Optional, Sequence

KINDS = ("int", "float", "bool", "str", "ints", "strs")
MAX_ITEMS = 64  # longest tuple of an "ints" or "strs" rule (cut-offs, layer sizes, metric names)


@dataclasses.dataclass(frozen=True)
class Rule:
    """What one configuration key accepts. ``low``/``high`` bound numbers (and the items of ``ints``), inclusive
    unless ``low_open``/``high_open``; ``choices`` restricts strings (and the items of ``strs``); ``pattern`` is a
    regular expression a string must match in full, described to the user by ``pattern_doc``."""

    kind: str
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    choices: Optional[tuple[str, ...]] = None
    pattern: Optional[str] = None
    pattern_doc: str = ""
    nonempty: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown rule kind {self.kind!r}; expected one of {KINDS}")

    def accepts(self, value: Any) -> bool:
        if self.kind in ("ints", "strs"):
            if not isinstance(value, (tuple, list)) or (self.nonempty and not value) or len(value) > MAX_ITEMS:
                return False
            return all(self._accepts_scalar(item, "int" if self.kind == "ints" else "str") for item in value)
        return self._accepts_scalar(value, self.kind)

    def _accepts_scalar(self, value: Any, kind: str) -> bool:
        if kind == "bool":
            return isinstance(value, bool)
        if kind == "str":
            return (isinstance(value, str) and (value or not self.nonempty or self.kind == "strs")
                    and (self.choices is None or value in self.choices)
                    and (self.pattern is None or re.fullmatch(self.pattern, value) is not None))
        if isinstance(value, bool) or not isinstance(value, numbers.Integral if kind == "int" else numbers.Real):
            return False
        return math.isfinite(value) and self._in_range(value)

    def _in_range(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def allowed(self) -> str:
        """What the rule accepts, in words (completes "must be ...")."""
        bounds = self._bounds()
        if self.kind == "int":
            return f"an integer{bounds}"
        if self.kind == "float":
            return f"a finite number{bounds}"
        if self.kind == "bool":
            return "true or false"
        if self.kind == "ints":
            return f"a tuple of at most {MAX_ITEMS} integers{bounds}" + (", at least one" if self.nonempty else "")
        if self.kind == "strs":
            among = f"names among {_quoted(self.choices)}" if self.choices else "strings"
            return f"a tuple of at most {MAX_ITEMS} {among}" + (", at least one" if self.nonempty else "")
        if self.choices is not None:
            return f"one of {_quoted(self.choices)}"
        if self.pattern is not None:
            return self.pattern_doc or f"a string matching {self.pattern}"
        return "a non-empty string" if self.nonempty else "a string"

    def _bounds(self) -> str:
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            return f" in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f" {'>' if self.low_open else '>='} {low}"
        if self.high is not None:
            return f" {'<' if self.high_open else '<='} {high}"
        return ""


def _number(value: Optional[float]) -> str:
    """Whole numbers in full (1048576, not 1.04858e+06), others short."""
    if value is not None and float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:g}" if value is not None else ""


def _quoted(choices: Sequence[str]) -> str:
    return ", ".join(repr(c) for c in choices)


def integer(low: Optional[int] = None, high: Optional[int] = None) -> Rule:
    return Rule("int", low=low, high=high)


def number(low: Optional[float] = None, high: Optional[float] = None, *, low_open: bool = False,
           high_open: bool = False) -> Rule:
    return Rule("float", low=low, high=high, low_open=low_open, high_open=high_open)


def flag() -> Rule:
    return Rule("bool")


def one_of(choices: Sequence[str]) -> Rule:
    return Rule("str", choices=tuple(choices))


def text(nonempty: bool = False, pattern: Optional[str] = None, pattern_doc: str = "") -> Rule:
    return Rule("str", nonempty=nonempty, pattern=pattern, pattern_doc=pattern_doc)


def integers(low: Optional[int] = None, high: Optional[int] = None, nonempty: bool = False) -> Rule:
    return Rule("ints", low=low, high=high, nonempty=nonempty)


def names(choices: Optional[Sequence[str]] = None, nonempty: bool = False) -> Rule:
    return Rule("strs", choices=None if choices is None else tuple(choices), nonempty=nonempty)
