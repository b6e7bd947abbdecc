"""The catalogue: every item a run can serve, with or without training interactions.

With an item feature table and ``data.catalogue=item_features`` (the default), the table's rows are the catalogue:
items without training interactions ("cold") join the item vocabulary after the warm ones, with count 0
(:meth:`Vocabulary.with_catalogue`), so the item tower embeds them from their features alone and the index serves them
(the design note "The catalogue and items without interactions"). Items with interactions but no table row stay warm,
with missing features. A listed item clicked fewer than ``data.min_item_count`` times keeps its clicks and its count:
it is warm (its interactions stay in training, so it is no item nobody clicked); the threshold drops only unlisted
items. ``data.catalogue=interactions`` keeps the catalogue to the items seen in training.

``data.cold_item_fraction`` measures cold start on data where every item has interactions: a seeded share of the
items (chosen by a hash of the id, :func:`seeds.id_uniforms`, so any partitioning picks the same ones) loses all
its training interactions to the test part, and evaluation reports those test pairs apart (``cold_items/``).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pandas as pd

from retrieval.data import features, readers, seeds, splits
from retrieval.data.vocab import Vocabulary

MODES = ("item_features", "interactions")


def read_table(path: str, id_column: str, declared: str, field: str) -> pd.DataFrame:
    """The feature table at ``path``: the id column and the declared feature columns (all when none is declared),
    read and checked by :func:`readers.read_features` (unique ids, typed columns, bounded text cells)."""
    kinds = features.parse_kinds(declared, field)
    return readers.read_features(path, id_column, kinds=kinds or None, columns=list(kinds) or None)


def read_specs(path: str, id_column: str, declared: str, field: str) -> tuple[pd.DataFrame, list[features.FeatureSpec]]:
    """The table at ``path`` (:func:`read_table`) and the specs inferred from it for its declared kinds."""
    table = read_table(path, id_column, declared, field)
    kinds = features.parse_kinds(declared, field)
    return table, features.infer_specs(table, id_column, kinds or None)


def feature_arrays(path: str, id_column: str, declared: str, field: str, vocabulary: Vocabulary,
                   specs: Optional[Sequence[features.FeatureSpec]] = None) -> dict[str, np.ndarray]:
    """Dense per-index arrays of the table at ``path`` aligned with ``vocabulary``, coded by ``specs`` (the run's
    saved specs; default: inferred from the table)."""
    if specs is None:
        table, specs = read_specs(path, id_column, declared, field)
    else:
        table = read_table(path, id_column, declared, field)
    return features.feature_arrays(table, id_column, vocabulary, specs)


def cold_holdout(split: splits.Split, fraction: float, seed: int) -> splits.Split:
    """``split`` with the seeded ``fraction`` of items made cold: their training rows move to the test part and
    their validation rows are dropped (early stopping ranks warm items). The same items in every partition."""
    if fraction <= 0:
        return split

    def cold(frame: pd.DataFrame) -> np.ndarray:
        return seeds.id_uniforms(frame["item_id"], seed, seeds.COLD_ITEMS) < fraction

    moved = cold(split.train)
    validation = split.validation
    if validation is not None:
        validation = validation[~cold(validation)].reset_index(drop=True)
    return splits.Split(split.train[~moved].reset_index(drop=True),
                        pd.concat([split.test, split.train[moved]], ignore_index=True), validation, split.dropped)
