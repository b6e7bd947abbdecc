"""The data section (``config.data``): what to read, how to split it, and how the prepare stage runs
(:mod:`retrieval.data.prepare`). Each key's default, rule and meaning are declared here once
(``retrieval.config_keys``); ``configs/base.py`` puts the section in every pipeline config."""

from retrieval.config_keys import COUNT, MAX_HISTORY, MAX_WORKERS, Key, Section, flag, integer, number, one_of, text
from retrieval.data import catalogue, engine, features, prepare, readers, splits
from retrieval.data.order import ORDERS

_KIND = "|".join(features.KINDS)
FEATURE_SPEC = text(pattern=rf"(\s*[^\s:,]+:({_KIND})\s*)(,\s*[^\s:,]+:({_KIND})\s*)*|",
                    pattern_doc=f"empty or 'name:kind' comma separated, kind among {', '.join(features.KINDS)}")

DATA = Section("data", (
    Key("train_path", "data/interactions.csv", text(nonempty=True),
        'Interaction log (or the training file when the split is "files").'),
    Key("test_path", "", text(),
        'Held-out test file, used when split == "files".'),
    Key("validation_path", "", text(),
        'Optional validation file for split == "files" (early stopping); empty: none.'),
    Key("format", "auto", one_of(readers.FORMATS),
        "File format: csv | tsv | parquet | movielens (ratings.dat or u.data) | user_items (`user item item ...` per "
        "line) | auto (guessed from the file name, logged)."),
    Key("order", "auto", one_of(ORDERS),
        'Order of each user\'s interactions: "time" (a sequence: timestamps, else file order; next-item examples), '
        '"none" (a set, e.g. a random-holdout benchmark split: every training pair is a target, its history a random '
        'subset of the user\'s other items) or "auto" (time with a timestamp column; otherwise none when the lines are '
        "sorted by item id or when shuffling each line leaves its adjacent pairs as common elsewhere: a permutation "
        "test, retrieval.data.order). The decision and its evidence are logged and written to the manifest. Splits "
        "that need time (leave_last_n, temporal) refuse set data."),
    Key("history_keep", 1.0, number(0, 1, low_open=True),
        "Set data only: share of each sampled history the user tower sees in training (the rest dropped at random, "
        "redrawn every epoch): a denoising regulariser like Mult-DAE's dropout; 1.0: the whole sampled history."),
    Key("user_column", "user_id", text(nonempty=True),
        "Column names in the input files (csv, tsv, parquet); each named column must exist. timestamp_column is empty "
        "when the log has no time (interactions then keep file order)."),
    Key("item_column", "item_id", text(nonempty=True)),
    Key("timestamp_column", "timestamp", text()),
    Key("item_features_path", "", text(),
        "Optional item feature table (csv/tsv/parquet) keyed by item_column; empty: ID-only item tower."),
    Key("item_features", "", FEATURE_SPEC,
        'Item feature columns to use and their kinds: "name:categorical", "name:multi" (`|`-separated values) or '
        '"name:numeric" or "name:text" (free text such as titles: lower-cased word tokens, mean-pooled), comma '
        'separated, e.g. "genres:multi,price:numeric,title:text".'),
    Key("catalogue", "item_features", one_of(catalogue.MODES),
        'What can be served (retrieval/data/catalogue.py): "item_features" (the item feature table\'s rows, items '
        "without training interactions included, embedded from their features; items with interactions but no row keep "
        'working with missing features) or "interactions" (only items seen in training). Without an item feature table '
        "the catalogue is the training items either way."),
    Key("cold_item_fraction", 0.0, number(0, 1, high_open=True),
        "Cold-start measurement: a seeded share of the items (by a hash of the id) loses all its training interactions "
        "to the test part; evaluation reports those test pairs apart (cold_items/...). Needs an item feature table and "
        'catalogue "item_features". 0: off.'),
    Key("user_features_path", "", text(),
        "Optional user feature table keyed by user_column, and its columns (same syntax as item_features)."),
    Key("user_features", "", FEATURE_SPEC),
    Key("split", "leave_last_n", one_of(splits.SPLITS),
        "How to split: leave_last_n (per user, by timestamp; the YoutubeDNN next-item protocol) | temporal (global "
        "cut-off) | random (per-user random holdout) | files (explicit train/test files)."),
    Key("holdout_n", 1, integer(1, MAX_HISTORY),
        "leave_last_n: items per user held out for test (and as many for validation when validation is true)."),
    Key("validation", False, flag(),
        "Also hold out a validation part (the items before the test ones), written to data/validation.parquet; with "
        "train.early_stopping_patience > 0, training stops on its full-corpus recall (see train.eval_*)."),
    Key("temporal_quantile", 0.9, number(0, 1, low_open=True, high_open=True),
        "temporal: interactions at or after this quantile of timestamps are test."),
    Key("holdout_fraction", 0.2, number(0, 1, low_open=True, high_open=True),
        "random: fraction of each user's interactions held out for test."),
    Key("unknown_policy", "keep", one_of(splits.POLICIES),
        'Test interactions whose user or item is unknown to training: "keep" (the evaluation counts unknown items and '
        'reports cold-start users separately), "drop" (removed; the count is in the prepare stage\'s summary) or "fail".'),
    Key("min_item_count", 1, integer(1, COUNT),
        "Items seen fewer times than this in training are out of vocabulary."),
    Key("streaming", "auto", one_of(prepare.MODES),
        'One prepare (retrieval/data/prepare.py) at any size: "off" runs its tasks on one partition in memory, "on" on '
        'num_shards partitions by hash(user) (peak memory follows one partition, not the log), "auto" turns it on for a '
        "log of at least streaming_min_mb. Every format, split and order; the same data either way. Streamed training "
        "reads the example shards from disk. Pair it with eval.max_users so evaluation reads a user sample."),
    Key("streaming_min_mb", 512, number(0, 1e9)),
    Key("num_shards", 16, integer(1, 65_536)),
    Key("shuffle_buffer", 65536, integer(1, 1 << 26),
        "Streamed training: examples' worth of the tf.data shuffle buffer (over blocks of 256 examples)."),
    Key("engine", "embedded", one_of(engine.ENGINES),
        'Where the streamed prepare\'s tasks run: "embedded" (this process) or "dask" (the dask.distributed scheduler at '
        'engine_address, e.g. "tcp://10.0.0.5:8786"; empty: a LocalCluster of engine_workers processes on 127.0.0.1).'),
    Key("engine_address", "", text()),
    Key("engine_workers", 2, integer(1, MAX_WORKERS)),
    Key("engine_timeout_s", 30.0, number(0, 3600, low_open=True),
        "Seconds to wait for the Dask scheduler at engine_address before failing with exit 2."),
    Key("max_examples_per_user", 0, integer(0, COUNT),
        "Cap next-item examples per user (most recent kept) so heavy users do not dominate; 0: no cap."),
), __name__)

