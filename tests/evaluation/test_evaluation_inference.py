"""Batch inference: top-k per user through the exported model, training items excluded, Parquet schema."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval.errors import InputError
from retrieval.evaluation import inference
from tests.evaluation.test_evaluation_fakes import ITEMS, interactions, item_vectors, make_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("infer") / "run")


def test_every_training_user_gets_k_unseen_items_best_first(run):
    table = inference.recommend(run.root, k=5)
    frame = table.to_pandas()
    train = interactions()[0]
    assert frame.user_id.tolist() == sorted(train.user_id.unique())
    seen = train.groupby("user_id")["item_id"].apply(set)
    vectors = item_vectors()
    for row in frame.itertuples():
        assert len(row.item_ids) == 5 and not set(row.item_ids) & seen[row.user_id]
        assert np.all(np.diff(row.scores) <= 0)
    # Reference for one user: mean of her training vectors, all unseen items sorted by score.
    history = train.loc[train.user_id == "u03", "item_id"]
    scores = vectors @ vectors[[int(i[1:]) for i in history]].mean(axis=0)
    ranked = [ITEMS[i] for i in np.argsort(-scores, kind="stable") if ITEMS[i] not in set(history)][:5]
    assert list(frame.set_index("user_id").loc["u03", "item_ids"]) == ranked


def test_user_list_unknown_users_and_short_lists(run, tmp_path):
    users_file = tmp_path / "users.txt"
    users_file.write_text("u05\nnobody\nu05\n")
    users = inference.read_user_list(users_file)
    assert users.tolist() == ["u05", "nobody"]
    table = inference.recommend(run.root, k=100, user_ids=users)
    lengths = [len(x) for x in table.column("item_ids").to_pylist()]
    assert lengths == [48 - 5, 48]  # u05 has 5 training items; an unknown user has none to exclude
    assert table.column("fallback").to_pylist() == [False, True]  # the unknown user: the most popular items
    assert table.column("scores").null_count == 1 and table.column("scores")[1].as_py() is None
    path = tmp_path / "recs.parquet"
    inference.write_recommendations(table, path)
    schema = pq.read_schema(path)
    assert schema.field("user_id").type == pa.string()
    assert schema.field("item_ids").type == pa.list_(pa.string())
    assert schema.field("scores").type == pa.list_(pa.float32())
    assert schema.field("fallback").type == pa.bool_()


def test_user_list_formats_and_errors(tmp_path):
    (tmp_path / "u.csv").write_text("user_id,other\na,1\nb,2\n")
    assert inference.read_user_list(tmp_path / "u.csv").tolist() == ["a", "b"]
    (tmp_path / "bad.csv").write_text("who\na\n")
    with pytest.raises(InputError, match="user_id column"):
        inference.read_user_list(tmp_path / "bad.csv")
    with pytest.raises(InputError, match="k must be"):
        inference.recommend(tmp_path, k=0)


def test_chunked_recommendations_stream_into_row_groups_with_the_same_rows(run, tmp_path):
    whole = inference.recommend(run.root, k=7)
    path = tmp_path / "chunked.parquet"
    written = inference.write_recommendations(inference.recommend_chunks(run.root, k=7, chunk_users=3), path)
    assert written == whole.num_rows and pq.ParquetFile(path).num_row_groups == -(-whole.num_rows // 3)
    chunked = pq.read_table(path)
    assert chunked.column("user_id").equals(whole.column("user_id"))
    assert chunked.column("item_ids").to_pylist() == whole.column("item_ids").to_pylist()
    np.testing.assert_allclose(chunked.column("scores").combine_chunks().flatten().to_numpy(),
                               whole.column("scores").combine_chunks().flatten().to_numpy(), rtol=1e-5)


def test_sharded_recommendations_write_one_file_per_chunk_and_replace_the_old_directory(run, tmp_path):
    whole = inference.recommend(run.root, k=7)
    out = tmp_path / "recs"
    out.mkdir()
    (out / "part-00099.parquet").write_text("from an earlier run")
    written = inference.write_recommendations(inference.recommend_chunks(run.root, k=7, chunk_users=3), out,
                                              sharded=True)
    parts = sorted(p.name for p in out.iterdir())
    assert written == whole.num_rows and parts == [f"part-{i:05d}.parquet" for i in range(-(-whole.num_rows // 3))]
    sharded = pq.read_table(out)
    assert sharded.column("user_id").to_pylist() == whole.column("user_id").to_pylist()
    assert sharded.column("item_ids").to_pylist() == whole.column("item_ids").to_pylist()
