"""Checks on user-supplied tables, raising :class:`retrieval.errors.InputError` at the first offending row.

Every reader funnels its raw DataFrame through these functions, so a user sees one kind of message whatever the
file format: the file, the column, the first offending row (0-based data row, header excluded) and the bad value.
Rows are positions in the table as read, which is why readers keep the file order and a default RangeIndex.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterable, Iterator, Optional

import numpy as np
import pandas as pd
from absl import logging

from retrieval.errors import InputError

RESERVED_IDS = ("<pad>", "<oov>")
# Longest id accepted, in characters: real ids (numbers, UUIDs, ASINs, URLs) are far shorter; a longer "id" is a
# wrong column or a broken file, and every id is held in vocabularies, indexes and serving maps.
MAX_ID_LENGTH = 256
# Largest timestamp accepted: 2**53 (exact in float64) covers epoch seconds, milliseconds and microseconds; a larger
# one is a wrong column or a corrupt value, and would overflow int64 arithmetic on time spans and example ages.
MAX_TIMESTAMP = 2**53
# Share of the interaction log's items that must have a row in an item feature table (below it the table is refused:
# its ids are of another kind, e.g. another column or another id scheme, and its rows would be served as items
# nobody ever clicked), and the share below which a warning names the counts.
MIN_TABLE_OVERLAP = 0.1
WARN_TABLE_OVERLAP = 0.5


def first_spaced_id(ids: Iterable[str]) -> Optional[int]:
    """The position of the first id that word2vec's format cannot hold (empty, or with whitespace: its separator),
    or None. Item2Vec runs export their vectors in that format (``retrieval.export.write_word2vec``)."""
    return next((i for i, item in enumerate(ids) if not item or len(item.split()) != 1 or item.strip() != item), None)


@contextlib.contextmanager
def reading(path: str | os.PathLike) -> Iterator[None]:
    """Turns a missing, unreadable or unparsable file into an ``InputError`` naming it (other errors pass through)."""
    try:
        yield
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError("file not found", path=str(path)) from None
    except pd.errors.EmptyDataError:
        raise InputError("no data rows (empty input)", path=str(path)) from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, ValueError) as e:
        raise InputError(f"cannot read the file ({type(e).__name__}: {e})", path=str(path)) from None


def internal_artifact(error: InputError, path: str | os.PathLike, what: str) -> InputError:
    """``error``, found in a file a run wrote itself (e.g. ``data/train.parquet``), told as such: the user's input
    passed these checks when the run's prepare stage read it, so the file was damaged or written by other code."""
    return InputError(f"{what}, an internal artifact of the run (not your input file; its prepare stage wrote it from "
                      f"validated input), is damaged: {error.message}; rerun the run with --force",
                      path=str(path), column=error.column, row=error.row)


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def require_columns(available: Iterable[str], required: Iterable[str], path: Optional[str] = None) -> None:
    """Fails when a required column is not among ``available``, listing the columns the file does have."""
    available = [str(c) for c in available]
    missing = [c for c in required if c not in available]
    if missing:
        raise InputError(f"missing column(s) {missing}; the file has columns {available}", path=path,
                         column=missing[0])


def require_rows(frame: pd.DataFrame, path: Optional[str] = None) -> None:
    """Fails on a table without data rows (an empty file or a header only)."""
    if len(frame) == 0:
        raise InputError("no data rows (empty input)", path=path)


def ids(values: pd.Series, path: Optional[str] = None, column: Optional[str] = None) -> pd.Series:
    """Returns ``values`` as non-empty string ids.

    Integers and integral floats become their decimal form ("7", not "7.0"), so ids read from CSV, Parquet or a
    feature table agree. Nulls, empty strings, ids longer than :data:`MAX_ID_LENGTH` characters, non-integral
    numbers, nested values and the reserved ids ``<pad>``/``<oov>`` are rejected.
    """
    column = column or str(values.name)
    values = values.reset_index(drop=True)
    null = values.isna().to_numpy()
    if null.any():
        row = _first(null)
        raise InputError("null id", path=path, column=column, row=row)
    if pd.api.types.is_bool_dtype(values):
        raise InputError(f"ids must be strings or integers, got booleans (first value {values.iloc[0]!r})",
                         path=path, column=column, row=0)
    if pd.api.types.is_float_dtype(values):
        array = values.to_numpy(dtype=np.float64)
        bad = ~np.isfinite(array) | (array != np.round(array))
        if bad.any():
            row = _first(bad)
            raise InputError(f"id {array[row]!r} cannot be cast to an integer or string id",
                             path=path, column=column, row=row)
        values = pd.Series(array.astype(np.int64))
    elif not (pd.api.types.is_integer_dtype(values) or pd.api.types.is_string_dtype(values)):
        kinds = values.map(lambda v: isinstance(v, (str, bytes, int, np.integer))).to_numpy(dtype=bool)
        if not kinds.all():
            row = _first(~kinds)
            raise InputError(f"id {values.iloc[row]!r} of type {type(values.iloc[row]).__name__} cannot be cast to "
                             "a string id", path=path, column=column, row=row)
        values = values.map(lambda v: v.decode() if isinstance(v, bytes) else v)
    out = values.astype(str)
    lengths = out.str.len().to_numpy()
    bad = (lengths == 0) | out.isin(RESERVED_IDS).to_numpy()
    if bad.any():
        row = _first(bad)
        raise InputError(f"id {out.iloc[row]!r} is empty or reserved ({', '.join(RESERVED_IDS)})",
                         path=path, column=column, row=row)
    too_long = lengths > MAX_ID_LENGTH
    if too_long.any():
        row = _first(too_long)
        raise InputError(f"id of {lengths[row]} characters ({out.iloc[row][:40]!r}...) is longer than the limit of "
                         f"{MAX_ID_LENGTH}; is this the id column?", path=path, column=column, row=row)
    return out


