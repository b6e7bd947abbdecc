"""The run's own sections, declared once (``retrieval.config_keys``): ``config.index``, ``config.gate`` and
``config.publish`` (what the job's stages read); :data:`SECTIONS`, the registry of every section in the order of the
reference page (the top level's in ``retrieval.settings``, each component's beside it: ``data.config``,
``evaluation.config``, ``models.config``), which the rule table of ``config_checks`` and
``tools/config_reference.py`` read; and :class:`Settled`, a config read through every declared default."""

from __future__ import annotations

from typing import Mapping

import ml_collections

from retrieval import config_keys, locations, settings
from retrieval.config_keys import COUNT, MAX_K, Key, Section, flag, integer, names, number, text
from retrieval.data.config import DATA
from retrieval.evaluation.config import EVAL
from retrieval.jobs import gate
from retrieval.models.config import MODEL
from retrieval.models.item2vec import ITEM2VEC

FLOORS_SPEC = text(pattern=r"(\s*[^\s=,]+\s*=\s*[^\s=,]+\s*)(,\s*[^\s=,]+\s*=\s*[^\s=,]+\s*)*|",
                   pattern_doc="empty or 'metric=floor' comma separated, e.g. 'recall@20=0.05,ndcg@20=0.02'")


INDEX = Section("index", (
    Key("factory", "auto", text(nonempty=True),
        'FAISS index factory string (Flat, HNSW32, IVF1024,Flat, IVF1024,PQ16, ...) or "auto" (by catalogue size).'),
    Key("recall_floor", 0.95, number(0, 1),
        "Self-check: recall@k of the index against exact search must reach this floor or the build fails."),
    Key("recall_k", 100, integer(1, MAX_K)),
), __name__)

GATE = Section("gate", (
    Key("floors", "recall@20=0.01", FLOORS_SPEC,
        'Publish only if these metrics reach their floors ("metric=floor" comma separated).'),
    Key("compare", ("recall@20", "ndcg@20"), names(),
        "... and do not fall more than this fraction below the published run on these metrics."),
    Key("max_regression", 0.05, number(0, 1)),
    Key("min_lift_over_popular", 0.05, number(gate.OFF, 1e6),
        "... and beat the most-popular baseline of the same evaluation by this relative margin on the first `compare` "
        "metric (0.05: at least 5% above it), so an untrained or collapsed model is never published whatever the data. "
        'Needs "most_popular" in eval.baselines; -1 turns the check off.'),
    Key("beat_best_baseline", False, flag(),
        "... and, when true, reach the best baseline of the same evaluation (the highest of eval.baselines) on the "
        "first `compare` metric. Off: a model that trails it is published, and stdout says it trails in one line."),
), __name__)

PUBLISH = Section("publish", (
    Key("keep_last", 5, integer(0, COUNT),
        "Finished runs to keep in the model directory (the published one is always kept)."),
    Key("warm_start", False, flag(),
        "Initialise from the lineage's published run: known ids keep their embeddings, new ids start fresh."),
    Key("lineage", "", text(pattern=f"(?:{locations.NAME_PATTERN.pattern})?",
                            pattern_doc=f"empty or {locations.NAME_RULE}"),
        "Lineage of the run (docs/operations.md): the gate compares a run only with its lineage's published run, and "
        "`latest` moves only with runs of its own lineage (others publish to lineages/<lineage>/latest). Empty: derived "
        "from the data source (data-<digest of the input paths and columns>); name it when the input path changes from "
        "run to run (dated files) or to keep two datasets apart under one path."),
), __name__)

# Every section, in the order of the reference page (a pipeline config holds the ones its model type reads).
SECTIONS: tuple[Section, ...] = (settings.TOP, DATA, EVAL, INDEX, GATE, PUBLISH, MODEL, settings.TRAIN, ITEM2VEC)


def base_config(name: str) -> ml_collections.ConfigDict:
    """The sections every pipeline config holds: the top level (``name`` set), data, eval, index, gate, publish."""
    config = settings.TOP.fill(ml_collections.ConfigDict())
    config.name = name
    for section in (DATA, EVAL, INDEX, GATE, PUBLISH):
        config[section.name] = section.config()
    return config


class Settled(config_keys.Settled):
    """Every declared key of every section (:data:`SECTIONS`) by its dotted name: the config's value, or its declared
    default (``config_keys.Settled``)."""

    def __init__(self, config: Mapping):
        super().__init__(config, SECTIONS)
