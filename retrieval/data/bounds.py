"""Bounds on what a reader accepts, checked before a file is parsed, so a bad input fails fast and names its row.

- Only regular files are read: a FIFO, a device or a directory would block the reader or fail deep inside a parser.
- No line may exceed :data:`MAX_LINE_BYTES`: the check streams the file in chunks, so a pathological input (a 1 GB
  line without a newline) is refused after reading at most one chunk past the limit instead of being loaded whole.
- Delimited text has a strict dialect: every row has as many fields as the header (or as the layout says for
  headerless files). pandas would fill a short row with NaN and may shift a long one into an index.

Rows in messages are 0-based data rows, header excluded (what :class:`retrieval.errors.InputError` promises);
blank lines are skipped by the parsers and do not count.
"""

from __future__ import annotations

import os
import stat
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from retrieval.errors import InputError

MAX_LINE_BYTES = 8 << 20  # 8 MiB: far above any real interaction row, far below what exhausts memory
CHUNK_BYTES = 1 << 20
_SHOWN = 80  # characters of an offending row quoted in a message


def regular_file(path: str) -> None:
    """Fails unless ``path`` is an existing regular file (symlinks to one are fine)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except OSError as e:
        raise InputError(f"cannot read the file ({e.strerror})", path=path) from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a special file"
        raise InputError(f"{kind}, not a regular file; give the path of a data file", path=path)


def line_lengths(path: str, header_lines: int = 0, limit: Optional[int] = None) -> None:
    """Fails at the first line longer than ``limit`` bytes (default :data:`MAX_LINE_BYTES`), streaming ``path`` in
    chunks of :data:`CHUNK_BYTES`."""
    limit = limit or MAX_LINE_BYTES
    line, run = 0, 0  # lines finished so far, bytes of the current line so far
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            ends = np.flatnonzero(np.frombuffer(chunk, np.uint8) == ord("\n"))
            lengths = np.diff(ends, prepend=-1) - 1
            if lengths.size:
                lengths[0] += run
                run = len(chunk) - int(ends[-1]) - 1
            else:
                run += len(chunk)
            too_long = np.flatnonzero(lengths > limit)
            if too_long.size or run > limit:
                _too_long(path, line + (int(too_long[0]) if too_long.size else lengths.size), header_lines, limit)
            line += lengths.size


def _too_long(path: str, line: int, header_lines: int, limit: int) -> None:
    if line < header_lines:
        raise InputError(f"the header line is longer than {limit} bytes", path=path)
    raise InputError(f"line longer than {limit} bytes (a limit that bounds memory; is this the right file?)",
                     path=path, row=line - header_lines)


def field_counts(path: str, delimiter: str, fields: int, header: bool, quoting: bool = True,
                 layout: Optional[str] = None) -> None:
    """Fails at the first row whose number of fields is not ``fields`` (quoted delimiters and newlines allowed when
    ``quoting``); ``layout`` describes the expected row in the message. Streams the file with pyarrow's CSV tokenizer, keeping only the first field, as bytes (so any
    ASCII-compatible encoding works)."""
    first_bad: list = []

    def stop(row: pa_csv.InvalidRow) -> str:
        first_bad.append(row)
        return "error"

    try:
        pa_csv.read_csv(
            path,
            read_options=pa_csv.ReadOptions(use_threads=False, column_names=[str(i) for i in range(fields)],
                                            skip_rows=int(header), block_size=MAX_LINE_BYTES + CHUNK_BYTES),
            parse_options=pa_csv.ParseOptions(delimiter=delimiter, quote_char='"' if quoting else False,
                                              newlines_in_values=quoting, invalid_row_handler=stop),
            convert_options=pa_csv.ConvertOptions(include_columns=["0"], column_types={"0": pa.binary()}))
    except pa.ArrowInvalid:
        if not first_bad:
            raise
    if first_bad:
        bad = first_bad[0]
        row = None if bad.number is None else bad.number - 1 - int(header)
        expected = layout or f"{fields} fields" + (" (as many as the header)" if header else "")
        raise InputError(f"expected {expected}, got {bad.actual_columns} fields: {bad.text[:_SHOWN]!r}", path=path,
                         row=row)


def text_file(path: str, header_lines: int = 0) -> None:
    """A readable text input: a regular file whose lines are within :data:`MAX_LINE_BYTES`."""
    regular_file(path)
    line_lengths(path, header_lines)
