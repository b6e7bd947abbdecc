"""Every user mistake is an InputError naming the file, the column and the first offending (0-based data) row."""

import os
import threading

import numpy as np
import pandas as pd
import pytest

from retrieval.data import align_to_train, bounds, from_files, read_features, read_interactions, validate
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


def test_only_an_empty_cell_is_missing_not_pandas_markers(tmp_path):
    """A numeric cell reading n/a is refused (the guide: only an empty cell is missing), and a category named NA is
    a value; pandas' defaults took both for missing values."""
    path = _write(tmp_path, "users.csv", "user_id,age,region\n1,30,NA\n2,,EU\n3,n/a,EU\n")
    e = _error(read_features, path, "user_id", kinds={"age": "numeric", "region": "categorical"})
    assert (e.column, e.row) == ("age", 2) and "'n/a'" in str(e)
    fine = _write(tmp_path, "fine.csv", "user_id,age,region\n1,30,NA\n2,,EU\n")
    table = read_features(fine, "user_id", kinds={"age": "numeric", "region": "categorical"})
    assert list(table["region"]) == ["NA", "EU"] and np.isnan(table["age"].iloc[1])


def test_missing_file_and_unreadable_file(tmp_path):
    missing = tmp_path / "nope.csv"
    e = _error(read_interactions, missing)
    assert e.path == str(missing) and "file not found" in str(e)
    corrupt = _write(tmp_path, "log.parquet", "this is not parquet")
    e = _error(read_interactions, corrupt)
    assert e.path == str(corrupt) and "cannot read" in str(e)


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


@pytest.mark.parametrize("name, text, row, got", [
    ("log.csv", "user_id,item_id,timestamp\n1,a,1\n2,b\n3,c,3\n", 1, "got 2 fields: '2,b'"),
    ("log.csv", "user_id,item_id,timestamp\n1,a,1\n\n2,b,2\n3,c,3,9\n", 2, "got 4 fields"),  # blank lines skipped
    ("log.tsv", "user_id\titem_id\n1\ta\n2\tb\tc\n", 1, "got 3 fields"),
])
def test_row_with_the_wrong_number_of_fields(tmp_path, name, text, row, got):
    path = _write(tmp_path, name, text)
    e = _error(read_interactions, path)
    assert (e.path, e.row) == (str(path), row) and "as many as the header" in str(e) and got in str(e)


def test_quoted_delimiters_are_one_field(tmp_path):
    path = _write(tmp_path, "log.csv", 'user_id,item_id,timestamp\n1,"a,b",1\n2,"c\nd",2\n')
    assert read_interactions(path)["item_id"].tolist() == ["a,b", "c\nd"]


def test_id_length_is_bounded(tmp_path):
    longest = "u" * validate.MAX_ID_LENGTH
    path = _write(tmp_path, "log.csv", f"user_id,item_id\n{longest},a\n1,{longest}x\n")
    e = _error(read_interactions, path)
    assert (e.path, e.column, e.row) == (str(path), "item_id", 1)
    assert f"{validate.MAX_ID_LENGTH + 1} characters" in str(e) and "longer than the limit" in str(e)


@pytest.mark.parametrize("name, fmt", [("log.csv", "csv"), ("seq.txt", "user_items"), ("ratings.dat", "movielens")])
def test_a_line_over_the_size_limit_is_refused_without_reading_it_whole(tmp_path, monkeypatch, name, fmt):
    monkeypatch.setattr(bounds, "CHUNK_BYTES", 7)  # lines straddle chunks
    monkeypatch.setattr(bounds, "MAX_LINE_BYTES", 20)
    header = "user_id,item_id\n" if fmt == "csv" else ""
    ok = "1,abcdefghijklmnopq\n" if fmt == "csv" else "1::2::3::456789012\n" if fmt == "movielens" else "1 2 3 4 5\n"
    path = _write(tmp_path, name, header + ok + ok + "9" * 21 + "\n" + ok)
    e = _error(read_interactions, path, fmt)
    assert (e.path, e.row) == (str(path), 2) and "longer than 20 bytes" in str(e)
    _write(tmp_path, name, header + ok + "9" * 1000)  # no newline at all: stops after the limit
    assert _error(read_interactions, path, fmt).row == 1


