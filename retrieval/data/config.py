"""The documented defaults of the data section (``config.data``): what to read, how to split it, and how the
prepare stage runs (:mod:`retrieval.data.prepare`). ``configs/base.py`` puts them in every pipeline config; every key
has a rule in ``retrieval/jobs/config_checks.py`` and a line in ``docs/reference.md``."""

import ml_collections


def default_data_config() -> ml_collections.ConfigDict:
    """Returns the ``config.data`` section."""
    config = ml_collections.ConfigDict()
    # Interaction log (or the training file when the split is "files").
    config.train_path = "data/interactions.csv"
    # Held-out test file, used when split == "files".
    config.test_path = ""
    # Optional validation file for split == "files" (early stopping); empty: none.
    config.validation_path = ""
    # File format: csv | tsv | parquet | movielens (ratings.dat or u.data) | user_items (`user item item ...` per
    # line) | auto (guessed from the file name, logged).
    config.format = "auto"
    # Order of each user's interactions: "time" (a sequence: timestamps, else file order; next-item examples),
    # "none" (a set, e.g. a random-holdout benchmark split: every training pair is a target, its history a random
    # subset of the user's other items) or "auto" (time with a timestamp column; for user_items files, none when
    # the lines are sorted by item id). The decision and its evidence are logged and written to the manifest.
    # Splits that need time (leave_last_n, temporal) refuse set data.
    config.order = "auto"
    # Set data only: share of each sampled history the user tower sees in training (the rest dropped at random,
    # redrawn every epoch): a denoising regulariser like Mult-DAE's dropout; 1.0: the whole sampled history.
    config.history_keep = 1.0
    # Column names in the input files (csv, tsv, parquet); each named column must exist. timestamp_column is empty
    # when the log has no time (interactions then keep file order).
    config.user_column = "user_id"
    config.item_column = "item_id"
    config.timestamp_column = "timestamp"
    # Optional item feature table (csv/tsv/parquet) keyed by item_column; empty: ID-only item tower.
    config.item_features_path = ""
    # Item feature columns to use and their kinds: "name:categorical", "name:multi" (`|`-separated values) or
    # "name:numeric" or "name:text" (free text such as titles: lower-cased word tokens, mean-pooled), comma
    # separated, e.g. "genres:multi,price:numeric,title:text".
    config.item_features = ""
    # What can be served (retrieval/data/catalogue.py): "item_features" (the item feature table's rows, items without
    # training interactions included, embedded from their features; items with interactions but no row keep working
    # with missing features) or "interactions" (only items seen in training). Without an item feature table the
    # catalogue is the training items either way.
    config.catalogue = "item_features"
    # Cold-start measurement: a seeded share of the items (by a hash of the id) loses all its training interactions
    # to the test part; evaluation reports those test pairs apart (cold_items/...). Needs an item feature table and
    # catalogue "item_features". 0: off.
    config.cold_item_fraction = 0.0
    # Optional user feature table keyed by user_column, and its columns (same syntax as item_features).
    config.user_features_path = ""
    config.user_features = ""
    # How to split: leave_last_n (per user, by timestamp; the YoutubeDNN next-item protocol) | temporal (global
    # cut-off) | random (per-user random holdout) | files (explicit train/test files).
    config.split = "leave_last_n"
    # leave_last_n: items per user held out for test (and as many for validation when validation is true).
    config.holdout_n = 1
    # Also hold out a validation part (the items before the test ones), written to data/validation.parquet; with
    # train.early_stopping_patience > 0, training stops on its full-corpus recall (see train.eval_*).
    config.validation = False
    # temporal: interactions at or after this quantile of timestamps are test.
    config.temporal_quantile = 0.9
    # random: fraction of each user's interactions held out for test.
    config.holdout_fraction = 0.2
    # Test interactions whose user or item is unknown to training: "keep" (the evaluation counts unknown items and
    # reports cold-start users separately), "drop" (removed; the count is in the prepare stage's summary) or "fail".
    config.unknown_policy = "keep"
    # Items seen fewer times than this in training are out of vocabulary.
    config.min_item_count = 1
    # One prepare (retrieval/data/prepare.py) at any size: "off" runs its tasks on one partition in memory, "on" on
    # num_shards partitions by hash(user) (peak memory follows one partition, not the log), "auto" turns it on for a
    # log of at least streaming_min_mb. Every format, split and order; the same data either way. Streamed training
    # reads the example shards from disk. Pair it with eval.max_users so evaluation reads a user sample.
    config.streaming = "auto"
    config.streaming_min_mb = 512
    config.num_shards = 16
    # Streamed training: examples' worth of the tf.data shuffle buffer (over blocks of 256 examples).
    config.shuffle_buffer = 65536
    # Where the streamed prepare's tasks run: "embedded" (this process) or "dask" (the dask.distributed scheduler at
    # engine_address, e.g. "tcp://10.0.0.5:8786"; empty: a LocalCluster of engine_workers processes on 127.0.0.1).
    config.engine = "embedded"
    config.engine_address = ""
    config.engine_workers = 2
    # Seconds to wait for the Dask scheduler at engine_address before failing with exit 2.
    config.engine_timeout_s = 30.0
    return config
