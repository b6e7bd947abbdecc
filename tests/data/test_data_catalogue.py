"""The catalogue: text features, cold items in the vocabulary, the seeded cold-item holdout."""

import numpy as np
import pandas as pd
import pytest

from retrieval.data import catalogue, features, seeds, splits
from retrieval.data.readers import read_features
from retrieval.data.vocab import Vocabulary
from retrieval.errors import InputError


def test_text_feature_tokens_vocabulary_and_codes():
    table = pd.DataFrame({"item_id": ["a", "b", "c", "d"],
                          "title": ["Toy Story (1995)", "toy SOLDIERS, 1991", "Story of us", None]})
    spec, = features.infer_specs(table, "item_id", {"title": "text"})
    # tokens of at least two rows, by rows then token: story (a, c), toy (a, b); "1995", "of", ... once only
    assert spec == features.FeatureSpec("title", "text", ("story", "toy"), max_values=2)
    vocab = Vocabulary.from_ids(["a", "a", "b", "c", "d"])  # a=2, b=3, c=4, d=5
    codes = features.feature_arrays(table, "item_id", vocab, [spec])["title"]
    assert codes.tolist() == [[0, 0], [0, 0], [2, 1], [2, 0], [1, 0], [0, 0]]  # unknown tokens take no slot


def test_text_rows_keep_their_first_known_tokens():
    table = pd.DataFrame({"item_id": ["a", "b"], "title": ["x y z w", "w z y x"]})
    spec = features.FeatureSpec("title", "text", ("x", "y", "z", "w"), max_values=2)
    codes = features.feature_arrays(table, "item_id", Vocabulary.from_ids(["a", "b"]), [spec])["title"]
    assert codes[2:].tolist() == [[1, 2], [4, 3]]


def test_a_huge_text_cell_is_refused_with_its_row(tmp_path):
    path = tmp_path / "items.csv"
    pd.DataFrame({"item_id": ["a", "b"], "title": ["short", "x" * (features.MAX_TEXT_CHARS + 1)]}).to_csv(path,
                                                                                                        index=False)
    with pytest.raises(InputError, match="text cell") as raised:
        read_features(path, "item_id", kinds={"title": "text"})
    assert raised.value.row == 1 and raised.value.column == "title"


def test_parse_kinds_names_the_bad_part():
    assert features.parse_kinds("title:text, genres:multi", "f") == {"title": "text", "genres": "multi"}
    with pytest.raises(InputError, match="title:words"):
        features.parse_kinds("title:words", "data.item_features")


def test_specs_round_trip(tmp_path):
    specs = [features.FeatureSpec("title", "text", ("a", "b"), max_values=2), features.FeatureSpec("y", "numeric",
                                                                                                  mean=2.0, std=3.0)]
    features.save_specs(tmp_path / "s.json", "item_id", specs)
    assert features.load_specs(tmp_path / "s.json") == ("item_id", specs)


def test_catalogue_items_join_the_vocabulary_cold_and_last():
    vocab = Vocabulary.from_ids(["b", "b", "a"]).with_catalogue(["z", "a", "c", "c"])
    assert vocab.ids.tolist() == ["<pad>", "<oov>", "b", "a", "c", "z"]
    assert vocab.counts.tolist() == [0, 0, 2, 1, 0, 0]
    assert vocab.warm.tolist() == [False, False, True, True, False, False]


def test_a_listed_item_below_min_count_joins_with_its_clicks_before_the_cold_ones():
    clicks = pd.Series(["b", "b", "b", "a", "a", "a", "x", "y", "y"]).value_counts(sort=False)
    vocab = Vocabulary.from_counts(clicks, min_count=3).with_catalogue(["z", "a", "x", "y", "c"], clicks)
    assert vocab.ids.tolist() == ["<pad>", "<oov>", "a", "b", "y", "x", "c", "z"]
    assert vocab.counts.tolist() == [0, 0, 3, 3, 2, 1, 0, 0]  # x and y were clicked: warm, in frequency order
    assert vocab.warm.tolist() == [False, False, True, True, True, True, False, False]


def test_id_uniforms_depend_on_the_id_only_and_are_uniform():
    ids = pd.Series([f"item{i}" for i in range(20_000)])
    u = seeds.id_uniforms(ids, 7, seeds.COLD_ITEMS)
    assert np.array_equal(u[[5, 9]], seeds.id_uniforms(ids.iloc[[5, 9]], 7, seeds.COLD_ITEMS))
    assert not np.array_equal(u, seeds.id_uniforms(ids, 8, seeds.COLD_ITEMS))
    # 10% of 20,000 ids: binomial sd 42; 5 sd either side
    assert abs(int((u < 0.1).sum()) - 2000) < 5 * 42
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 2000 - 5 * 42


def _split(users, items):
    frame = pd.DataFrame({"user_id": users, "item_id": items, "timestamp": np.arange(len(users))})
    return splits.Split(frame, frame.iloc[:0], frame.copy())


def test_cold_holdout_moves_all_training_rows_of_the_chosen_items_in_any_partition():
    rng = np.random.default_rng(0)
    users = rng.integers(0, 100, 3000).astype(str)
    items = rng.integers(0, 300, 3000).astype(str)
    whole = catalogue.cold_holdout(_split(users, items), 0.1, seed=3)
    parts = [catalogue.cold_holdout(_split(users[users < "5"], items[users < "5"]), 0.1, seed=3),
             catalogue.cold_holdout(_split(users[users >= "5"], items[users >= "5"]), 0.1, seed=3)]
    cold = set(whole.test["item_id"])
    assert cold and not cold & set(whole.train["item_id"])
    assert len(whole.train) + len(whole.test) == 3000
    assert set().union(*(set(p.test["item_id"]) for p in parts)) == cold  # the same items in every partition
    assert not cold & set(whole.validation["item_id"]) and len(whole.validation) == len(whole.train)
    assert catalogue.cold_holdout(_split(users, items), 0.0, seed=3).test.empty