def test_a_gigantic_line_is_refused_at_the_real_limit(tmp_path):
    path = tmp_path / "log.csv"
    with open(path, "w") as f:
        f.write("user_id,item_id\n1,a\n")
        f.write("x" * (bounds.MAX_LINE_BYTES + 1))
    e = _error(read_interactions, path)
    assert e.row == 1 and f"longer than {bounds.MAX_LINE_BYTES} bytes" in str(e)
    path.write_text("x" * (bounds.MAX_LINE_BYTES + 1))
    assert "header line" in str(_error(read_interactions, path))


def _fails_fast(call, *args) -> InputError:
    """``call(*args)`` must raise an InputError within seconds (a reader opening a FIFO would block forever)."""
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(_error(call, *args)), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), f"{call.__name__}{args} blocked"
    return outcome[0]


@pytest.mark.parametrize("fmt", ["csv", "tsv", "parquet", "movielens", "user_items", "auto"])
def test_special_files_are_refused_up_front(tmp_path, fmt):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    e = _fails_fast(read_interactions, fifo, fmt)
    assert e.path == str(fifo) and "a FIFO, not a regular file" in str(e)
    directory = tmp_path / "dir.csv"
    directory.mkdir()
    assert "a directory, not a regular file" in str(_fails_fast(read_interactions, directory, fmt))


def test_special_feature_tables_are_refused_up_front(tmp_path):
    for name in ("items.csv", "movies.dat", "u.user"):
        os.mkfifo(tmp_path / name)
        assert "a FIFO" in str(_fails_fast(read_features, tmp_path / name, "item_id"))
    assert "a special file" in str(_fails_fast(read_interactions, "/dev/zero", "csv"))


def test_user_items_errors_name_the_line(tmp_path):
    path = _write(tmp_path, "seq.txt", "a x y z\n\nb x <pad>\n")
    e = _error(read_interactions, path)
    assert (e.path, e.column, e.row) == (str(path), "item_id", 2) and "reserved" in str(e)


@pytest.mark.parametrize("name, text, row, message", [
    ("ratings.dat", "1::2::3::4\n1::2::3\n", 1, "4 fields separated by '::', got 5 fields: '1::2::3'"),
    ("ratings.dat", "1::2::3::4\n1::2::3::4::5\n", 1, "got 9 fields"),
    ("ratings.dat", "1::2::3::4\n1::2::3::4\n1:2::3::4:\n", 2, "found a single ':'"),
    ("u.data", "1\t2\t3\t4\n1\t2\t3\n", 1, "4 fields separated by '\\t', got 3"),
    ("users.dat", "1::F::1::10::48067\n2::M::56::16\n", 1, "5 fields separated by '::'"),
])
def test_movielens_lines_have_the_layout_fields(tmp_path, name, text, row, message):
    path = _write(tmp_path, name, text)
    e = _error(read_features if name == "users.dat" else read_interactions, path,
               *(("user_id",) if name == "users.dat" else ()))
    assert (e.path, e.row) == (str(path), row) and message in str(e)


def test_a_table_overlap_just_under_the_warning_share_never_prints_as_that_share(caplog):
    """839 of 1,679 items is 49.97%: said as 49.9%, below 50%, not as "50.0% (below 50%)"."""
    from retrieval.data.validate import WARN_TABLE_OVERLAP, table_overlap

    items = [f"i{k}" for k in range(1679)]
    with caplog.at_level("WARNING"):
        share = table_overlap(items[:839], items, path="items.csv")
    assert share < WARN_TABLE_OVERLAP == 0.5
    assert "(49.9%)" in caplog.text and "below 50%" in caplog.text and "50.0%" not in caplog.text
