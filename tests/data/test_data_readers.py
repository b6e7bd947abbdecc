"""Readers: every format gives the same canonical table; feature tables and MovieLens layouts."""

import numpy as np
import pandas as pd
import pytest
from absl import logging

from retrieval.data import ColumnNames, guess_format, movielens, read_features, read_interactions

EXPECTED = pd.DataFrame({"user_id": ["007", "007", "b"], "item_id": ["x", "y", "x"],
                         "timestamp": np.array([5, 3, 9], np.int64)})


def _canonical_ok(frame, with_timestamp=True):
    expected = EXPECTED if with_timestamp else EXPECTED[["user_id", "item_id"]]
    assert list(frame.columns) == list(expected.columns)
    assert frame["user_id"].tolist() == expected["user_id"].tolist()
    assert frame["item_id"].tolist() == expected["item_id"].tolist()
    if with_timestamp:
        assert frame["timestamp"].dtype == np.int64
        assert frame["timestamp"].tolist() == expected["timestamp"].tolist()


def test_csv_keeps_string_ids_and_file_order(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("user_id,item_id,timestamp,extra\n007,x,5,a\n007,y,3,b\nb,x,9,c\n")
    _canonical_ok(read_interactions(path, "csv"))


def test_tsv_with_custom_columns_and_weight(tmp_path):
    path = tmp_path / "log.tsv"
    path.write_text("u\ti\tt\tw\n007\tx\t5\t1.5\n007\ty\t3\t2\nb\tx\t9\t0\n")
    frame = read_interactions(path, "tsv", ColumnNames(user="u", item="i", timestamp="t", weight="w"))
    _canonical_ok(frame[["user_id", "item_id", "timestamp"]])
    assert frame["weight"].dtype == np.float32
    assert frame["weight"].tolist() == [1.5, 2.0, 0.0]


def test_parquet_integer_ids_become_decimal_strings(tmp_path):
    path = tmp_path / "log.parquet"
    pd.DataFrame({"user_id": [7, 7, 8], "item_id": [1.0, 2.0, 1.0], "timestamp": [5, 3, 9]}).to_parquet(path)
    frame = read_interactions(path, "parquet")
    assert frame["user_id"].tolist() == ["7", "7", "8"]
    assert frame["item_id"].tolist() == ["1", "2", "1"]
    assert frame["timestamp"].tolist() == [5, 3, 9]


def test_timestamp_is_optional(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("user_id,item_id\n007,x\n007,y\nb,x\n")
    _canonical_ok(read_interactions(path, columns=ColumnNames(timestamp=None)), with_timestamp=False)
    _canonical_ok(read_interactions(path, columns=ColumnNames(timestamp="")), with_timestamp=False)
    _canonical_ok(read_interactions(path), with_timestamp=False)


def test_movielens_1m_and_100k_layouts(tmp_path):
    one_m = tmp_path / "ratings.dat"
    one_m.write_text("007::x::4::5\n007::y::3::3\nb::x::5::9\n", encoding="latin-1")
    hundred_k = tmp_path / "u.data"
    hundred_k.write_text("007\tx\t4\t5\n007\ty\t3\t3\nb\tx\t5\t9\n")
    renamed = tmp_path / "ratings_renamed.txt"
    renamed.write_text(one_m.read_text())
    for path in (one_m, hundred_k, renamed):
        _canonical_ok(read_interactions(path, "movielens"))
    with_rating = read_interactions(one_m, "movielens", ColumnNames(weight="rating"))
    assert with_rating["weight"].tolist() == [4.0, 3.0, 5.0]


def test_user_items_timestamp_is_position(tmp_path):
    path = tmp_path / "seq.txt"
    path.write_text("007 x y\nb x\n\nc\n")
    frame = read_interactions(path, "user_items")
    _canonical_ok(frame[["user_id", "item_id"]], with_timestamp=False)
    assert frame["timestamp"].dtype == np.int64
    assert frame["timestamp"].tolist() == [0, 1, 0]


def test_auto_guesses_from_the_name_and_logs(tmp_path, monkeypatch):
    messages = []
    monkeypatch.setattr(logging, "info", lambda msg, *args: messages.append(msg % args))
    path = tmp_path / "seq.txt"
    path.write_text("007 x y\nb x\n")
    read_interactions(path)
    assert any("user_items" in m and "seq.txt" in m for m in messages)
    assert [guess_format(n) for n in ("a.csv", "a.TSV", "a.parquet", "ratings.dat", "u.data", "b.txt")] == [
        "csv", "tsv", "parquet", "movielens", "movielens", "user_items"]


def test_read_features_kinds(tmp_path):
    path = tmp_path / "items.csv"
    path.write_text("item_id,genres,code,price,ignored\n1,a|b,7,1.5,z\n2,,8,,z\n")
    table = read_features(path, "item_id", kinds={"genres": "multi", "code": "categorical", "price": "numeric"},
                          columns=["genres", "code", "price"])
    assert list(table.columns) == ["item_id", "genres", "code", "price"]
    assert table["item_id"].tolist() == ["1", "2"]
    assert table["genres"].iloc[0] == "a|b" and pd.isna(table["genres"].iloc[1])
    assert table["code"].tolist() == ["7", "8"]
    assert table["price"].iloc[0] == 1.5 and np.isnan(table["price"].iloc[1])


def test_movielens_feature_helpers(tmp_path):
    movies = tmp_path / "movies.dat"
    movies.write_text("1::Toy Story (1995)::Animation|Children's|Comedy\n2::Heat: A Story (1995)::Action\n",
                      encoding="latin-1")
    items = movielens.read_items(movies)
    assert items["item_id"].tolist() == ["1", "2"]
    assert items["title"].tolist() == ["Toy Story (1995)", "Heat: A Story (1995)"]
    assert items["genres"].tolist() == ["Animation|Children's|Comedy", "Action"]
    flags = ["0"] * 19
    flags[1] = flags[5] = "1"
    u_item = tmp_path / "u.item"
    u_item.write_text("|".join(["1", "Toy Story (1995)", "01-Jan-1995", "", "http://x"] + flags) + "\n",
                      encoding="latin-1")
    assert movielens.read_items(u_item)["genres"].tolist() == ["Action|Comedy"]
    users_dat = tmp_path / "users.dat"
    users_dat.write_text("1::F::1::10::48067\n2::M::56::16::70072\n")
    u_user = tmp_path / "u.user"
    u_user.write_text("1|24|M|technician|85711\n")
    one_m, hundred_k = movielens.read_users(users_dat), movielens.read_users(u_user)
    assert list(one_m.columns) == list(hundred_k.columns) == ["user_id", "gender", "age", "occupation", "zip"]
    assert one_m.iloc[1].tolist() == ["2", "M", 56, "16", "70072"]
    assert hundred_k.iloc[0].tolist() == ["1", "M", 24, "technician", "85711"]
    genres = read_features(movies, "item_id", kinds={"genres": "multi"}, columns=["genres"])
    assert genres.to_dict("list") == {"item_id": ["1", "2"], "genres": ["Animation|Children's|Comedy", "Action"]}
    assert read_features(u_user, "user_id")["occupation"].tolist() == ["technician"]


@pytest.mark.parametrize("bad_format", ["excel", ""])
def test_unknown_format_is_an_input_error(tmp_path, bad_format):
    from retrieval.errors import InputError

    path = tmp_path / "log.csv"
    path.write_text("user_id,item_id\n1,2\n")
    with pytest.raises(InputError, match="unknown format"):
        read_interactions(path, bad_format)
