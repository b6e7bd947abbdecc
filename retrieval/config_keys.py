"""Configuration keys declared once: each section's keys with their defaults, rules and meanings.

A section (``config.data``, ``config.model``, ...) is declared by the module that reads it, as a :class:`Section` of
:class:`Key` s: a key's name, default, :class:`Rule` (what it accepts) and meaning. From that one declaration come
the section's ``ConfigDict`` (:meth:`Section.config`), the validation's rule table (:meth:`Section.rules`,
``retrieval.jobs.config_checks``, which adds only the cross-key checks and the memory model) and the reference page
(``tools/config_reference.py`` -> ``docs/reference.md``). Nothing here imports TensorFlow.

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
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import ml_collections

from retrieval.errors import InputError, shown

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

    def refusal(self, value: Any) -> Optional[str]:
        """Why ``value`` is refused ("must be ..., got ..."), or None when the rule accepts it."""
        if self.accepts(value):
            return None
        hint = ""
        if self.kind in ("ints", "strs") and isinstance(value, (tuple, list)) and len(value) == 1 and "," in str(value[0]):
            # ml_collections reads --config.key=a,b as the one-item tuple ('a,b',): say how a tuple is written.
            items = ", ".join(repr(part.strip()) if self.kind == "strs" else part.strip()
                              for part in str(value[0]).split(","))
            hint = f' (on the command line a tuple is written in parentheses: "({items})")'
        return f"must be {self.allowed()}, got {shown(value)}{hint}"

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


# Upper bounds (every number has one): generous for real work, far below what aborts or runs for days. The memory
# a whole configuration needs at least is cross-checked against the machine (config_checks._memory).
COUNT = 2**31 - 1  # counts with no cost of their own (steps between logs, a cap on examples): int32, as TF stores them
MAX_DIM = 4096  # embedding and layer widths: a 4096-d table of 1M items is 16 GB (48 GB with Adam's two slots)
MAX_EPOCHS = 10_000
MAX_BATCH = 1 << 20  # examples per step; the per-step memory is cross-checked too
MAX_HISTORY = 10_000  # history items a user tower pools per example
MAX_K = 100_000  # ranking cut-offs: every evaluated user's top-k is held in memory
MAX_CHECKPOINTS = 1000
MAX_WORKERS = 1024  # processes / threads; on this machine at most 4 per core (config_checks._machine)
SEED = integer(0, COUNT)
DIM = integer(1, MAX_DIM)
EPOCHS = integer(1, MAX_EPOCHS)
BATCH = integer(1, MAX_BATCH)
STEPS = integer(1, COUNT)


@dataclasses.dataclass(frozen=True)
class Needs:
    """A cross-key rule, declared beside the key it is about (``Key.needs``): ``holds(value, config)`` says whether
    the key's ``value`` goes with the rest of ``config`` (every declared key by its dotted name: ``Settled``), and
    ``message`` what is wrong when it does not (a text, or a function of the same two that writes it); the error names
    the key. ``jobs.config_checks`` checks every key's."""

    holds: Callable[[Any, Mapping[str, Any]], bool]
    message: Union[str, Callable[[Any, Mapping[str, Any]], str]]

    def problem(self, value: Any, config: Mapping[str, Any]) -> Optional[str]:
        """What is wrong with ``value`` in ``config`` (None: nothing)."""
        if self.holds(value, config):
            return None
        return self.message if isinstance(self.message, str) else self.message(value, config)


@dataclasses.dataclass(frozen=True)
class Key:
    """One key of a section: its name in the section (dotted below a sub-section, ``"item_tower.id_dropout"``), its
    default, what it accepts and what it means (the reference page's text; ``""``: the meaning of the key declared
    just above, as for ``user_column`` / ``item_column``), and what it needs of other keys (:class:`Needs`)."""

    name: str
    default: Any
    rule: Rule
    doc: str = ""
    needs: tuple[Needs, ...] = ()


@dataclasses.dataclass(frozen=True)
class Section:
    """The keys of one configuration section (``name`` "" is the top level), declared in ``module``."""

    name: str
    keys: tuple[Key, ...]
    module: str

    def __post_init__(self):
        names = [key.name for key in self.keys]
        if len(set(names)) != len(names):
            raise ValueError(f"section {self.name!r} declares a key twice")
        for key in self.keys:
            if not key.rule.accepts(key.default):
                raise ValueError(f"{self.qualified(key)}: default {key.default!r} is not {key.rule.allowed()}")

    def qualified(self, key: Key) -> str:
        """The key's full dotted name: ``"model.item_tower.id_dropout"``."""
        return f"{self.name}.{key.name}" if self.name else key.name

    def config(self) -> ml_collections.ConfigDict:
        """A new ``ConfigDict`` of the section's defaults (sub-sections nested)."""
        config = ml_collections.ConfigDict()
        self.fill(config)
        return config

    def fill(self, config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
        """Sets the section's defaults in ``config`` (the top level's keys in a whole config); returns it."""
        for key in self.keys:
            node, leaf = _parent(config, key.name, create=True)
            node[leaf] = key.default
        return config

    def check(self, config: Any) -> None:
        """Raises ``InputError`` naming the first key whose value in ``config`` (this section's ``ConfigDict``) its
        rule refuses, then the first whose cross-key rules (``Key.needs``) refuse it: the check of a library entry
        point called without the pipeline's validation. A section's ``needs`` may read its own keys only here (the
        pipeline's check, ``jobs.config_checks``, reads every section's)."""
        for key in self.keys:
            node, leaf = _parent(config, key.name)
            refusal = key.rule.refusal(node[leaf])
            if refusal is not None:
                raise InputError(refusal, field=self.qualified(key))
        settled = Settled({self.name: config} if self.name else config, (self,))
        for key in self.keys:
            name = self.qualified(key)
            for need in key.needs:
                if (problem := need.problem(settled[name], settled)) is not None:
                    raise InputError(problem, field=name)

    def rules(self) -> dict[str, Rule]:
        """``{full dotted name: rule}`` of every key."""
        return {self.qualified(key): key.rule for key in self.keys}

    def defaults(self) -> dict[str, Any]:
        """``{full dotted name: default}`` of every key."""
        return {self.qualified(key): key.default for key in self.keys}


def _parent(config: Any, name: str, create: bool = False) -> tuple[Any, str]:
    """The sub-section of ``config`` holding dotted key ``name``, and the key's last part (with ``create``, missing
    sub-sections are added)."""
    *parents, leaf = name.split(".")
    for parent in parents:
        if create and parent not in config:
            config[parent] = ml_collections.ConfigDict()
        config = config[parent]
    return config, leaf


def flatten(config: Mapping, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``("data.train_path", value)`` for every leaf of a ConfigDict or nested dict; sections are not leaves."""
    for key, value in config.items():
        if isinstance(value, (Mapping, ml_collections.ConfigDict)):
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


class Settled(dict):
    """Every key of ``sections`` by its dotted name: the config's value, or the key's declared default where the config
    leaves it out (a config built by hand, or an older run's ``config.json``), so that a reader reads one value per
    key, never a default of its own; ``given``: the keys the config itself sets (of any section)."""

    def __init__(self, config: Mapping, sections: Sequence[Section]):
        given = dict(flatten(config))
        super().__init__({**{name: value for section in sections for name, value in section.defaults().items()},
                          **given})
        self.given = frozenset(given)
