"""Two-tower for a catalogue with item features, items nobody has clicked included (cold start).

`configs/two_tower.py` plus an item tower that can place an item from its features alone: a ReLU hidden layer over
[id embedding, feature encodings], 32-wide feature embeddings, item-id dropout 0.15 (DropoutNet), a learned
content-match term between the history's features and the item's and a second user vector for the items placed by
their features alone (the cold head), trained for eight epochs (longer training ranks warm items better and cold ones
worse). Give the item table and its columns; its rows are the catalogue
(`data.catalogue`), and `pipelines.refresh` embeds new rows later without retraining:

    python -m pipelines.train --config=configs/catalogue.py --config.data.train_path=clicks.parquet \
        --config.data.item_features_path=items.csv --config.data.item_features=title:text,genres:multi

The item tower settings were chosen on validation data: MovieLens-1M (partial) with titles, genres and years, a
seeded 10% of the movies cold, cold items of seeds 7 and 8 (benchmarks/bench_cold_start.py, JOURNAL.md "Issue 35").
"""

from configs.two_tower import get_config as two_tower_config


def get_config():
    config = two_tower_config()
    config.name = "catalogue"
    # Without a hidden layer the cold vector is linear in the features: among the cold items of the validation seed,
    # recall@20 0.1795 (0.2049 with this layer, both at id dropout 0.5) against the content baseline's 0.1605.
    config.model.item_tower.hidden_units = (256,)
    config.model.item_tower.feature_embedding_dim = 32
    # Id dropout trades warm quality for cold: on validation (warm: the automatic holdout; cold: seed 7's cold items)
    # 0.15 read 0.2778 / 0.1993, 0.3 read 0.2684 / 0.1964, 0.5 read 0.2534 / 0.2049; without it the cold items
    # rank among themselves as well but hardly ever reach a top 20 of the whole catalogue (test: 0.0022 vs 0.0340).
    config.model.item_tower.id_dropout = 0.15
    # The content-match term (a shared linear map of the item's and of the history's mean feature encodings, added to
    # both vectors): on validation it raised every column on both seeds, among cold / warm validation recall@20
    # 0.1993 -> 0.2027 / 0.2778 -> 0.2858 (seed 7) and 0.1779 -> 0.1921 / 0.2721 -> 0.2821 (seed 8), against the
    # content baseline's 0.1605 and 0.1610; on the test seed (42) warm recall@20 0.2601 -> 0.2738 and among cold
    # 0.1728 -> 0.1688 against 0.1527 (JOURNAL.md, "Issue 35: a content-match term").
    config.model.item_tower.content_match = True
    # The cold head (a second user vector for the items placed by their features alone, in the same softmax): on
    # validation among cold / warm validation recall@20 0.2027 -> 0.2153 / 0.2858 -> 0.2811 (seed 7) and
    # 0.1921 -> 0.2048 / 0.2821 -> 0.2764 (seed 8); among cold NDCG@20 +0.017 and +0.016
    # (JOURNAL.md, "Issue 35: a cold head").
    config.model.item_tower.cold_head = True
    # With the cold head, the content profile's cosine (g 0.3) joins the cold block's score and trains with it: on
    # validation among cold / warm validation recall@20 0.2153 -> 0.2237 / 0.2811 -> 0.2764 (seed 7) and
    # 0.2048 -> 0.2100 / 0.2764 -> 0.2818 (seed 8), among cold NDCG@20 +0.007 and +0.006
    # (JOURNAL.md, "Issue 35: the content profile in the cold head").
    config.model.item_tower.content_profile_weight = 0.3
    # Eight epochs, the cosine schedule over them (early stopping on the automatic holdout still picks the refit's
    # epoch count within them): the feature path places cold items best early and loses some of it as training goes
    # on, while warm quality keeps rising. On two validation cold draws (7, 8; bench_cold_start --split=validation),
    # warm recall@20 / NDCG@20, cold items among themselves (ratio to the content profile), cold in the whole
    # catalogue: 4 epochs 0.3008 / 0.1338, 1.31x, 0.0431 and 0.2875 / 0.1282, 1.40x, 0.0600; 8 epochs
    # 0.3205 / 0.1455, 1.26x, 0.0405 and 0.3122 / 0.1400, 1.35x, 0.0623; 12 epochs 0.3226 / 0.1475, 1.22x, 0.0366 and
    # 0.3249 / 0.1466, 1.28x, 0.0550; configs/two_tower.py with the same table 0.3277 / 0.1470, 0.99x, 0.0368 and
    # 0.3368 / 0.1558, 0.97x, 0.0466 (JOURNAL.md,
    # "Issue 49, item 1: the schedule's trade at today's code, and three levers for cold items that lost").
    config.train.epochs = 8
    config.train.large_catalogue_items = 0  # eight epochs at every catalogue size (two_tower's schedule is by size)
    config.train.time_budget_s = 0.0  # ... all eight, however long they take (two_tower's has a 15-minute budget)
    return config
