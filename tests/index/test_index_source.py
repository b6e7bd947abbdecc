"""retrieval.index.source: item embeddings read in record batches from one file or shards, and an index built from
them chunk by chunk equal to one built from the array in memory."""

import numpy as np
import pytest

from retrieval.errors import InputError
from retrieval.export import write_item_embeddings
from retrieval.index import build_index
from retrieval.index.selfcheck import exact_search
from retrieval.index.source import ArrayVectors, ParquetVectors

N, D = 1000, 8


@pytest.fixture(scope="module")
def items():
    rng = np.random.default_rng(0)
    return np.array([f"i{i}" for i in range(N)], dtype=object), rng.standard_normal([N, D]).astype(np.float32)


def _shards(directory, ids, vectors, bounds):
    directory.mkdir()
    for n, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        write_item_embeddings(directory / f"part-{n:03d}.parquet", ids[lo:hi], vectors[lo:hi])
    return directory


def test_one_file_and_shards_read_in_bounded_chunks(items, tmp_path):
    ids, vectors = items
    write_item_embeddings(tmp_path / "one.parquet", ids, vectors)
    shards = _shards(tmp_path / "item_embeddings.parquet", ids, vectors, [0, 300, 301, 1000])
    for source in (ParquetVectors(tmp_path / "one.parquet"), ParquetVectors(shards)):
        assert (source.count, source.dimension) == (N, D)
        chunks = list(source.chunks(128))
        assert max(len(c) for c in chunks) <= 128 and all(c.dtype == np.float32 for c in chunks)
        np.testing.assert_array_equal(np.concatenate(chunks), vectors)
        np.testing.assert_array_equal(source.read_all(), vectors)
        np.testing.assert_array_equal(source.item_ids(), ids)
        rows = np.array([0, 299, 300, 301, 999])
        np.testing.assert_array_equal(source.take(rows), vectors[rows])
    with pytest.raises(InputError, match="not found"):
        ParquetVectors([tmp_path / "one.parquet", tmp_path / "missing.parquet"])
    with pytest.raises(InputError, match="no item-embedding shard"):
        ParquetVectors((tmp_path / "empty").mkdir() or tmp_path / "empty")


def test_chunked_exact_search_equals_one_pass(items):
    _, vectors = items
    queries = vectors[:20] + 0.01
    chunked = exact_search(vectors, np.arange(N) + 2, queries, 30, "l2")
    scores = -((queries[:, None, :] - vectors[None, :, :]) ** 2).sum(-1)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :30]
    np.testing.assert_array_equal(chunked[1], top + 2)
    np.testing.assert_allclose(chunked[0], np.take_along_axis(scores, top, axis=1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("factory", ["IVF16,PQ8x4fsr,RFlat", "Flat"])
def test_index_from_parquet_shards_equals_index_from_the_array(items, tmp_path, factory):
    ids, vectors = items
    shards = _shards(tmp_path / "shards", ids, vectors, [0, 500, 1000])
    queries = vectors[::10] + 0.05
    kwargs = dict(factory=factory, metric="cosine", queries=queries, recall_floor=0.9, recall_k=10)
    from_files = build_index(ParquetVectors(shards), ParquetVectors(shards).item_ids(), **kwargs)
    in_memory = build_index(ArrayVectors(vectors), ids, **kwargs)
    assert from_files.manifest["self_check"] == in_memory.manifest["self_check"]
    np.testing.assert_array_equal(from_files.search(queries, 10).indices, in_memory.search(queries, 10).indices)
