"""Two-tower retrieval, in-batch softmax with streaming log-Q correction (Yi et al. 2019).

The ID-only model used on benchmark splits: with no feature tables given, the item tower is the item-id embedding
and the user tower pools the history. Add features with `--config.data.item_features_path=...`
`--config.data.item_features=genres:multi` (and `user_features_path` / `user_features`).

    python -m pipelines.train --config=configs/two_tower.py
    python -m pipelines.train --config=configs/two_tower.py --config.data.format=user_items \\
        --config.data.split=files --config.data.train_path=train.txt --config.data.test_path=test.txt

Keys: data/eval/index/gate/publish are documented in configs/base.py, config.model in retrieval/models/config.py,
config.train in retrieval/training.py (default_train_config); the values set here are explained beside them.
"""

from configs.base import two_tower_config


def get_config():
    config = two_tower_config("two_tower")
    # In-batch softmax; negatives are the other positives of the (global) batch, corrected by log p(item in batch)
    # estimated while streaming.
    config.model.objective.name = "in_batch"
    config.model.objective.log_q = "streaming"
    # Example age needs real timestamps; benchmark splits (user_items) only have positions.
    config.model.user_tower.use_example_age = False
    return config