def _numbers(values: pd.Series, path: Optional[str], column: str, what: str) -> np.ndarray:
    values = values.reset_index(drop=True)
    null = values.isna().to_numpy()
    if null.any():
        raise InputError(f"missing {what}", path=path, column=column, row=_first(null))
    if pd.api.types.is_bool_dtype(values):
        raise InputError(f"{what} must be numeric, got booleans", path=path, column=column, row=0)
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(numbers)
    if bad.any():
        row = _first(bad)
        raise InputError(f"non-numeric {what} {values.iloc[row]!r}", path=path, column=column, row=row)
    negative = numbers < 0
    if negative.any():
        row = _first(negative)
        raise InputError(f"negative {what} {values.iloc[row]!r}", path=path, column=column, row=row)
    return numbers


def timestamps(values: pd.Series, path: Optional[str] = None, column: Optional[str] = None) -> np.ndarray:
    """Returns non-negative int64 timestamps (epoch seconds, ms, us or positions, at most :data:`MAX_TIMESTAMP`);
    fractional values are floored."""
    column = column or str(values.name)
    numbers = _numbers(values, path, column, "timestamp")
    too_large = numbers > MAX_TIMESTAMP
    if too_large.any():
        row = _first(too_large)
        raise InputError(f"timestamp {numbers[row]:g} is beyond {MAX_TIMESTAMP} (2**53): timestamps are epoch "
                         "seconds, milliseconds or microseconds, or positions; is this the timestamp column?",
                         path=path, column=column, row=row)
    return np.floor(numbers).astype(np.int64)


def weights(values: pd.Series, path: Optional[str] = None, column: Optional[str] = None) -> np.ndarray:
    """Returns non-negative float32 interaction weights."""
    return _numbers(values, path, column or str(values.name), "weight").astype(np.float32)


def numeric(values: pd.Series, path: Optional[str] = None, column: Optional[str] = None) -> np.ndarray:
    """Returns a numeric feature column as float64; nulls stay NaN (missing), anything else non-numeric fails."""
    column = column or str(values.name)
    values = values.reset_index(drop=True)
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
    bad = values.notna().to_numpy() & ~np.isfinite(numbers)
    if bad.any():
        row = _first(bad)
        raise InputError(f"non-numeric value {values.iloc[row]!r} in a numeric feature", path=path, column=column,
                         row=row)
    return numbers


def text(values: pd.Series, max_chars: int, path: Optional[str] = None, column: Optional[str] = None) -> pd.Series:
    """Returns a text feature column as strings (nulls stay missing), refusing a cell longer than ``max_chars``
    characters (a whole document, or a file read with the wrong separator), naming its row."""
    column = column or str(values.name)
    values = values.reset_index(drop=True)
    strings = values.astype("str").where(values.notna())
    too_long = (strings.str.len() > max_chars).to_numpy()
    if too_long.any():
        row = _first(too_long)
        raise InputError(f"text cell of {len(strings.iloc[row]):,} characters (at most {max_chars:,}); is this the "
                         "right column and separator?", path=path, column=column, row=row)
    return strings


def unique(keys: pd.Series, path: Optional[str] = None, column: Optional[str] = None) -> None:
    """Fails when a key repeats (a feature table must have one row per id), naming the first repeated row."""
    duplicated = keys.reset_index(drop=True).duplicated().to_numpy()
    if duplicated.any():
        row = _first(duplicated)
        first = _first((keys.reset_index(drop=True) == keys.iloc[row]).to_numpy())
        raise InputError(f"duplicate id {keys.iloc[row]!r} (first seen at row {first})", path=path,
                         column=column or str(keys.name), row=row)


def table_overlap(table_ids: Iterable[str], log_items: Iterable[str], path: Optional[str] = None,
                  column: Optional[str] = None, log: str = "the training log") -> float:
    """The share of ``log_items`` (the distinct items of the interaction log) that have a row in an item feature
    table with ids ``table_ids``. An item table is the catalogue: a table whose ids share (almost) nothing with the
    log would be served as items nobody ever clicked while every clicked item lost its features. Refused below
    :data:`MIN_TABLE_OVERLAP` (``InputError`` naming the counts), a warning below :data:`WARN_TABLE_OVERLAP`."""
    table = pd.Index(pd.unique(np.asarray(list(table_ids), dtype=object).astype(str)))
    items = pd.Index(pd.unique(np.asarray(list(log_items), dtype=object).astype(str)))
    shared = int(items.isin(table).sum())
    share = shared / len(items) if len(items) else 1.0
    # Rounded down, so that a share just under a threshold never prints as the threshold it is said to be below.
    counts = (f"{shared:,} of the {len(items):,} items of {log} have a row in the item table "
              f"({np.floor(share * 1000) / 10:.1f}%), and "
              f"{len(table) - shared:,} of its {len(table):,} rows are items {log} never saw")
    if share < MIN_TABLE_OVERLAP:
        raise InputError(f"{counts}: at least {MIN_TABLE_OVERLAP:.0%} must match; are the table's ids the log's "
                         "item ids (the same column and id scheme)?", path=path, column=column)
    if share < WARN_TABLE_OVERLAP:
        logging.warning("%s: %s (below %.0f%%; items without a row keep no features)", path, counts,
                        100 * WARN_TABLE_OVERLAP)
    return share
