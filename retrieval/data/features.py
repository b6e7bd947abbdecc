"""Feature tables -> dense per-index arrays aligned with an item or user :class:`Vocabulary`.

Models gather side features by index inside the graph (``tf.gather(table, item_indices)``), so a feature table
(one row per id, from :func:`retrieval.data.readers.read_features`) becomes one array per feature whose row ``i``
describes vocabulary index ``i``. Rows 0 and 1 (padding, OOV) and ids without a feature row hold "missing":

- ``categorical`` -> int32 [V]; value codes 1..len(vocabulary), 0 = missing or unseen value.
- ``multi`` (``|``-separated, e.g. genres) -> int32 [V, M]; codes as above, 0-padded, M = ``max_values`` (at most
  :data:`MAX_VALUES` unless asked: one pathological row must not size a [V, M] array for every item).
- ``numeric`` -> float32 [V]; standardized ``(x - mean) / std`` (mean and std over the table), missing -> 0.
- ``text`` (titles, descriptions) -> int32 [V, M] like ``multi``, over lower-cased word tokens: the vocabulary keeps
  the :data:`MAX_TEXT_VOCABULARY` most frequent tokens that occur in at least two rows (a token of one row teaches
  the other rows nothing), a row keeps its first :data:`MAX_TEXT_TOKENS` known tokens, and the tower mean-pools
  their embeddings (a bag of words). A cell longer than :data:`MAX_TEXT_CHARS` characters is refused by the reader.

:data:`KINDS` is the registry of these kinds (``name:kind`` in ``data.item_features``): how the reader checks a
column, how its cells become values and how many a row keeps; the config checks and the reader take its names.

A :class:`FeatureSpec` records each feature's kind and vocabulary or statistics, so a model can size its embedding
tables (``len(vocabulary) + 1`` rows), and a run stores the item specs (:func:`save_specs`): a catalogue refresh
encodes a new table with exactly the codes the model was trained with (:func:`load_specs`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from absl import logging

from retrieval import artifacts
from retrieval.data import validate
from retrieval.data.vocab import Vocabulary
from retrieval.errors import InputError

SEPARATOR = "|"
MAX_VALUES = 64  # default cap of M; genres, tags and categories of real catalogues stay well under it
MAX_TEXT_TOKENS = 32  # tokens a text cell keeps (a title, the start of a description)
MAX_TEXT_VOCABULARY = 50_000  # most frequent tokens kept: the embedding table is this x feature_embedding_dim
MAX_TEXT_CHARS = 10_000  # a longer cell is refused (a whole document or a misread file, not a title)
TOKEN_PATTERN = r"[^\W_]+"  # runs of letters and digits (Unicode): "Toy Story (1995)" -> toy, story, 1995


@dataclasses.dataclass(frozen=True)
class FeatureKind:
    """One kind of feature column. ``read(column, path, name)``: the reader's check and cast of the column;
    ``split``: non-missing cells as strings -> their values, indexed by row (None: a numeric feature, standardised);
    ``max_values``: the values a row keeps by default (1: one code, ``[V]``; more: ``[V, M]`` codes the towers
    mean-pool); ``frequent_only``: only values of at least two rows get a code and unknown ones take no slot."""

    read: Callable[[pd.Series, str, str], Any]
    split: Optional[Callable[[pd.Series], pd.Series]] = None
    max_values: int = 1
    frequent_only: bool = False

    @property
    def numeric(self) -> bool:
        return self.split is None


def _strings(column: pd.Series, path: str, name: str) -> pd.Series:
    return column.astype("str").where(column.notna())


# The feature kinds, by the name a declaration gives (data.item_features / data.user_features: "name:kind").
KINDS: dict[str, FeatureKind] = {
    "categorical": FeatureKind(_strings, split=lambda cells: cells),
    "multi": FeatureKind(_strings, split=lambda cells: cells.str.split(SEPARATOR).explode().str.strip(),
                         max_values=MAX_VALUES),
    "numeric": FeatureKind(validate.numeric),
    "text": FeatureKind(lambda column, path, name: validate.text(column, MAX_TEXT_CHARS, path, name).to_numpy(),
                        split=lambda cells: cells.str.lower().str.findall(TOKEN_PATTERN).explode().dropna().astype(str),
                        max_values=MAX_TEXT_TOKENS, frequent_only=True),
}


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One feature column: ``kind``, its value ``vocabulary`` (code = position + 1) or its ``mean``/``std``."""

    name: str
    kind: str
    vocabulary: tuple[str, ...] = ()
    max_values: int = 1
    mean: float = 0.0
    std: float = 1.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InputError(f"unknown feature kind {self.kind!r}; expected one of {list(KINDS)}", column=self.name)

    @property
    def num_codes(self) -> int:
        """Embedding rows a categorical/multi feature needs: its values plus code 0 (missing)."""
        return len(self.vocabulary) + 1

    def to_dict(self) -> dict:
        """JSON-serializable form (for manifests)."""
        return {**dataclasses.asdict(self), "vocabulary": list(self.vocabulary)}

    @classmethod
    def from_dict(cls, data: Mapping) -> FeatureSpec:
        return cls(**{**data, "vocabulary": tuple(data.get("vocabulary", ()))})


