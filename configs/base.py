"""Keys shared by every pipeline config: data, split, evaluation, index, gate, publishing.

The model-specific files (`two_tower.py`, `youtube_dnn.py`, `item2vec.py`) start from `base_config()` and fill
`config.model` and `config.train`. Any key can be overridden on the command line, e.g.
`--config.data.train_path=/data/log.parquet --config.train.epochs=5`.
"""

import ml_collections

from retrieval.data.config import default_data_config


def override(config: ml_collections.ConfigDict, settings: dict) -> ml_collections.ConfigDict:
    """Sets dotted keys, as on the command line: ``override(config, {"train.epochs": 2})``."""
    for key, value in settings.items():
        node = config
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    return config


def two_tower_config(name: str) -> ml_collections.ConfigDict:
    """``base_config`` plus the two-tower sections: ``config.model`` (retrieval/models/config.py) and
    ``config.train`` (retrieval/training.py, default_train_config), seeded from the top-level seed."""
    from retrieval.models.config import default_config as default_model_config
    from retrieval.settings import default_train_config

    config = base_config(name)
    # Which trainer runs: "two_tower" (TwoTowerModel) or "item2vec".
    config.model_type = "two_tower"
    # Cap next-item examples per user (most recent kept) so heavy users do not dominate; 0: no cap.
    config.data.max_examples_per_user = 0
    config.model = default_model_config()
    config.model.seed = config.get_ref("seed")  # a reference: --config.seed reseeds the model and training too
    config.train = default_train_config()
    config.train.seed = config.get_ref("seed")
    return config


def base_config(name: str) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    # Name of the model directory: runs go to <output_dir>/<name>/<run_id>/, the published one is <name>/latest.
    config.name = name
    # Seed of every random choice (split, sampling, initialisation, shuffling); recorded in the run's manifest.
    config.seed = 42

    # What to read, how to split it, how the prepare stage runs: retrieval/data/config.py.
    config.data = default_data_config()

    config.eval = ml_collections.ConfigDict()
    # Cut-offs reported; the first one in `gate.compare` drives the gate. Full-corpus exact ranking.
    config.eval.ks = (10, 20, 50, 100)
    # Exclude each user's training items from the ranking ("seen excluded"; the standard protocol).
    config.eval.exclude_train = True
    # Baselines computed in the same run for the report: most_popular, random, item_knn, ease (EASE^R: skipped, with
    # the reason logged and recorded, when its dense item x item matrix does not fit eval.baseline_memory_mb).
    config.eval.baselines = ("most_popular", "random", "item_knn", "ease")
    # Memory (MiB) a baseline may take: EASE^R needs about 4 * items * (items + 3 * 4096) bytes (4096: up to
    # about 27k items).
    config.eval.baseline_memory_mb = 4096
    # EASE^R's L2 weight lambda (Steck 2019; 500 suits MovieLens-sized data).
    config.eval.ease_lambda = 500.0
    # Bootstrap resamples over users for the 95% intervals (0: none).
    config.eval.bootstrap = 200
    # Evaluate a seeded uniform sample of this many test users (0: all), and early-stop on as many validation users.
    # For logs larger than memory: only the sample's rows are read; item_knn and ease are then skipped (they need
    # the whole user x item matrix).
    config.eval.max_users = 0

    config.index = ml_collections.ConfigDict()
    # FAISS index factory string (Flat, HNSW32, IVF1024,Flat, IVF1024,PQ16, ...) or "auto" (by catalogue size).
    config.index.factory = "auto"
    # Self-check: recall@k of the index against exact search must reach this floor or the build fails.
    config.index.recall_floor = 0.95
    config.index.recall_k = 100

    config.gate = ml_collections.ConfigDict()
    # Publish only if these metrics reach their floors ("metric=floor" comma separated).
    config.gate.floors = "recall@20=0.01"
    # ... and do not fall more than this fraction below the published run on these metrics.
    config.gate.compare = ("recall@20", "ndcg@20")
    config.gate.max_regression = 0.05
    # ... and beat the most-popular baseline of the same evaluation by this relative margin on the first `compare`
    # metric (0.05: at least 5% above it), so an untrained or collapsed model is never published whatever the data.
    # Needs "most_popular" in eval.baselines; -1 turns the check off.
    config.gate.min_lift_over_popular = 0.05

    config.publish = ml_collections.ConfigDict()
    # Finished runs to keep in the model directory (the published one is always kept).
    config.publish.keep_last = 5
    # Initialise from the lineage's published run: known ids keep their embeddings, new ids start fresh.
    config.publish.warm_start = False
    # Lineage of the run (docs/operations.md): the gate compares a run only with its lineage's published run, and
    # `latest` moves only with runs of its own lineage (others publish to lineages/<lineage>/latest). Empty: derived
    # from the data source (data-<digest of the input paths and columns>); name it when the input path changes
    # from run to run (dated files) or to keep two datasets apart under one path.
    config.publish.lineage = ""
    return config
