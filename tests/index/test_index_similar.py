"""The item-to-item index of the score-correlation view (``retrieval.index.similar``): the transform against numpy's
covariance, a cold item that users score like a warm one finds it (the plain inner product is 0), the round trip."""

import numpy as np

from retrieval import export
from retrieval.index import ItemIndex, build_index
from retrieval.index.idmap import IdMap
from retrieval.index.similar import Folded, build_similar_index, correlation_transform, similarity_vectors
from retrieval.index.source import ArrayVectors, ParquetVectors

D = 4  # each head's width


def test_the_transformed_inner_products_are_the_covariances_of_the_scores_over_users():
    rng = np.random.default_rng(0)
    users, items = rng.normal(size=(500, 6)), rng.normal(size=(20, 6))
    transform = correlation_transform(users)
    mapped = items @ transform.astype(np.float64)
    np.testing.assert_allclose(mapped @ mapped.T, np.cov(users @ items.T, rowvar=False), rtol=1e-4, atol=1e-4)


def blocks(seed: int = 0):
    """Warm items ``[v, 0]``, their cold copies ``[0, R v]`` and users ``[h, R h + noise]``: the cold head sees the
    cold copy as the warm head sees the original, so a copy's scores over users follow its original's."""
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.normal(size=(D, D)))
    warm = rng.normal(size=(30, D))
    heads = rng.normal(size=(400, D))
    users = np.hstack([heads, heads @ rotation.T + 0.05 * rng.normal(size=(400, D))])
    items = np.vstack([np.hstack([warm, np.zeros_like(warm)]), np.hstack([np.zeros_like(warm), warm @ rotation.T])])
    ids = [f"w{i}" for i in range(30)] + [f"c{i}" for i in range(30)]
    return items.astype(np.float32), IdMap(ids), users.astype(np.float32)


def test_a_cold_item_finds_the_warm_item_users_score_alike():
    items, id_map, users = blocks()
    plain = build_index(items, id_map, factory="Flat", metric="ip")
    similar = build_similar_index(ArrayVectors(items), id_map, users, factory="Flat")
    copies = items[30:]
    everything = plain.search(copies, 60)
    warm = np.char.startswith(everything.item_ids.astype(str), "w")
    assert np.all(everything.scores[warm] == 0)  # the plain inner product: every warm item 0, no order on merit
    found = similar.search(copies, 2)
    # After itself, its original (not another cold item), both correlated by nearly 1 (at most 1).
    assert found.item_ids.tolist() == [[f"c{i}", f"w{i}"] for i in range(30)]
    assert np.all(found.scores > 0.99) and np.all(found.scores < 1 + 1e-5)
    assert similar.manifest["view"] == "score_correlation" and similar.manifest["self_check"]["passed"]


def test_the_item_to_item_index_is_saved_inside_the_index_and_shares_its_id_map(tmp_path):
    items, id_map, users = blocks(seed=1)
    index = build_index(items, id_map, factory="Flat", metric="ip", queries=users)
    index.similar = build_similar_index(ArrayVectors(items), id_map, users, factory="Flat")
    index.save(tmp_path / "index")
    for mmap in (False, True):
        loaded = ItemIndex.load(tmp_path / "index", mmap=mmap)
        assert loaded.similar.id_map is loaded.id_map and loaded.transform is None
        np.testing.assert_array_equal(loaded.similar.transform, index.similar.transform)
        expected, got = index.similar.search(items[:5], 4), loaded.similar.search(items[:5], 4)
        np.testing.assert_array_equal(got.item_ids, expected.item_ids)
        np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-6)
    assert ItemIndex.load(tmp_path / "index" / "similar").similar is None  # a complete index directory itself


def test_the_fold_adds_the_feature_placement_of_the_items_read_by_id(tmp_path):
    """Warm items ``[v, 0]`` gain their feature placement ``[0, f]``; cold items ``[0, f]`` stay as they are; a file
    without the column (a run exported before the fold) is read as it is."""
    rng = np.random.default_rng(2)
    warm = np.array([True, False, True, True, False])
    by_id = np.hstack([rng.normal(size=(5, D)) * warm[:, None], rng.normal(size=(5, D)) * ~warm[:, None]])
    placed = np.hstack([np.zeros((5, D)), rng.normal(size=(5, D))])
    placed[~warm] = by_id[~warm]
    ids = [f"i{k}" for k in range(5)]
    export.write_item_embeddings(tmp_path / "folded.parquet", ids, by_id, warm, placed)
    folded = similarity_vectors(tmp_path / "folded.parquet")
    assert isinstance(folded, Folded)
    expected = np.hstack([by_id[:, :D], placed[:, D:]])
    for rows in (2, 5):
        np.testing.assert_allclose(np.concatenate(list(folded.chunks(rows))), expected, rtol=1e-6)
    export.write_item_embeddings(tmp_path / "plain.parquet", ids, by_id, warm)
    plain = similarity_vectors(tmp_path / "plain.parquet")
    assert isinstance(plain, ParquetVectors) and plain.column == "embedding"
    np.testing.assert_allclose(plain.read_all(), by_id, rtol=1e-6)
