"""Feature specs and dense per-index arrays aligned with a vocabulary."""

import json

import numpy as np
import pandas as pd
import pytest

from retrieval.data import FeatureSpec, Vocabulary, feature_arrays, infer_specs, read_features
from retrieval.data.features import MAX_VALUES
from retrieval.errors import InputError


@pytest.fixture()
def table():
    return pd.DataFrame({"item_id": ["a", "b", "c", "unknown_item"],
                         "genres": ["x|y", "y", None, "x|y|z"],
                         "brand": ["n", "m", "n", "m"],
                         "price": [1.0, 3.0, np.nan, 100.0]})


@pytest.fixture()
def vocab():
    return Vocabulary.from_ids(["b", "b", "a", "d"])  # indices: b=2, a=3, d=4


def test_infer_specs(table):
    specs = {s.name: s for s in infer_specs(table, "item_id")}
    assert specs["genres"] == FeatureSpec("genres", "multi", ("y", "x", "z"), max_values=3)
    assert specs["brand"] == FeatureSpec("brand", "categorical", ("m", "n"))
    price = specs["price"]
    assert price.kind == "numeric"
    assert price.mean == pytest.approx(np.mean([1.0, 3.0, 100.0]))
    assert price.std == pytest.approx(np.std([1.0, 3.0, 100.0]))
    assert specs["genres"].num_codes == 4
    forced = {s.name: s for s in infer_specs(table, "item_id", kinds={"genres": "categorical"}, max_values=2)}
    assert forced["genres"].kind == "categorical" and "x|y" in forced["genres"].vocabulary
    assert {s.name: s for s in infer_specs(table, "item_id", max_values=2)}["genres"].max_values == 2
    assert json.loads(json.dumps([s.to_dict() for s in specs.values()]))[0]["vocabulary"] == ["y", "x", "z"]


def test_feature_arrays_are_aligned_with_the_vocabulary(table, vocab):
    specs = infer_specs(table, "item_id")
    arrays = feature_arrays(table, "item_id", vocab, specs)
    # genres vocabulary ("y", "x", "z") -> codes y=1, x=2, z=3; rows: pad, oov, b, a, d
    assert arrays["genres"].dtype == np.int32 and arrays["genres"].shape == (5, 3)
    assert arrays["genres"].tolist() == [[0, 0, 0], [0, 0, 0], [1, 0, 0], [2, 1, 0], [0, 0, 0]]
    assert arrays["brand"].dtype == np.int32 and arrays["brand"].tolist() == [0, 0, 1, 2, 0]  # m=1, n=2
    price = next(s for s in specs if s.name == "price")
    assert arrays["price"].dtype == np.float32
    np.testing.assert_allclose(arrays["price"], [0, 0, (3 - price.mean) / price.std, (1 - price.mean) / price.std, 0],
                               rtol=1e-6)


def test_unseen_values_and_truncation(table, vocab):
    specs = [FeatureSpec("genres", "multi", ("x",), max_values=1), FeatureSpec("brand", "categorical", ("n",))]
    arrays = feature_arrays(table, "item_id", vocab, specs)
    assert arrays["genres"].tolist() == [[0], [0], [0], [1], [0]]  # b has only y (unseen); a keeps its first value
    assert arrays["brand"].tolist() == [0, 0, 0, 1, 0]


def test_spec_dict_round_trip():
    spec = FeatureSpec("genres", "multi", ("a", "b"), max_values=2)
    assert FeatureSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict()["vocabulary"] == ["a", "b"]
    with pytest.raises(InputError, match="unknown feature kind"):
        FeatureSpec("x", "embedding")


def test_read_then_arrays_end_to_end(tmp_path):
    path = tmp_path / "users.csv"
    path.write_text("user_id,segment,age,tags\nu1,s1,30,a|b\nu2,s2,,b\n")
    table = read_features(path, "user_id", kinds={"segment": "categorical"})
    specs = {s.name: s for s in infer_specs(table, "user_id")}
    assert [specs[n].kind for n in ("segment", "age", "tags")] == ["categorical", "numeric", "multi"]
    vocab = Vocabulary.from_ids(["u2", "u1", "u1"])
    arrays = feature_arrays(table, "user_id", vocab, list(specs.values()))
    assert arrays["segment"].tolist() == [0, 0, 1, 2]
    assert arrays["age"].tolist() == [0.0, 0.0, 0.0, 0.0]  # one value: std falls back to 1, missing -> 0
    assert arrays["tags"].tolist() == [[0, 0], [0, 0], [2, 1], [1, 0]]  # b=1 (twice), a=2; u1 is index 2


def test_one_pathological_row_does_not_size_every_items_array(vocab):
    huge = "|".join(f"v{i}" for i in range(10_000))
    table = pd.DataFrame({"item_id": ["b", "a"], "tags": [huge, "v1|v2"]})
    (spec,) = infer_specs(table, "item_id")
    assert spec.max_values == MAX_VALUES
    tags = feature_arrays(table, "item_id", vocab, [spec])["tags"]
    assert tags.shape == (vocab.size, MAX_VALUES) and (tags[2] > 0).all()
