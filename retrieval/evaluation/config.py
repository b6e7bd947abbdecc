"""``config.eval``, declared once (``retrieval.config_keys``): what the evaluation of a run reads (cut-offs, the
baselines and their tuning budget, the bootstrap, the user sample). Nothing here imports TensorFlow."""

from __future__ import annotations

from retrieval import settings
from retrieval.config_keys import COUNT, MAX_K, Key, Section, flag, integer, integers, names, number
from retrieval.evaluation import baselines

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
        "items on 2 cores, where all of Gowalla's 41k take about 11 minutes a fit. Its lambda is tuned on at most the "
        "6,000 most clicked (2 s a fit), then refitted at this cap."),
    Key("ease_lambda", baselines.EASE_LAMBDA, number(0, 1e12, low_open=True),
        "EASE^R's L2 weight lambda (Steck 2019; 500 suits MovieLens-sized data) when it is not tuned (no holdout, or "
        "one fit does not fit eval.baseline_budget_s); tuning tries it first."),
    Key("baseline_budget_s", baselines.TUNING_BUDGET_S, number(0, 86_400),
        "Seconds each tunable baseline (item_knn, rp3beta, ease) may spend on its tuning on the run's holdout (the "
        "automatic validation holdout, else the validation data); a fit estimated to end past it is not started and "
        "the best point so far is kept, with a line saying so. At Gowalla's size (41k items, 5,000 users) rp3beta's "
        "27 points take about a minute, item_knn's 18 about a minute, ease's 5 (on 6,000 items) about 20 s. "
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
