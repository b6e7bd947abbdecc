"""A damaged file that a run wrote itself (``data/train.parquet``) is reported as the run's artifact, never as a
mistake in the user's input; the same problem in a user's file still names the user's file and row."""

import pandas as pd
import pytest

from retrieval import artifacts
from retrieval.data.histories import UserHistories
from retrieval.errors import InputError
from retrieval.evaluation import loading
from retrieval.index.idmap import IdMap

NULL_USER = pd.DataFrame({"user_id": ["u", None], "item_id": ["a", "b"]})


def test_evaluation_blames_the_run_for_its_own_data(tmp_path):
    paths = artifacts.RunPaths(tmp_path / "run")
    paths.train_data.parent.mkdir(parents=True)
    NULL_USER.to_parquet(paths.train_data)
    with pytest.raises(InputError) as info:
        loading.read_interactions(paths.train_data, "training data")
    e = info.value
    assert (e.path, e.column, e.row) == (str(paths.train_data), "user_id", 1)
    assert "internal artifact of the run (not your input file" in str(e) and "--force" in str(e)
    user_file = tmp_path / "my_test.parquet"
    NULL_USER.to_parquet(user_file)
    with pytest.raises(InputError) as info:
        loading.read_interactions(user_file, "test data")
    assert info.value.row == 1 and "internal artifact" not in str(info.value)


@pytest.mark.parametrize("frame", [None, pd.DataFrame({"user_id": ["u"]})])
def test_serving_blames_the_run_for_its_own_histories(tmp_path, frame):
    path = artifacts.RunPaths(tmp_path).train_data
    path.parent.mkdir()
    if frame is None:
        path.write_bytes(b"not parquet")
    else:
        frame.to_parquet(path)
    with pytest.raises(InputError, match="internal artifact of the run") as info:
        UserHistories.from_parquet(path, IdMap(["a"]))
    assert info.value.path == str(path)
