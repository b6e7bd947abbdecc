"""Keys shared by every pipeline config: data, split, evaluation, index, gate, publishing.

The model-specific files (`two_tower.py`, `youtube_dnn.py`, `item2vec.py`) start from `base_config()` and fill
`config.model` and `config.train`. Any key can be overridden on the command line, e.g.
`--config.data.train_path=/data/log.parquet --config.train.epochs=5`.
"""

import ml_collections


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
    from retrieval.training import default_train_config

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

    config.data = ml_collections.ConfigDict()
    # Interaction log (or the training file when the split is "files").
    config.data.train_path = "data/interactions.csv"
    # Held-out test file, used when split == "files"; also accepted with other splits (then it replaces the split's
    # test part).
    config.data.test_path = ""
    # Optional validation file for split == "files" (early stopping); empty: none.
    config.data.validation_path = ""
    # File format: csv | tsv | parquet | movielens (ratings.dat or u.data) | user_items (`user item item ...` per
    # line) | auto (guessed from the file name, logged).
    config.data.format = "auto"
    # Order of each user's interactions: "time" (a sequence: timestamps, else file order; next-item examples),
    # "none" (a set, e.g. a random-holdout benchmark split: every training pair is a target, its history a random
    # subset of the user's other items) or "auto" (time with a timestamp column; for user_items files, none when
    # the lines are sorted by item id). The decision and its evidence are logged and written to the manifest.
    # Splits that need time (leave_last_n, temporal) refuse set data.
    config.data.order = "auto"
    # Set data only: share of each sampled history the user tower sees in training (the rest dropped at random,
    # redrawn every epoch): a denoising regulariser like Mult-DAE's dropout; 1.0: the whole sampled history.
    config.data.history_keep = 1.0
    # Column names in the input files (csv, tsv, parquet). timestamp_column may be empty when there is none.
    config.data.user_column = "user_id"
    config.data.item_column = "item_id"
    config.data.timestamp_column = "timestamp"
    # Optional item feature table (csv/tsv/parquet) keyed by item_column; empty: ID-only item tower.
    config.data.item_features_path = ""
    # Item feature columns to use and their kinds: "name:categorical", "name:multi" (`|`-separated values) or
    # "name:numeric", comma separated, e.g. "genres:multi,price:numeric".
    config.data.item_features = ""
    # Optional user feature table keyed by user_column, and its columns (same syntax as item_features).
    config.data.user_features_path = ""
    config.data.user_features = ""
    # How to split: leave_last_n (per user, by timestamp; the YoutubeDNN next-item protocol) | temporal (global
    # cut-off) | random (per-user random holdout) | files (explicit train/test files).
    config.data.split = "leave_last_n"
    # leave_last_n: items per user held out for test (and as many for validation when validation is true).
    config.data.holdout_n = 1
    # Also hold out a validation part (the items before the test ones), written to data/validation.parquet; with
    # train.early_stopping_patience > 0, training stops on its full-corpus recall (see train.eval_*).
    config.data.validation = False
    # temporal: interactions at or after this quantile of timestamps are test.
    config.data.temporal_quantile = 0.9
    # random: fraction of each user's interactions held out for test.
    config.data.holdout_fraction = 0.2
    # Test interactions whose user or item is unknown to training: "keep" (the evaluation counts unknown items and
    # reports cold-start users separately), "drop" (removed; the count is in the prepare stage's summary) or "fail".
    config.data.unknown_policy = "keep"
    # Items seen fewer times than this in training are out of vocabulary.
    config.data.min_item_count = 1
    # One prepare (retrieval/data/prepare.py) at any size: "off" runs its tasks on one partition in memory, "on" on
    # num_shards partitions by hash(user) (peak memory follows one partition, not the log), "auto" turns it on for a
    # log of at least streaming_min_mb. Every format, split and order; the same data either way. Streamed training
    # reads the example shards from disk. Pair it with eval.max_users so evaluation reads a user sample.
    config.data.streaming = "auto"
    config.data.streaming_min_mb = 512
    config.data.num_shards = 16
    # Streamed training: examples' worth of the tf.data shuffle buffer (over blocks of 256 examples).
    config.data.shuffle_buffer = 65536
    # Where the streamed prepare's tasks run: "embedded" (this process) or "dask" (the dask.distributed scheduler at
    # engine_address, e.g. "tcp://10.0.0.5:8786"; empty: a LocalCluster of engine_workers processes on 127.0.0.1).
    config.data.engine = "embedded"
    config.data.engine_address = ""
    config.data.engine_workers = 2
    # Seconds to wait for the Dask scheduler at engine_address before failing with exit 2.
    config.data.engine_timeout_s = 30.0

    config.eval = ml_collections.ConfigDict()
    # Cut-offs reported; the first one in `gate.compare` drives the gate. Full-corpus exact ranking.
    config.eval.ks = (10, 20, 50, 100)
    # Exclude each user's training items from the ranking ("seen excluded"; the standard protocol).
    config.eval.exclude_train = True
    # Baselines computed in the same run for the report: most_popular, random, item_knn, ease (EASE^R, skipped above
    # 20k items: it needs the dense item x item matrix).
    config.eval.baselines = ("most_popular", "random", "item_knn", "ease")
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
    # Initialise from the published run: known ids keep their embeddings, new ids start fresh.
    config.publish.warm_start = False
    return config