def parse_kinds(declared: str, field: str) -> dict[str, str]:
    """Parses a ``"name:kind,name:kind"`` declaration (``data.item_features``) into ``{name: kind}``."""
    kinds = {}
    for part in filter(None, (p.strip() for p in declared.split(","))):
        name, _, kind = part.partition(":")
        if kind not in KINDS:
            raise InputError(f"feature {part!r} must be name:kind with kind among {list(KINDS)}", field=field)
        kinds[name] = kind
    return kinds


def _values(column: pd.Series, kind: str) -> pd.Series:
    """Non-missing string values of a categorical (one per row), multi (exploded) or text (exploded lower-cased
    tokens) column, indexed by row."""
    text = KINDS[kind].split(column.dropna().astype(str))
    return text[text.str.len() > 0]


def _text_vocabulary(values: pd.Series) -> pd.Series:
    """Token counts (in rows) of a text column, kept to tokens of at least two rows, at most
    :data:`MAX_TEXT_VOCABULARY` of them (most frequent first)."""
    pairs = pd.DataFrame({"token": values.to_numpy(dtype=object), "row": values.index.to_numpy()})
    rows = pairs.drop_duplicates()["token"].value_counts()
    rows = rows[rows >= 2]
    order = np.lexsort((rows.index.to_numpy(dtype=str), -rows.to_numpy()))
    return rows.iloc[order[:MAX_TEXT_VOCABULARY]]


def infer_specs(table: pd.DataFrame, id_column: str, kinds: Optional[Mapping[str, str]] = None,
                max_values: Optional[int] = None) -> list[FeatureSpec]:
    """Describes every non-id column of a feature table.

    The kind is ``kinds[column]`` when given, else ``numeric`` for numeric dtypes, ``multi`` for text containing
    ``|`` and ``categorical`` otherwise (``text`` is never guessed: declare it). Vocabularies are ordered by
    decreasing frequency, then value; ``max_values`` caps M of multi features (default: the longest row, at most
    :data:`MAX_VALUES`; longer rows keep their first values, logged); text features keep :data:`MAX_TEXT_TOKENS`.
    """
    kinds = dict(kinds or {})
    specs = []
    for name in table.columns:
        if name == id_column:
            continue
        column = table[name]
        kind = kinds.get(name)
        if kind is None:
            if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
                kind = "numeric"
            else:
                kind = "multi" if column.dropna().astype(str).str.contains(SEPARATOR, regex=False).any() else \
                    "categorical"
        if kind not in KINDS:
            raise InputError(f"unknown feature kind {kind!r}; expected one of {list(KINDS)}", column=name)
        if KINDS[kind].numeric:
            values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
            if np.isnan(values).all():
                raise InputError("numeric feature without a numeric value", column=name)
            std = float(np.nanstd(values))
            specs.append(FeatureSpec(name, kind, mean=float(np.nanmean(values)), std=std if std > 0 else 1.0))
            continue
        values = _values(column, kind)
        if KINDS[kind].frequent_only:
            vocabulary = _text_vocabulary(values)
            known = values[values.isin(vocabulary.index)]
            longest = int(known.groupby(level=0).size().max()) if len(known) else 1
            specs.append(FeatureSpec(name, kind, tuple(vocabulary.index.astype(str).tolist()),
                                     max_values=min(longest, max_values or KINDS[kind].max_values)))
            continue
        counts = values.value_counts()
        order = np.lexsort((counts.index.to_numpy(dtype=str), -counts.to_numpy()))
        longest = int(values.groupby(level=0).size().max()) if len(values) else 1
        several = KINDS[kind].max_values > 1
        cap = max_values or KINDS[kind].max_values
        if several and longest > cap:
            logging.warning("feature %s: rows of up to %d values keep their first %d", name, longest, cap)
        specs.append(FeatureSpec(name, kind, tuple(counts.index.to_numpy(dtype=str)[order].tolist()),
                                 max_values=min(longest, cap) if several else 1))
    return specs


