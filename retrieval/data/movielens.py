"""MovieLens file layouts (GroupLens): ratings, movie genres and user attributes, 100K and 1M flavours.

Both releases are latin-1 text without a header. The 100K files are ``u.data`` (tab-separated
``user item rating timestamp``), ``u.item`` (``|``-separated, 19 genre flags) and ``u.user`` (``user|age|gender|
occupation|zip``); the 1M files are ``ratings.dat``, ``movies.dat`` (``MovieID::Title::Genres``, genres
``|``-separated) and ``users.dat`` (``UserID::Gender::Age::Occupation::Zip``). The flavour is chosen from the file
name and, for renamed files, from the separator on the first line. Files are read strictly (:mod:`bounds`): only
regular files, lines within the size limit, exactly the layout's fields on every line (a single ``:`` where ``::``
belongs is an error naming the row), no quoting. Functions here only parse; ids, timestamps and uniqueness are
checked by the callers through :mod:`retrieval.data.validate`.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pandas as pd

from retrieval.data import bounds, validate
from retrieval.errors import InputError

ENCODING = "latin-1"
GENRES_100K = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
               "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War",
               "Western")


def _is_1m(path: str) -> bool:
    """True for the ``::``-separated 1M layout, False for the 100K one (tab or ``|``)."""
    name = Path(path).name
    if name.endswith(".dat"):
        return True
    if name.startswith("u."):
        return False
    with open(path, encoding=ENCODING) as f:
        return "::" in f.readline()


def _read(path: str, sep: str, columns: list[int], names: list[str], str_columns: tuple[str, ...],
          fields: int) -> pd.DataFrame:
    """Reads ``columns`` of a headerless file of ``fields`` fields per line; ``::`` layouts are read with the fast C
    parser as ``:`` with empty odd fields, which are checked empty."""
    layout = f"{fields} fields separated by {sep!r}"
    if sep == "::":
        sep, fields, columns = ":", 2 * fields - 1, [2 * c for c in columns]
    bounds.field_counts(path, sep, fields, header=False, quoting=False, layout=layout)
    gaps = list(range(1, fields, 2)) if sep == ":" else []
    frame = pd.read_csv(path, sep=sep, header=None, usecols=columns + gaps, encoding=ENCODING, quoting=csv.QUOTE_NONE,
                        dtype={**{c: str for c, n in zip(columns, names, strict=True) if n in str_columns},
                               **{c: str for c in gaps}})
    if gaps:
        filled = frame[gaps].notna().any(axis=1).to_numpy()
        if filled.any():
            raise InputError(f"expected {layout}, found a single ':'", path=path, row=int(filled.argmax()))
    frame = frame[columns]
    frame.columns = names
    return frame


def read_ratings(path: str | os.PathLike) -> pd.DataFrame:
    """Reads ``u.data`` or ``ratings.dat`` into columns ``user_id, item_id, rating, timestamp`` (raw, unchecked)."""
    path = str(path)
    names = ["user_id", "item_id", "rating", "timestamp"]
    with validate.reading(path):
        bounds.text_file(path)
        return _read(path, "::" if _is_1m(path) else "\t", [0, 1, 2, 3], names, ("user_id", "item_id"), 4)


def read_items(path: str | os.PathLike) -> pd.DataFrame:
    """Reads ``u.item`` or ``movies.dat`` into ``item_id, title, genres`` with genres ``|``-joined (e.g. genres of
    Toy Story: ``"Animation|Children's|Comedy"``); one row per movie, ids checked unique."""
    path = str(path)
    with validate.reading(path):
        bounds.text_file(path)
        frame = _read_movies_1m(path) if _is_1m(path) else _read_items_100k(path)
    frame["item_id"] = validate.ids(frame["item_id"], path, "item_id")
    validate.unique(frame["item_id"], path, "item_id")
    return frame


def _read_movies_1m(path: str) -> pd.DataFrame:
    with open(path, encoding=ENCODING) as f:
        lines = pd.Series(f.read().splitlines())
    lines = lines[lines.str.len() > 0].reset_index(drop=True)
    head = lines.str.split("::", n=1, expand=True)
    tail = head[1].str.rsplit("::", n=1, expand=True) if head.shape[1] == 2 else None
    if tail is None or tail.shape[1] != 2 or tail[1].isna().any():
        row = 0 if tail is None or tail.shape[1] != 2 else int(tail[1].isna().to_numpy().argmax())
        raise InputError("expected MovieID::Title::Genres", path=path, row=row)
    return pd.DataFrame({"item_id": head[0], "title": tail[0], "genres": tail[1]})


def _read_items_100k(path: str) -> pd.DataFrame:
    flags = list(range(5, 5 + len(GENRES_100K)))
    raw = _read(path, "|", [0, 1, *flags], ["item_id", "title", *GENRES_100K], ("item_id",), flags[-1] + 1)
    flag_values = raw[list(GENRES_100K)].to_numpy(dtype=bool)
    genre_names = np.array(GENRES_100K, dtype=object)
    genres = ["|".join(genre_names[row]) for row in flag_values]
    return pd.DataFrame({"item_id": raw["item_id"], "title": raw["title"], "genres": genres})


def read_users(path: str | os.PathLike) -> pd.DataFrame:
    """Reads ``u.user`` or ``users.dat`` into ``user_id, gender, age, occupation, zip``; one row per user.

    In 1M, ``age`` is a bucket code and ``occupation`` a number code; in 100K ``age`` is in years and ``occupation`` a
    word. ``gender``, ``occupation`` and ``zip`` are strings, ``age`` an integer.
    """
    path = str(path)
    strings = ("user_id", "gender", "occupation", "zip")
    with validate.reading(path):
        bounds.text_file(path)
        if _is_1m(path):
            frame = _read(path, "::", [0, 1, 2, 3, 4], ["user_id", "gender", "age", "occupation", "zip"], strings, 5)
        else:
            frame = _read(path, "|", [0, 1, 2, 3, 4], ["user_id", "age", "gender", "occupation", "zip"], strings, 5)
    frame = frame[["user_id", "gender", "age", "occupation", "zip"]]
    frame["user_id"] = validate.ids(frame["user_id"], path, "user_id")
    validate.unique(frame["user_id"], path, "user_id")
    return frame


def read_feature_table(path: str | os.PathLike) -> pd.DataFrame:
    """:func:`read_items` or :func:`read_users`, chosen from the file name (``movies.dat``/``u.item`` or
    ``users.dat``/``u.user``)."""
    name = Path(path).name.lower()
    if "movie" in name or "item" in name:
        return read_items(path)
    if "user" in name:
        return read_users(path)
    raise InputError("not a MovieLens feature file (movies.dat, u.item, users.dat or u.user)", path=str(path))
