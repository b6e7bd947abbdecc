"""Every user mistake is an InputError naming the file, the column and the first offending (0-based data) row."""

import os

import pandas as pd
import pytest

from retrieval.data import align_to_train, from_files, read_features, read_interactions
from retrieval.errors import InputError


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(call, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        call(*args, **kwargs)
    return info.value


def test_missing_column_lists_what_the_file_has(tmp_path):
    path = _write(tmp_path, "log.csv", "user,item_id\n1,2\n")
    e = _error(read_interactions, path)
    assert e.path == str(path) and e.column == "user_id"
    assert "missing column" in str(e) and "'user'" in str(e) and str(path) in str(e)


@pytest.mark.parametrize("text", ["", "user_id,item_id,timestamp\n"])
def test_empty_input(tmp_path, text):
    path = _write(tmp_path, "log.csv", text)
    e = _error(read_interactions, path)
    assert e.path == str(path) and "empty input" in str(e)


def test_empty_user_items_file(tmp_path):
    path = _write(tmp_path, "seq.txt", "\n  \nlonely_user\n")
    assert "empty input" in str(_error(read_interactions, path))


def test_null_id_names_the_row(tmp_path):
    path = _write(tmp_path, "log.csv", "user_id,item_id,timestamp\n1,a,1\n2,b,2\n,c,3\n")
    e = _error(read_interactions, path)
    assert (e.path, e.column, e.row) == (str(path), "user_id", 2)
    assert "null id" in str(e) and "row 2" in str(e) and "'user_id'" in str(e)


@pytest.mark.parametrize("values, bad_row, shown", [([1.0, 2.5], 1, "2.5"), ([[1], [2, 3]], 0, "[1]")])
def test_non_castable_id(tmp_path, values, bad_row, shown):
    path = tmp_path / "log.parquet"
    pd.DataFrame({"user_id": ["u", "v"], "item_id": values, "timestamp": [1, 2]}).to_parquet(path)
    e = _error(read_interactions, path)
    assert (e.column, e.row) == ("item_id", bad_row)
    assert "cannot be cast" in str(e) and shown in str(e)


def test_reserved_id_is_rejected(tmp_path):
    path = _write(tmp_path, "log.csv", "user_id,item_id\n1,a\n2,<oov>\n")
    e = _error(read_interactions, path)
    assert (e.column, e.row) == ("item_id", 1) and "reserved" in str(e)


def test_non_numeric_timestamp(tmp_path):
    path = _write(tmp_path, "log.csv", "user_id,item_id,timestamp\n1,a,10\n1,b,yesterday\n")
    e = _error(read_interactions, path)
    assert (e.path, e.column, e.row) == (str(path), "timestamp", 1)
    assert "non-numeric timestamp 'yesterday'" in str(e)


def test_negative_timestamp(tmp_path):
    path = _write(tmp_path, "log.tsv", "user_id\titem_id\ttimestamp\n1\ta\t10\n1\tb\t3\n2\tc\t-4\n")
    e = _error(read_interactions, path)
    assert (e.column, e.row) == ("timestamp", 2) and "negative timestamp" in str(e) and "-4" in str(e)


def test_missing_timestamp_value(tmp_path):
    path = _write(tmp_path, "log.csv", "user_id,item_id,timestamp\n1,a,\n")
    e = _error(read_interactions, path)
    assert (e.column, e.row) == ("timestamp", 0) and "missing timestamp" in str(e)


def test_duplicate_key_in_feature_table(tmp_path):
    path = _write(tmp_path, "items.csv", "item_id,genres\n1,a\n2,b\n3,c\n2,d\n")
    e = _error(read_features, path, "item_id")
    assert (e.path, e.column, e.row) == (str(path), "item_id", 3)
    assert "duplicate id '2'" in str(e) and "first seen at row 1" in str(e)


def test_non_numeric_numeric_feature(tmp_path):
    path = _write(tmp_path, "users.csv", "user_id,age\n1,30\n2,old\n")
    e = _error(read_features, path, "user_id", kinds={"age": "numeric"})
    assert (e.column, e.row) == ("age", 1) and "'old'" in str(e)


def test_missing_file_and_unreadable_file(tmp_path):
    missing = tmp_path / "nope.csv"
    e = _error(read_interactions, missing)
    assert e.path == str(missing) and "file not found" in str(e)
    corrupt = _write(tmp_path, "log.parquet", "this is not parquet")
    e = _error(read_interactions, corrupt)
    assert e.path == str(corrupt) and "cannot read" in str(e)
    directory = tmp_path / "dir.csv"
    directory.mkdir()
    assert "cannot read" in str(_error(read_interactions, directory))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied(tmp_path):
    path = _write(tmp_path, "log.csv", "user_id,item_id\n1,2\n")
    path.chmod(0)
    assert "cannot read" in str(_error(read_interactions, path))


def test_cannot_guess_format(tmp_path):
    path = _write(tmp_path, "log.json", "{}")
    e = _error(read_interactions, path)
    assert "cannot guess the format" in str(e) and e.path == str(path)


def test_unknown_test_users_and_items_drop_or_fail(tmp_path):
    train = _write(tmp_path, "train.csv", "user_id,item_id,timestamp\n1,a,1\n1,b,2\n2,a,3\n")
    test = _write(tmp_path, "test.csv", "user_id,item_id,timestamp\n1,a,4\n2,b,5\n1,zz,6\n9,a,7\n3,q,8\n")
    split = from_files(train, test, policy="drop")
    assert split.test[["user_id", "item_id"]].values.tolist() == [["1", "a"], ["2", "b"]]
    assert split.dropped == {"test": 3}
    e = _error(from_files, train, test, policy="fail")
    assert (e.path, e.column, e.row) == (str(test), "item_id", 2)
    assert "'zz' does not occur in the training data (3 such rows)" in str(e)
    unknown_user = pd.DataFrame({"user_id": ["9"], "item_id": ["a"]})
    e = _error(align_to_train, unknown_user, split.train, "fail", name="validation")
    assert (e.path, e.column, e.row) == ("validation", "user_id", 0) and "validation user '9'" in str(e)
    assert "unknown policy" in str(_error(align_to_train, unknown_user, split.train, "ignore"))
