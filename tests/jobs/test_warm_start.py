"""retrieval.jobs.warm_start across two days of data that differ: ids dropped, ids added, counts reordered.

Yesterday's run knew items i0..i9 (i0 most frequent) and users u0..u4; today i3, i7 and u0 are gone, i10, i11 and u5
are new, and the counts are reversed, so every position differs between the two vocabularies and only a copy by id
gives each id its own trained row. The two tiny models differ in seed so that no row matches another by chance.
"""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest

from retrieval import training
from retrieval.artifacts import RunPaths
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.models import build_model, default_config
from retrieval.jobs import warm_start

OLD_ITEMS = {f"i{k}": 10 - k for k in range(10)}
NEW_ITEMS = {"i9": 12, "i8": 11, "i6": 9, "i5": 8, "i4": 6, "i2": 4, "i1": 3, "i0": 2, "i11": 7, "i10": 5}
OLD_USERS = {f"u{k}": 5 - k for k in range(5)}
NEW_USERS = {"u4": 6, "u3": 5, "u2": 4, "u1": 3, "u5": 8}


def _log(counts: dict) -> np.ndarray:
    """One id per interaction."""
    return np.repeat(np.array(list(counts), dtype=object), list(counts.values()))


def _model(items: Vocabulary, users: Vocabulary, seed: int):
    config = default_config()
    config.embedding_dim = config.item_tower.id_embedding_dim = config.user_tower.user_id_embedding_dim = 4
    config.user_tower.hidden_units = (4,)
    config.seed = seed
    model = build_model(config, items, users)
    examples = {"user": np.array([2, 3], np.int32), "history": np.array([[2, 3], [4, 0]], np.int32),
                "history_length": np.array([2, 1], np.int32), "label": np.array([5, 6], np.int32)}
    training.build_variables(model, examples)
    return model


def _tables(model) -> dict:
    return {"item": model.item_tower.id_embedding.embeddings.numpy(),
            "user": model.user_tower.user_id_embedding.embeddings.numpy()}


@pytest.fixture(scope="module")
def vocabularies():
    old = {"item": Vocabulary.from_ids(_log(OLD_ITEMS)), "user": Vocabulary.from_ids(_log(OLD_USERS))}
    new = {name: Vocabulary.from_ids(_log(today)).stable_against(old[name])
           for name, today in (("item", NEW_ITEMS), ("user", NEW_USERS))}
    return old, new


def test_stable_vocabulary_keeps_known_ids_in_their_old_order_then_new_ids_by_count(vocabularies):
    _, new = vocabularies
    assert list(new["item"].ids) == ["<pad>", "<oov>", "i0", "i1", "i2", "i4", "i5", "i6", "i8", "i9", "i11", "i10"]
    assert list(new["item"].counts) == [0, 0, 2, 3, 4, 6, 8, 9, 11, 12, 7, 5]  # counts are today's
    assert list(new["user"].ids) == ["<pad>", "<oov>", "u1", "u2", "u3", "u4", "u5"]


def test_load_into_copies_each_known_id_its_own_row(vocabularies, tmp_path):
    old, new = vocabularies
    previous = RunPaths(tmp_path / "yesterday")
    old["item"].save(previous.item_vocab)
    old["user"].save(previous.user_vocab)
    warm_start.save_id_tables(_model(old["item"], old["user"], seed=1), previous)
    with np.load(previous.root / warm_start.TABLES_FILE) as saved:
        trained = {name: saved[name] for name in ("item", "user")}

    model = _model(new["item"], new["user"], seed=2)
    fresh = _tables(model)
    assert warm_start.load_into(model, new, previous) == {"item": 8, "user": 4}
    loaded = _tables(model)
    for name in ("item", "user"):
        for index, id_ in enumerate(new[name].ids):
            old_index = old[name].lookup([id_])[0]
            expected = trained[name][old_index] if index >= NUM_RESERVED and old_index >= NUM_RESERVED \
                else fresh[name][index]  # new ids and the reserved rows keep their initialisation
            np.testing.assert_array_equal(loaded[name][index], expected, err_msg=f"{name} {id_}")
