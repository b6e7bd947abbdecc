"""A self-attentive user tower for sequences (SASRec: Kang and McAuley 2018) trained at every position at once.

For next-item data (items in time order; leave-last-one-out): the history is read in order by a causal Transformer
(`model.user_tower.pooling="self_attention"`, retrieval/models/sequence_encoder.py) whose state at the most recent
item is the user vector, and every position of a user's sequence is a target in one pass (one example per user,
`data.max_examples_per_user=1`). Export and serving are the recipe's: the same `serving_default(user_id, history)`,
the history most recent first. On set data (data.order=none) the tower falls back to mean pooling (logged): use
configs/two_tower.py there.

    python -m pipelines.train --config=configs/sequential.py --config.data.format=user_items \
        --config.data.train_path=Beauty.txt --config.data.split=leave_last_n --config.data.holdout_n=1

The values set here carry one-line reasons; the validation runs behind them are in benchmarks/RESULTS.md
("Issue 37").
"""

from configs import two_tower


def get_config():
    config = two_tower.get_config()
    config.name = "sequential"
    config.model.user_tower.pooling = "self_attention"
    config.model.user_tower.sequence.every_position = True
    # One example per user, its most recent label: with every_position it carries all of the user's next-item
    # targets (the last max_history + 1 items), SASRec's training.
    config.data.max_examples_per_user = 1
    config.data.history_keep = 1.0  # (set data only; sequences never drop history items)
    return config
