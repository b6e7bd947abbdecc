"""Interaction logs and feature tables, read into canonical, validated DataFrames.

Interactions come out with the canonical columns ``user_id`` (str), ``item_id`` (str), optional ``timestamp``
(int64) and optional ``weight`` (float32), in file order (ties in time keep that order downstream). Formats:

- ``csv`` / ``tsv``: a header row; column names from :class:`ColumnNames`.
- ``parquet``: column names from :class:`ColumnNames`; integer ids become their decimal strings.
- ``movielens``: ``ratings.dat`` (``::``) or ``u.data`` (tab), told apart by name or first line; the rating becomes
  ``weight`` only when ``ColumnNames.weight == "rating"`` (implicit feedback by default).
- ``user_items``: one user per line, ``user item item ...`` (whitespace-separated) in time order; ``timestamp`` is
  the position in the line (0, 1, ...).
- ``auto``: guessed from the file name (``.csv``, ``.tsv``/``.tab``, ``.parquet``/``.pq``, ``.dat``/``u.data`` (and
  ``u.item``/``u.user`` for feature tables), ``.txt``), logged.

Every reader checks the file's bounds before parsing it (:mod:`retrieval.data.bounds`): a regular file, lines within
``bounds.MAX_LINE_BYTES``, every row with as many fields as the header; ids are limited to
``validate.MAX_ID_LENGTH`` characters. Errors name the file, the column and the 0-based data row (for
``user_items``, the 0-based line).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from absl import logging

from retrieval.data import bounds, features, movielens, validate
from retrieval.errors import InputError

FORMATS = ("csv", "tsv", "parquet", "movielens", "user_items", "auto")
_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".parquet": "parquet", ".pq": "parquet",
             ".dat": "movielens", ".data": "movielens", ".item": "movielens", ".user": "movielens",
             ".txt": "user_items"}
_SEPARATORS = {"csv": ",", "tsv": "\t"}
BATCH_ROWS = 1 << 18  # rows per batch of :func:`interaction_batches` (user_items: lines per batch / 16)


@dataclasses.dataclass(frozen=True)
class ColumnNames:
    """Names of the interaction columns in a ``csv``/``tsv``/``parquet`` file.

    ``timestamp`` is optional: when the file lacks that column the interactions keep file order (a warning is
    logged; pass ``timestamp=None`` or ``""`` to silence it). ``weight`` is read only when named.
    """

    user: str = "user_id"
    item: str = "item_id"
    timestamp: Optional[str] = "timestamp"
    weight: Optional[str] = None

    def __post_init__(self):
        for name in ("timestamp", "weight"):
            if getattr(self, name) == "":
                object.__setattr__(self, name, None)


def guess_format(path: str | os.PathLike) -> str:
    """Guesses a reader format from the file name (``u.data`` and ``*.dat`` are MovieLens)."""
    path = Path(path)
    guessed = _SUFFIXES.get(path.suffix.lower())
    if guessed is None:
        raise InputError(f"cannot guess the format from the file name; pass one of {FORMATS[:-1]}", path=str(path))
    return guessed


def _resolve(path: str, format: str, allowed: Sequence[str]) -> str:
    if format not in allowed:
        raise InputError(f"unknown format {format!r}; expected one of {list(allowed)}", path=path, field="format")
    if format == "auto":
        format = guess_format(path)
        if format not in allowed:
            raise InputError(f"format {format!r} (guessed from the name) is not allowed here; expected one of "
                             f"{list(allowed)}", path=path, field="format")
        logging.info("reading %s as %s (guessed from the file name)", path, format)
    return format


def _columns_of(path: str, format: str) -> list[str]:
    """Column names of a ``csv``/``tsv``/``parquet`` file, once its bounds are checked (:mod:`bounds`): a regular
    file and, for text, lines within the size limit and rows with as many fields as the header."""
    bounds.regular_file(path)
    if format == "parquet":
        return list(pq.read_schema(path).names)
    bounds.line_lengths(path, header_lines=1)
    names = list(pd.read_csv(path, sep=_SEPARATORS[format], nrows=0).columns)
    raw = [str(name) for name in pd.read_csv(path, sep=_SEPARATORS[format], nrows=1, header=None, dtype=str).iloc[0]]
    repeated = sorted({str(name) for name in raw if raw.count(name) > 1})
    if repeated:
        raise InputError(f"duplicate column name(s) {repeated} in the header; every column needs its own name",
                         path=path, column=repeated[0])
    bounds.field_counts(path, _SEPARATORS[format], len(names), header=True)
    return names


def _read_columns(path: str, format: str, wanted: list[str], str_columns: Sequence[str]) -> pd.DataFrame:
    """The ``wanted`` columns of a checked file (see :func:`_columns_of`), in that order, with a RangeIndex."""
    if format == "parquet":
        return pd.read_parquet(path, columns=wanted)
    # Only an empty cell is missing: pandas' default markers ("NA", "n/a", "null", ...) would turn a category
    # named "NA" into a missing value and let "n/a" pass a numeric column (docs/guide.md, "Feature tables").
    frame = pd.read_csv(path, sep=_SEPARATORS[format], usecols=wanted, dtype={c: str for c in str_columns},
                        keep_default_na=False, na_values=[""])
    return frame[wanted].reset_index(drop=True)


def read_table(path: str | os.PathLike, format: str = "auto", columns: Optional[Sequence[str]] = None,
               str_columns: Sequence[str] = ()) -> pd.DataFrame:
    """Reads a ``csv``/``tsv``/``parquet`` table with a header, checking ``columns`` exist (all columns if None).

    ``str_columns`` are read as strings, so ids like ``"007"`` survive. Fails with an ``InputError`` on a missing,
    special or unreadable file, an over-long line, a row with the wrong number of fields, a missing column or no data
    rows.
    """
    path = str(path)
    format = _resolve(path, format, ("csv", "tsv", "parquet", "auto"))
    with validate.reading(path):
        available = _columns_of(path, format)
        validate.require_columns(available, columns or [], path)
        frame = _read_columns(path, format, list(columns) if columns is not None else available, str_columns)
    validate.require_rows(frame, path)
    return frame


def _user_items_lines(path: str, lines: list[str], first_line: int) -> pd.DataFrame:
    """Canonical pairs of ``user item item ...`` lines (``first_line``: the 0-based line number of ``lines[0]``, for
    messages); ``timestamp`` is the position in the line."""
    tokens = pd.Series(lines, dtype=object).str.split()
    pairs = (tokens.str.len().to_numpy() - 1).clip(0)
    frame = pd.DataFrame({"user_id": tokens.str[0].repeat(pairs).to_numpy(),
                          "item_id": tokens.str[1:].explode().dropna().to_numpy()})
    frame["timestamp"] = frame.groupby("user_id", sort=False).cumcount().to_numpy()
    try:
        return _canonical(frame, ColumnNames(), path)
    except InputError as e:  # a row of the pair table -> the line it came from
        line = None if e.row is None else first_line + int(np.repeat(np.arange(len(lines)), pairs)[e.row])
        raise InputError(e.message, path=path, column=e.column, row=line) from None


def _user_items_batches(path: str, lines_per_batch: int) -> Iterator[pd.DataFrame]:
    """``user item item ...`` lines -> canonical pairs, ``lines_per_batch`` lines at a time (one user per line)."""
    with validate.reading(path):
        bounds.text_file(path)
        with open(path, encoding="utf-8") as f:
            for number in itertools.count():
                lines = list(itertools.islice(f, lines_per_batch))
                if not lines:
                    return
                yield _user_items_lines(path, lines, number * lines_per_batch)


def _read_user_items(path: str) -> pd.DataFrame:
    """The whole ``user_items`` file as canonical pairs; rows in errors are 0-based lines of the file."""
    frames = list(_user_items_batches(path, 1 << 30))
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({"user_id": [], "item_id": []})
    validate.require_rows(frame, path)
    return frame


def _text_batches(path: str, format: str, wanted: list[str], columns: ColumnNames) -> Iterator[pd.DataFrame]:
    """A checked csv/tsv file's ``wanted`` columns in blocks of a few MiB (ids read as strings); a block holds every
    line whole, since no line exceeds ``bounds.MAX_LINE_BYTES``."""
    reader = pa_csv.open_csv(
        path, read_options=pa_csv.ReadOptions(block_size=bounds.MAX_LINE_BYTES + bounds.CHUNK_BYTES),
        parse_options=pa_csv.ParseOptions(delimiter=_SEPARATORS[format]),
        convert_options=pa_csv.ConvertOptions(include_columns=wanted,
                                              column_types={columns.user: pa.string(), columns.item: pa.string()}))
    for batch in reader:
        yield batch.to_pandas()


def _raw_batches(path: str, format: str, columns: ColumnNames, batch_rows: int) -> Iterator[pd.DataFrame]:
    """Raw frames of a csv/tsv/parquet log (the named columns present) or canonical frames of the other formats."""
    if format == "user_items":
        yield from _user_items_batches(path, max(batch_rows // 16, 1))
        return
    if format == "movielens":
        raw = movielens.read_ratings(path)
        frame = _canonical(raw, ColumnNames(weight="rating" if columns.weight == "rating" else None), path)
        for start in range(0, len(frame), batch_rows):
            yield frame.iloc[start:start + batch_rows].reset_index(drop=True)
        return
    wanted = [columns.user, columns.item] + [c for c in (columns.timestamp, columns.weight) if c is not None]
    available = _columns_of(path, format)
    validate.require_columns(available, [c for c in wanted if c != columns.timestamp], path)
    wanted = [c for c in wanted if c in available]
    if columns.timestamp is not None and columns.timestamp not in available:
        logging.warning("%s has no timestamp column %r; interactions keep file order", path, columns.timestamp)
    if format == "parquet":
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=wanted):
            yield batch.to_pandas()
    else:
        yield from _text_batches(path, format, wanted, columns)


def interaction_batches(path: str | os.PathLike, format: str = "auto", columns: Optional[ColumnNames] = None,
                        batch_rows: int = BATCH_ROWS) -> Iterator[pd.DataFrame]:
    """The log in canonical frames of about ``batch_rows`` rows (any format), each with ``row``: the 0-based data
    row (for ``user_items``, the pair) of the file, so that ties in time keep file order downstream.

    Memory holds one batch (``movielens`` files, whose largest release is 25M rows, are read whole). The checks and
    messages are those of :func:`read_interactions`; an empty log yields nothing.
    """
    path = str(path)
    columns = columns or ColumnNames()
    format = _resolve(path, format, FORMATS)
    row = 0
    with validate.reading(path):
        for frame in _raw_batches(path, format, columns, batch_rows):
            if format not in ("user_items", "movielens"):
                try:
                    frame = _canonical(frame.reset_index(drop=True), columns, path, warn=False)
                except InputError as e:
                    raise InputError(e.message, path=path, column=e.column,
                                     row=None if e.row is None else e.row + row) from None
            frame["row"] = np.arange(row, row + len(frame), dtype=np.int64)
            row += len(frame)
            yield frame


def distinct_items(path: str | os.PathLike, format: str = "auto", columns: Optional[ColumnNames] = None) -> np.ndarray:
    """The distinct item ids of a log, as training reads them (:func:`interaction_batches`: canonical string ids,
    every row checked), in order of first appearance; memory holds one batch and the ids."""
    seen = [pd.unique(batch["item_id"].to_numpy(dtype=object)) for batch in interaction_batches(path, format, columns)]
    return pd.unique(np.concatenate(seen or [np.zeros(0, object)]))


def _canonical(frame: pd.DataFrame, columns: ColumnNames, path: str, warn: bool = True) -> pd.DataFrame:
    out = pd.DataFrame({"user_id": validate.ids(frame[columns.user], path, columns.user),
                        "item_id": validate.ids(frame[columns.item], path, columns.item)})
    if columns.timestamp is not None and columns.timestamp in frame.columns:
        out["timestamp"] = validate.timestamps(frame[columns.timestamp], path, columns.timestamp)
    elif columns.timestamp is not None and warn:
        logging.warning("%s has no timestamp column %r; interactions keep file order", path, columns.timestamp)
    if columns.weight is not None:
        out["weight"] = validate.weights(frame[columns.weight], path, columns.weight)
    return out


def read_interactions(path: str | os.PathLike, format: str = "auto",
                      columns: Optional[ColumnNames] = None) -> pd.DataFrame:
    """Reads an interaction log into canonical columns (see the module docstring), validated row by row."""
    path = str(path)
    columns = columns or ColumnNames()
    format = _resolve(path, format, FORMATS)
    if format == "movielens":
        raw = movielens.read_ratings(path)
        validate.require_rows(raw, path)
        return _canonical(raw, ColumnNames(weight="rating" if columns.weight == "rating" else None), path)
    if format == "user_items":
        return _read_user_items(path)
    wanted = [columns.user, columns.item] + [c for c in (columns.timestamp, columns.weight) if c is not None]
    with validate.reading(path):
        available = _columns_of(path, format)
        validate.require_columns(available, [c for c in wanted if c != columns.timestamp], path)
        frame = _read_columns(path, format, [c for c in wanted if c in available], (columns.user, columns.item))
    validate.require_rows(frame, path)
    return _canonical(frame, columns, path)


def read_run_interactions(path: str | os.PathLike, user_ids: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """A run's own canonical interaction table (``data/*.parquet``, written by its prepare stage): the columns
    ``user_id``, ``item_id`` and ``timestamp`` it has, ids as strings. With ``user_ids``, only those users' rows, by a
    filtered scan (memory holds them, not the table). Raises ``InputError`` when the file cannot be read; callers tell
    it as a damaged artifact of the run (``validate.internal_artifact``)."""
    try:
        names = pq.read_schema(path).names
        wanted = None if user_ids is None else [("user_id", "in", [str(u) for u in user_ids])]
        frame = pq.read_table(path, columns=[c for c in ("user_id", "item_id", "timestamp") if c in names],
                              filters=wanted).to_pandas()
    except (OSError, pa.ArrowInvalid) as e:
        raise InputError(f"cannot read it ({e})", path=str(path)) from None
    for column in ("user_id", "item_id"):
        if column in frame:
            frame[column] = frame[column].astype(str)
    return frame


def read_features(path: str | os.PathLike, id_column: str, format: str = "auto",
                  kinds: Optional[Mapping[str, str]] = None, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Reads an item or user feature table: one row per id, ids as strings, checked unique.

    ``columns`` selects feature columns (default: all). ``kinds`` maps a column to ``categorical``, ``multi``
    (``|``-separated values such as ``"Action|Comedy"``), ``text`` (free text: a cell of more than
    ``features.MAX_TEXT_CHARS`` characters fails) or ``numeric`` and casts it: numeric to float64 (empty =
    missing, anything else non-numeric fails), the others to strings (empty = missing). Columns without a kind keep
    the type pandas read; :func:`retrieval.data.features.infer_specs` describes them for the models.

    ``movielens`` (also guessed for ``*.dat``) reads ``movies.dat``/``u.item`` (``item_id, title, genres``) or
    ``users.dat``/``u.user`` (``user_id, gender, age, occupation, zip``), see :mod:`retrieval.data.movielens`.
    """
    path = str(path)
    kinds = dict(kinds or {})
    bad = {c: k for c, k in kinds.items() if k not in features.KINDS}
    if bad:
        raise InputError(f"unknown feature kind(s) {bad}; expected one of {list(features.KINDS)}", path=path,
                         field="kinds")
    wanted = None if columns is None else [id_column, *[c for c in columns if c != id_column]]
    text = [c for c, k in kinds.items() if not features.KINDS[k].numeric]
    format = _resolve(path, format, ("csv", "tsv", "parquet", "movielens", "auto"))
    if format == "movielens":
        frame = movielens.read_feature_table(path)
        validate.require_columns(frame.columns, wanted or [], path)
        frame = frame[wanted] if wanted else frame
    else:
        frame = read_table(path, format, wanted, str_columns=(id_column, *text))
    validate.require_columns(frame.columns, [id_column, *kinds], path)
    frame[id_column] = validate.ids(frame[id_column], path, id_column)
    validate.unique(frame[id_column], path, id_column)
    for column, kind in kinds.items():
        frame[column] = features.KINDS[kind].read(frame[column], path, column)
    return frame
