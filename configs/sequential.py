"""A self-attentive user tower for sequences (SASRec: Kang and McAuley 2018) trained at every position at once.

For next-item data (items in time order; leave-last-one-out): the history is read in order by a causal Transformer
(`model.user_tower.pooling="self_attention"`, retrieval/models/sequence_encoder.py) whose state at the most recent
item is the user vector, and every position of a user's sequence is a target in one pass (one example per user,
`data.max_examples_per_user=1`). Export and serving are the recipe's: the same `serving_default(user_id, history)`,
the history most recent first. On set data (data.order=none) the tower falls back to mean pooling (logged): use
configs/two_tower.py there.

    python -m pipelines.train --config=configs/sequential.py --config.data.format=user_items \
        --config.data.train_path=Beauty.txt --config.data.split=leave_last_n --config.data.holdout_n=1

The values set here carry one-line reasons; the validation run behind them is in benchmarks/JOURNAL.md ("Issue 37").
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
    # A shared input / output item table (SASRec's), the encoder's state projected linearly (no hidden layer), 128
    # wide: on Beauty's automatic holdout validation HR@20 reached 0.1426 against 0.1371 at SASRec's 64 (30-epoch
    # schedules), for about twice the CPU time of an epoch (JOURNAL.md, "Issue 37: width and schedule").
    config.model.embedding_dim = 128
    config.model.item_tower.id_embedding_dim = 128
    config.model.user_tower.share_item_embeddings = True
    config.model.user_tower.hidden_units = ()
    # A seeded 30% of the history's items hidden behind a learned mask embedding in training (item-mask augmentation;
    # the targets stay): on Beauty's automatic holdout, validation HR@20 at epochs 10-16 read 0.1411-0.1426 without
    # it, 0.1430-0.1446 at 0.1, 0.1420-0.1472 at 0.2 (two runs) and 0.1423-0.1469 at 0.3, rising to 0.1504 by epoch 21
    # (JOURNAL.md, "Issue 37: item-mask augmentation").
    config.model.user_tower.sequence.item_mask = 0.3
    # 256 users a step (about 1,500 positions: the in-batch negatives of every position).
    config.train.batch_size = 256
    # A fixed 30 epochs on a cosine schedule, no holdout and no refit (one training instead of early stopping plus a
    # refit): at width 128 the 30-epoch schedule read 0.1426 on the holdout against 0.1404 for 20 epochs (whose
    # learning rate has fallen further by the plateau, epochs 10-16). For data unlike Beauty turn early stopping
    # back on: --config.train.early_stopping_patience=8 (the holdout and refit of configs/two_tower.py).
    config.train.epochs = 30
    config.train.early_stopping_patience = 0
    config.train.large_catalogue_items = 0  # this fixed schedule at every catalogue size (two_tower's is by size)
    return config
