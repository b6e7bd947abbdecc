"""Feature tables -> dense per-index arrays aligned with an item or user :class:`Vocabulary`.

Models gather side features by index inside the graph (``tf.gather(table, item_indices)``), so a feature table
(one row per id, from :func:`retrieval.data.readers.read_features`) becomes one array per feature whose row ``i``
describes vocabulary index ``i``. Rows 0 and 1 (padding, OOV) and ids without a feature row hold "missing":

- ``categorical`` -> int32 [V]; value codes 1..len(vocabulary), 0 = missing or unseen value.
- ``multi`` (``|``-separated, e.g. genres) -> int32 [V, M]; codes as above, 0-padded, M = ``max_values`` (at most
  :data:`MAX_VALUES` unless asked: one pathological row must not size a [V, M] array for every item).
- ``numeric`` -> float32 [V]; standardized ``(x - mean) / std`` (mean and std over the table), missing -> 0.

A :class:`FeatureSpec` records each feature's kind and vocabulary or statistics, so a model can size its embedding
tables (``len(vocabulary) + 1`` rows) and a run can store the specs (``to_dict``) beside its vocabularies.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from absl import logging

from retrieval.data.vocab import Vocabulary
from retrieval.errors import InputError

KINDS = ("categorical", "multi", "numeric")
SEPARATOR = "|"
MAX_VALUES = 64  # default cap of M; genres, tags and categories of real catalogues stay well under it


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


def _values(column: pd.Series, kind: str) -> pd.Series:
    """Non-missing string values of a categorical (one per row) or multi (exploded) column, indexed by row."""
    text = column.dropna().astype(str)
    if kind == "multi":
        text = text.str.split(SEPARATOR).explode().str.strip()
    return text[text.str.len() > 0]


def infer_specs(table: pd.DataFrame, id_column: str, kinds: Optional[Mapping[str, str]] = None,
                max_values: Optional[int] = None) -> list[FeatureSpec]:
    """Describes every non-id column of a feature table.

    The kind is ``kinds[column]`` when given, else ``numeric`` for numeric dtypes, ``multi`` for text containing
    ``|`` and ``categorical`` otherwise. Vocabularies are ordered by decreasing frequency, then value; ``max_values``
    caps M of multi features (default: the longest row, at most :data:`MAX_VALUES`; longer rows keep their first
    values, logged).
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
        if kind == "numeric":
            values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
            if np.isnan(values).all():
                raise InputError("numeric feature without a numeric value", column=name)
            std = float(np.nanstd(values))
            specs.append(FeatureSpec(name, kind, mean=float(np.nanmean(values)), std=std if std > 0 else 1.0))
            continue
        values = _values(column, kind)
        counts = values.value_counts()
        order = np.lexsort((counts.index.to_numpy(dtype=str), -counts.to_numpy()))
        longest = int(values.groupby(level=0).size().max()) if len(values) else 1
        cap = max_values or MAX_VALUES
        if kind == "multi" and longest > cap:
            logging.warning("feature %s: rows of up to %d values keep their first %d", name, longest, cap)
        specs.append(FeatureSpec(name, kind, tuple(counts.index.to_numpy(dtype=str)[order].tolist()),
                                 max_values=min(longest, cap) if kind == "multi" else 1))
    return specs


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
        if spec.kind == "numeric":
            array = np.zeros(vocabulary.size, np.float32)
            values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
            standardized = np.nan_to_num((values - spec.mean) / spec.std, nan=0.0)
            array[rows[known]] = standardized[known]
        else:
            values = _values(column, spec.kind)
            codes = pd.Categorical(values.to_numpy(), categories=list(spec.vocabulary)).codes.astype(np.int32) + 1
            owner = rows[values.index.to_numpy()]
            slot = values.groupby(level=0).cumcount().to_numpy()
            keep = (owner >= 2) & (slot < spec.max_values)
            if spec.kind == "categorical":
                array = np.zeros(vocabulary.size, np.int32)
                array[owner[keep]] = codes[keep]
            else:
                array = np.zeros((vocabulary.size, spec.max_values), np.int32)
                array[owner[keep], slot[keep]] = codes[keep]
        out[spec.name] = array
    return out