def cell_counts(table: pd.DataFrame, specs: Sequence[FeatureSpec]) -> dict[str, dict[str, int]]:
    """Cells taken without a word that the prepare summary counts, by column (columns without any left out):
    ``missing``, empty or null cells (no value: code 0, or for a numeric feature its mean, 0 once standardised) and
    ``nul``, string cells holding a NUL byte, kept as they are: a text feature's tokens are split at it (it is no
    word character), a categorical or multi value keeps it (``"a\\x00b"`` is a value of its own)."""
    counts: dict[str, dict[str, int]] = {"missing": {}, "nul": {}}
    for spec in specs:
        column = table[spec.name]
        counts["missing"][spec.name] = int(column.isna().sum())
        if not KINDS[spec.kind].numeric:
            counts["nul"][spec.name] = int(column.dropna().astype(str).str.contains("\x00", regex=False).sum())
    return {what: {name: n for name, n in by_column.items() if n} for what, by_column in counts.items()}


def feature_arrays(table: pd.DataFrame, id_column: str, vocabulary: Vocabulary,
                   specs: Sequence[FeatureSpec]) -> dict[str, np.ndarray]:
    """Dense arrays ``{spec.name: array}`` with row ``i`` = features of vocabulary index ``i`` (see module doc).

    Table rows whose id is not in the vocabulary are ignored; vocabulary ids without a row get "missing".
    Multi-valued rows longer than ``max_values`` keep their first values.
    """
    rows = vocabulary.lookup(table[id_column].astype(str).to_numpy())
    known = rows >= 2
    out = {}
    for spec in specs:
        column = table[spec.name].reset_index(drop=True)
        if KINDS[spec.kind].numeric:
            array = np.zeros(vocabulary.size, np.float32)
            values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
            standardized = np.nan_to_num((values - spec.mean) / spec.std, nan=0.0)
            array[rows[known]] = standardized[known]
        else:
            values = _values(column, spec.kind)
            codes = pd.Categorical(values.to_numpy(), categories=list(spec.vocabulary)).codes.astype(np.int32) + 1
            if KINDS[spec.kind].frequent_only:  # unknown tokens take no slot: a row keeps its first max_values known tokens
                values, codes = values[codes > 0], codes[codes > 0]
            owner = rows[values.index.to_numpy()]
            slot = values.groupby(level=0).cumcount().to_numpy()
            keep = (owner >= 2) & (slot < spec.max_values)
            if KINDS[spec.kind].max_values == 1:
                array = np.zeros(vocabulary.size, np.int32)
                array[owner[keep]] = codes[keep]
            else:
                array = np.zeros((vocabulary.size, spec.max_values), np.int32)
                array[owner[keep], slot[keep]] = codes[keep]
        out[spec.name] = array
    return out


def save_specs(path: str | os.PathLike, id_column: str, specs: Sequence[FeatureSpec]) -> None:
    """Writes a run's item feature specs (``vocab/item_features.json``), atomically."""
    artifacts.write_json(path, {"id_column": id_column, "specs": [spec.to_dict() for spec in specs]})


def load_specs(path: str | os.PathLike) -> tuple[str, list[FeatureSpec]]:
    """``(id column, specs)`` written by :func:`save_specs`."""
    saved = artifacts.read_json(path)
    return saved["id_column"], [FeatureSpec.from_dict(spec) for spec in saved["specs"]]
