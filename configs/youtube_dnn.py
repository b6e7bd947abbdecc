"""YoutubeDNN (Covington et al. 2016): history pooling plus user and item features, sampled softmax with log-Q.

The user tower mean-pools the watch history, adds the user attribute and the example age; the item tower embeds the
item id and its genres. Trained with sampled softmax: negatives drawn from the unigram^0.75 proposal, logits minus
log expected count, accidental hits removed.

    python -m pipelines.train --config=configs/youtube_dnn.py

Every key is declared (default, rule, meaning) beside its reader, config.model in retrieval/models/config.py (MODEL),
config.train in retrieval/settings.py (TRAIN), and listed in docs/reference.md; the values set here are explained
beside them.
"""

from configs.base import two_tower_config


def get_config():
    config = two_tower_config("youtube_dnn")
    # The bundled data's feature tables: genres (multi-valued) per item, a segment per user.
    config.data.item_features_path = "data/items.csv"
    config.data.item_features = "genres:multi"
    config.data.user_features_path = "data/users.csv"
    config.data.user_features = "segment:categorical"
    # Sampled softmax over shared negatives from the unigram^0.75 proposal (Jean et al. 2015).
    config.model.objective.name = "sampled_softmax"
    config.model.objective.num_negatives = 1024
    config.model.objective.sampler = "unigram"
    config.model.user_tower.use_example_age = True
    return config
