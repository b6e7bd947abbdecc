"""The pipeline configs' common part: the sections every config holds and the two-tower sections.

Every key is declared once, with its default, rule and meaning, by the module that reads it (retrieval/jobs/sections.py
lists the sections; docs/reference.md is generated from them). The model-specific files (`two_tower.py`,
`youtube_dnn.py`, `item2vec.py`) start from `base_config()` and fill `config.model` and `config.train`. Any key can be overridden on the command line, e.g.
`--config.data.train_path=/data/log.parquet --config.train.epochs=5`.
"""

import ml_collections

from retrieval.jobs import sections


def override(config: ml_collections.ConfigDict, settings: dict) -> ml_collections.ConfigDict:
    """Sets dotted keys, as on the command line: ``override(config, {"train.epochs": 2})``."""
    for key, value in settings.items():
        node = config
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    return config


def two_tower_config(name: str) -> ml_collections.ConfigDict:
    """``base_config`` plus the two-tower sections: ``config.model`` (retrieval/models/config.py) and
    ``config.train`` (retrieval/settings.py), seeded from the top-level seed."""
    from retrieval.models.config import default_config as default_model_config
    from retrieval.settings import default_train_config

    config = base_config(name)
    config.model = default_model_config()
    config.model.seed = config.get_ref("seed")  # a reference: --config.seed reseeds the model and training too
    config.train = default_train_config()
    config.train.seed = config.get_ref("seed")
    return config


def base_config(name: str) -> ml_collections.ConfigDict:
    """The sections every pipeline config holds (top level, data, eval, index, gate, publish), their defaults,
    rules and meanings declared in retrieval/jobs/sections.py and retrieval/data/config.py."""
    return sections.base_config(name)
