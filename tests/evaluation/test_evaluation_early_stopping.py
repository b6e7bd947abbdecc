"""The early-stopping metric (``retrieval.evaluation.early_stopping.recall_fn``) ranks the items the headline ranks."""

import numpy as np
import pandas as pd
import tensorflow as tf

from retrieval.data.vocab import Vocabulary
from retrieval.evaluation.early_stopping import recall_fn


class FixedVectors:
    """What ``recall_fn`` reads of a ``TwoTowerModel``, with fixed vectors: users by user index, items by item index."""

    max_history = 4

    def __init__(self, users: np.ndarray, items: np.ndarray):
        self.users, self.items = users, items

    def user_vectors(self, user, history) -> tf.Tensor:  # traced, as recall_fn compiles it
        return tf.gather(self.users, user)

    def item_vectors(self, indices) -> np.ndarray:
        return self.items[np.asarray(indices)]

    def catalogue_vectors(self) -> np.ndarray:
        return self.items[2:]


def test_early_stopping_ranks_the_warm_items_as_the_headline_does(caplog):
    items = Vocabulary.from_ids(["w0", "w0", "w1", "w1", "w2"]).with_catalogue(["c0", "c1"])
    users = Vocabulary.from_ids(["u0", "u1"])
    assert items.ids[2:].tolist() == ["w0", "w1", "w2", "c0", "c1"] and users.ids[2:].tolist() == ["u0", "u1"]
    user_vectors = np.array([[0, 0], [0, 0], [1, 0], [0, 1]], np.float32)
    # For u0 (along the first axis) the cold c0 outscores her validation item w1, the best of the warm items she has
    # not clicked; u1's only validation item is the cold c1, which the headline does not rank either.
    item_vectors = np.array([[0, 0], [0, 0], [0.9, 0], [0.5, 0], [0.1, 0], [1, 0], [0, 1]], np.float32)
    train = pd.DataFrame({"user_id": ["u0", "u1"], "item_id": ["w0", "w2"], "timestamp": [0, 0]})
    validation = pd.DataFrame({"user_id": ["u0", "u1"], "item_id": ["w1", "c1"], "timestamp": [1, 1]})
    with caplog.at_level("INFO", logger="absl"):
        evaluate = recall_fn(FixedVectors(user_vectors, item_vectors), train, validation, items, users, k=1)
    assert evaluate() == 1.0  # u0 alone, her item first among the warm ones (0.0 among all, and u1 at 1.0)
    # The line says whose warm items these are: with a holdout they differ from the prepare stage's catalogue count.
    assert "among the 3 items this model trains on" in caplog.text
    assert "2 cold items and 1 validation pair left out" in caplog.text
    assert "an item clicked only in the holdout is cold here" in caplog.text
