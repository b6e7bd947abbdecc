"""The hand-off between a run and its data: what the job asks of the prepare stage (:class:`PrepareSpec`) and what
training reads back (:class:`PreparedData`, the feature tables of :func:`feature_arrays`).

The job builds the spec from its config and hands it over; the prepare stage's summary then carries every fact about
the data that training needs (set or sequence, the example kind, whether streamed, the automatic holdout), so the
job holds no data logic of its own.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import ml_collections
import numpy as np

from retrieval import artifacts
from retrieval.data import catalogue, content, prepare
from retrieval.data import engine as engine_lib
from retrieval.data import examples as examples_lib
from retrieval.data import features as features_lib
from retrieval.data import order as order_lib
from retrieval.data.vocab import Vocabulary


def tuning_fraction(config: ml_collections.ConfigDict) -> float:
    """``train.validation_fraction`` when the run holds out validation data itself: early stopping is on
    (``train.early_stopping_patience`` > 0) and the config gives no validation data; else 0."""
    t = config.get("train")
    if t is None or t.early_stopping_patience <= 0 or prepare.has_validation_data(config.data):
        return 0.0
    return float(t.validation_fraction)


def training_needs(config: ml_collections.ConfigDict) -> prepare.TrainingNeeds:
    """What the prepare stage needs of a run's model and training (its own settings come from ``config.data``):
    Item2Vec reads the interaction table, a two-tower model examples of its history length, with their age when its
    user tower reads it, and an automatic holdout when it early-stops without validation data."""
    if config.model_type == "item2vec":
        return prepare.TrainingNeeds(prepare.NO_EXAMPLES, int(config.seed))
    model = config.model
    return prepare.TrainingNeeds(prepare.NEXT_ITEM, int(config.seed), int(model.max_history),
                                 bool(model.user_tower.use_example_age), tuning_fraction(config),
                                 int(config.train.sequence_holdout_users))


def settings_of(config: ml_collections.ConfigDict, run_dir: str | Path,
                num_shards: Optional[int] = None) -> prepare.Settings:
    """The prepare stage's settings of a run's whole config: ``config.data`` and its :func:`training_needs`."""
    return prepare.Settings.from_data(config.data, run_dir, training_needs(config), num_shards)


@dataclasses.dataclass(frozen=True)
class PrepareSpec:
    """One prepare stage: the tasks' settings, the order asked for (``data.order``), the engine the tasks run on
    (``data.engine``: this process unless partitioned) and the published run whose vocabularies a warm start keeps."""

    settings: prepare.Settings
    order_request: str
    engine: str = "embedded"
    engine_address: str = ""
    engine_workers: int = 2
    engine_timeout_s: float = 30.0
    warm_start: Optional[artifacts.RunPaths] = None

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict, run_dir: str | Path,
                    warm_start: Optional[artifacts.RunPaths] = None) -> PrepareSpec:
        d = config.data
        return cls(settings_of(config, run_dir), d.order, d.engine, d.engine_address,
                   d.engine_workers, d.engine_timeout_s, warm_start)

    def run(self) -> prepare.Prepared:
        """Runs the stage on one partition in this process, or on ``settings.num_shards`` on the engine."""
        name = self.engine if self.settings.num_shards > 1 else "embedded"
        with engine_lib.open_engine(name, self.engine_address, self.engine_workers,
                                    timeout_s=self.engine_timeout_s) as engine:
            return prepare.run(self.settings, engine, self.order_request, self.warm_start)


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """What training needs to know of a run's prepared data: the prepare stage's summary, and whether the examples
    were streamed from the examples' own manifest (``examples.MANIFEST``, written beside the shards they describe)."""

    order: Optional[str] = None  # the decided order: "time", or order.SET
    example_kind: Optional[str] = None  # one of prepare.EXAMPLE_KINDS
    streamed: bool = False  # prepared on partitions: training streams the examples from the shard files
    holdout: Optional[dict] = None  # the automatic validation holdout (train.validation_fraction), when made
    items_per_user: Optional[float] = None  # training interactions per user, on average
    items: Optional[int] = None  # the catalogue's items

    @classmethod
    def read(cls, summary: Optional[dict], paths: artifacts.RunPaths) -> PreparedData:
        """The facts of the prepare stage's ``summary`` for the run at ``paths`` (no examples manifest: Item2Vec's
        runs, which read the interaction table, stream nothing)."""
        summary = summary or {}
        users, interactions = summary.get("users"), summary.get("train_interactions")
        manifest = prepare.examples_dir(paths) / examples_lib.MANIFEST
        streamed = manifest.exists() and bool(artifacts.read_json(manifest).get("streamed"))
        return cls((summary.get("order") or {}).get("order"), (summary.get("examples") or {}).get("kind"), streamed,
                   summary.get("tuning"), interactions / users if users and interactions else None,
                   summary.get("items"))

    @property
    def is_set(self) -> bool:
        return order_lib.is_set(self.order)

    def load_examples(self, paths: artifacts.RunPaths, config: ml_collections.ConfigDict,
                      tuning: bool = False) -> examples_lib.ExampleSource:
        """The run's training examples (``tuning``: those of the training data minus the holdout), held in memory
        unless the prepare was streamed."""
        return prepare.load_examples(paths, not self.streamed, config.model.max_history, config.data.history_keep,
                                     config.data.shuffle_buffer, tuning=tuning)


def feature_arrays(data: ml_collections.ConfigDict, paths: artifacts.RunPaths, which: str,
                   vocab: Vocabulary) -> Optional[dict[str, np.ndarray]]:
    """Per-index feature arrays of the ``item`` or ``user`` table (None without one); items are coded by the specs
    the prepare stage saved (the ones a catalogue refresh codes a new table with)."""
    path, declared = data[f"{which}_features_path"], data[f"{which}_features"]
    if not path:
        return None
    id_column = data.item_column if which == "item" else data.user_column
    specs = None
    if which == "item" and paths.item_features.exists():
        specs = features_lib.load_specs(paths.item_features)[1]
    return catalogue.feature_arrays(path, id_column, declared, f"data.{which}_features", vocab, specs)


def content_terms(data: ml_collections.ConfigDict, paths: artifacts.RunPaths, vocab: Vocabulary) -> Optional[int]:
    """The width of the catalogue's content vectors (``content.layout`` of its item table; None without one): the
    content profile keeps at most this many coordinates (``retrieval.models.layout``)."""
    arrays = feature_arrays(data, paths, "item", vocab)
    return None if arrays is None else content.term_count(arrays)

