"""The run's own sections, declared once (``retrieval.config_keys``): the top-level keys, ``config.eval``,
``config.index``, ``config.gate`` and ``config.publish`` (what the job's stages read), and :data:`SECTIONS`, the
registry of every section in the order of the reference page: the rule table of ``config_checks`` and
``tools/config_reference.py`` read it."""

from __future__ import annotations

import ml_collections

from retrieval import locations, settings
from retrieval.config_keys import COUNT, MAX_K, SEED, Key, Section, flag, integer, integers, names, number, one_of, text
from retrieval.data.config import DATA
from retrieval.evaluation import baselines
from retrieval.jobs import gate
from retrieval.models.config import MODEL
from retrieval.models.item2vec import ITEM2VEC

FLOORS_SPEC = text(pattern=r"(\s*[^\s=,]+\s*=\s*[^\s=,]+\s*)(,\s*[^\s=,]+\s*=\s*[^\s=,]+\s*)*|",
                   pattern_doc="empty or 'metric=floor' comma separated, e.g. 'recall@20=0.05,ndcg@20=0.02'")

TOP = Section("", (
    Key("name", "run", text(pattern=locations.NAME_PATTERN.pattern, pattern_doc=locations.NAME_RULE),
        "Name of the model directory: runs go to <output_dir>/<name>/<run_id>/, the published one is <name>/latest."),
    Key("seed", 42, SEED,
        "Seed of every random choice (split, sampling, initialisation, shuffling); recorded in the run's manifest."),
    Key("model_type", "two_tower", one_of(settings.MODEL_TYPES),
        'Which trainer runs: "two_tower" (TwoTowerModel) or "item2vec".'),
), __name__)

EVAL = Section("eval", (
    Key("ks", settings.DEFAULT_KS, integers(1, MAX_K, nonempty=True),
        "Cut-offs reported; the first one in `gate.compare` drives the gate. Full-corpus exact ranking."),
    Key("exclude_train", True, flag(),
        'Exclude each user\'s training items from the ranking ("seen excluded"; the standard protocol).'),
    Key("baselines", ("most_popular", "random", "item_knn", "rp3beta", "ease"), names(baselines.BASELINES),
        "Baselines computed in the same run for the report: most_popular, random, item_knn (shrinkage, asymmetric "
        "cosine), rp3beta, ease (EASE^R: skipped, with the reason logged and recorded, when its dense item x item "
        "matrix does not fit eval.baseline_memory_mb). item_knn, rp3beta and ease are tuned on the run's holdout "
        "within eval.baseline_budget_s, then refitted on all training data (retrieval/evaluation/"
        "baseline_tuning.py)."),
    Key("baseline_memory_mb", baselines.BASELINE_MEMORY_MB, number(1, 1 << 30),
        "Memory (MiB) a baseline may take: EASE^R needs about 4 * items * (items + 3 * 2048) bytes; 8192 fits up to "
        "about 43k items (Gowalla's 41k: 7.4 GB, on a 24 GB machine)."),
    Key("ease_max_items", baselines.EASE_MAX_ITEMS, integer(0, COUNT),
        "EASE^R models at most this many of the most clicked items (0: all); the others are not ranked by it and "
        "leave its users' rows, and the report says how many it modelled. Its fit is cubic in them: 35 s at 15,000 "
        "items on 2 cores, so its lambdas are tuned within eval.baseline_budget_s, where all of Gowalla's 41k take "
        "about 11 minutes a fit."),
    Key("ease_lambda", baselines.EASE_LAMBDA, number(0, 1e12, low_open=True),
        "EASE^R's L2 weight lambda (Steck 2019; 500 suits MovieLens-sized data) when it is not tuned (no holdout, or "
        "one fit does not fit eval.baseline_budget_s); tuning tries it first."),
    Key("baseline_budget_s", baselines.TUNING_BUDGET_S, number(0, 86_400),
        "Seconds each tunable baseline (item_knn, rp3beta, ease) may spend on its tuning on the run's holdout (the "
        "automatic validation holdout, else the validation data); a fit estimated to end past it is not started and "
        "the best point so far is kept, with a line saying so. At Gowalla's size (41k items, 5,000 users) rp3beta's "
        "27 points take about a minute, item_knn's 18 about a minute, ease's 5 (at eval.ease_max_items 15,000) about 3. "
        "0: no tuning."),
    Key("baseline_tuning_users", baselines.TUNING_USERS, integer(1, COUNT),
        "Validation users (a seeded sample) on whom each point of a baseline's grid is scored (recall@k at the "
        "headline's k, the second of eval.ks)."),
    Key("bootstrap", 200, integer(0, 100_000),
        "Bootstrap resamples over users for the 95% intervals (0: none)."),
    Key("max_users", 0, integer(0, COUNT),
        "Evaluate a seeded uniform sample of this many test users (0: all), and early-stop on as many validation users. "
        "For logs larger than memory: only the sample's rows are read; item_knn, rp3beta and ease are then skipped "
        "(they need the whole user x item matrix)."),
), __name__)

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
SECTIONS: tuple[Section, ...] = (TOP, DATA, EVAL, INDEX, GATE, PUBLISH, MODEL, settings.TRAIN, ITEM2VEC)


def base_config(name: str) -> ml_collections.ConfigDict:
    """The sections every pipeline config holds: the top level (``name`` set), data, eval, index, gate, publish."""
    config = TOP.fill(ml_collections.ConfigDict())
    config.name = name
    for section in (DATA, EVAL, INDEX, GATE, PUBLISH):
        config[section.name] = section.config()
    return config
