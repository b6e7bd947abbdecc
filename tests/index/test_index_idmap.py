"""``IdMap``: lookups both ways, its collision fallback, its file, and its memory per id."""

import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval.errors import InputError
from retrieval.index import build_index, idmap
from retrieval.index.idmap import IdMap


def test_lookups_both_ways_with_custom_indices():
    id_map = IdMap(["b", "a", 7], np.array([10, 3, 5]))
    assert id_map.item_ids.tolist() == ["b", "a", "7"]  # non-strings become str, as before
    np.testing.assert_array_equal(id_map.positions_of(["a", "7", "zz", ""]), [1, 2, -1, -1])
    np.testing.assert_array_equal(id_map.indices_of(np.array(["7", "b"], dtype=object)), [5, 10])
    found = id_map.ids_of(np.array([[10, -1], [4, 99]]))
    assert found.dtype == object and found.tolist() == [["b", ""], ["", ""]]
    assert IdMap([]).positions_of(["a"]).tolist() == [-1] and IdMap([]).ids_of(np.array([-1])).tolist() == [""]


def test_hash_collisions_are_resolved_exactly(monkeypatch):
    """A hash with collisions everywhere (4 values) must not change any answer nor hide a duplicate."""
    strong = idmap._hashes
    monkeypatch.setattr(idmap, "_hashes", lambda ids: strong(ids) % np.uint64(4))
    ids = [f"id{i}" for i in range(50)]
    id_map = IdMap(ids)
    np.testing.assert_array_equal(id_map.positions_of(ids[::-1] + ["nope"]), list(range(49, -1, -1)) + [-1])
    with pytest.raises(InputError, match="'id3' appears more than once"):
        IdMap(ids + ["id3", "id1"])


def test_save_load_keeps_the_file_format(tmp_path):
    IdMap(["x", "y"], np.array([4, 2])).save(tmp_path / "ids.parquet")
    table = pq.read_table(tmp_path / "ids.parquet")
    assert table.schema.field("index").type == pa.int64() and table.schema.field("item_id").type == pa.string()
    loaded = IdMap.load(tmp_path / "ids.parquet")
    assert loaded.item_ids.tolist() == ["x", "y"] and loaded.indices.tolist() == [4, 2]
    assert loaded.ids_of(np.array([2, 4])).tolist() == ["y", "x"]


def test_memory_per_id_is_small(monkeypatch):
    """Beside the ids (16 bytes each when short), 24 bytes per id (indices, both lookup tables) and a transient peak
    under 48, where Python str in a pandas Index took ~250. Small chunks keep the fixed per-chunk cost out of it."""
    monkeypatch.setattr(idmap, "CHUNK", 1024)
    ids = idmap.id_array([f"i{i}" for i in range(100_000)])
    tracemalloc.start()
    try:
        id_map = IdMap(ids)
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(id_map) == 100_000 and retained / 100_000 < 32 and peak / 100_000 < 48, (retained, peak)


def test_build_index_takes_a_ready_map_without_copying_it():
    vectors = np.random.default_rng(0).standard_normal([20, 4]).astype(np.float32)
    id_map = IdMap([f"v{i}" for i in range(20)])
    assert build_index(vectors, id_map, factory="Flat").id_map is id_map
    with pytest.raises(InputError, match="inside the IdMap"):
        build_index(vectors, id_map, indices=np.arange(20), factory="Flat")
