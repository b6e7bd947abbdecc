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

from configs.base import base_config
from retrieval.models.config import default_config as default_model_config
from retrieval.training import default_train_config


def get_config():
    config = base_config("two_tower")
    # Which trainer runs: "two_tower" (TwoTowerModel) or "item2vec".
    config.model_type = "two_tower"
    # Cap next-item examples per user (most recent kept) so heavy users do not dominate; 0: no cap.
    config.data.max_examples_per_user = 0
    config.model = default_model_config()
    # In-batch softmax; negatives are the other positives of the (global) batch, corrected by log p(item in batch)
    # estimated while streaming.
    config.model.objective.name = "in_batch"
    config.model.objective.log_q = "streaming"
    # Example age needs real timestamps; benchmark splits (user_items) only have positions.
    config.model.user_tower.use_example_age = False
    config.train = default_train_config()
    config.train.seed = config.seed
    config.model.seed = config.seed
    return config
