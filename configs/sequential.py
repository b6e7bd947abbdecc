"""A self-attentive user tower for sequences (SASRec: Kang and McAuley 2018) trained at every position at once.

For next-item data (items in time order; leave-last-one-out): the history is read in order by a causal Transformer
(`model.user_tower.pooling="self_attention"`, retrieval/models/sequence_encoder.py) whose state at the most recent
item is the user vector, and every position of a user's sequence is a target in one pass (one example per user,
`data.max_examples_per_user=1`). Export and serving are the recipe's: the same `serving_default(user_id, history)`,
the history most recent first. On set data (data.order=none) the tower falls back to mean pooling (logged): use
configs/two_tower.py there.

    python -m pipelines.train --config=configs/sequential.py --config.data.format=user_items \
        --config.data.train_path=Beauty.txt --config.data.split=leave_last_n --config.data.holdout_n=1

The tower is the "self_attention" variant that configs/two_tower.py tries on sequences held in memory
(retrieval/jobs/variants.py, where each value carries its reason; the validation runs are in benchmarks/JOURNAL.md,
"Issue 37"); this config trains it alone, on a fixed schedule.
"""

from configs import two_tower
from retrieval.jobs import variants


def get_config():
    config = variants.apply(two_tower.get_config(), "self_attention")
    config.name = "sequential"
    config.train.variants = ()  # the tower is chosen here, not tried
    # The variant's 30 epochs (variants.SEQUENCE_EPOCHS) on a cosine schedule, all of them: no holdout and no refit
    # (one training instead of early stopping plus a refit): at width 128 the 30-epoch schedule read 0.1426 on the
    # holdout against 0.1404 for 20 epochs (whose learning rate has fallen further by the plateau, epochs 10-16).
    # For data unlike Beauty turn early stopping back on: --config.train.early_stopping_patience=8 (the holdout and
    # refit of configs/two_tower.py).
    config.train.early_stopping_patience = 0
    config.train.large_catalogue_items = 0  # this fixed schedule at every catalogue size (two_tower's is by size)
    config.train.time_budget_s = 0.0  # ... and all of it, however long it takes (two_tower's has a 15-minute budget)
    return config
