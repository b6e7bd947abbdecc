"""retrieval.index: every factory kind against numpy brute force, id map round trip, plain faiss readability,
parameter tuning to the recall floor, and the self-check refusing an index below it."""

import faiss
import numpy as np
import pandas as pd
import pytest

from retrieval.errors import GateError, InputError
from retrieval.index import IndexQualityError, ItemIndex, auto_factory, build_index
from retrieval.index.selfcheck import RecallProbe, apply_search_params, tune

N, D = 3000, 16


def clustered(n: int, d: int, clusters: int, seed: int) -> np.ndarray:
    """Gaussian clusters of different sizes and spreads (a realistic, not trivially separable, ANN workload)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal([clusters, d])
    sizes = rng.dirichlet(np.ones(clusters))
    labels = rng.choice(clusters, size=n, p=sizes)
    spread = rng.uniform(0.3, 0.8, clusters)[labels, None]
    return (centers[labels] + spread * rng.standard_normal([n, d])).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    vectors = clustered(N, D, 30, seed=0)
    ids = np.array([f"item{i}" for i in range(N)], dtype=object)
    queries = clustered(200, D, 30, seed=0)[:200] + 0.1 * np.random.default_rng(1).standard_normal([200, D])
    return vectors, ids, queries.astype(np.float32)


def brute_force(vectors: np.ndarray, queries: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Reference top-k (positions, higher-is-better scores) with numpy."""
    if metric == "cosine":
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    if metric == "l2":
        scores = -((queries[:, None, :] - vectors[None, :, :]) ** 2).sum(-1)
    else:
        scores = queries @ vectors.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return top, np.take_along_axis(scores, top, axis=1)


@pytest.mark.parametrize("metric", ["ip", "l2", "cosine"])
def test_flat_is_exact_for_every_metric(data, metric):
    vectors, ids, queries = data
    index = build_index(vectors, ids, factory="Flat", metric=metric, queries=queries)
    found = index.search(queries, 10)
    top, scores = brute_force(vectors, queries, 10, metric)
    np.testing.assert_array_equal(found.indices, top + 2)  # vocabulary index = row + 2
    np.testing.assert_array_equal(found.item_ids, ids[top])
    np.testing.assert_allclose(found.scores, scores, rtol=1e-4, atol=1e-4)
    assert index.manifest["self_check"]["recall"] == 1.0 and index.manifest["self_check"]["query_source"] == "users"


@pytest.mark.parametrize("factory, knob", [("IVF32,Flat", "nprobe"), ("HNSW16", "efSearch"),
                                           ("IVF32,PQ8x4fs,RFlat", "nprobe"), ("IVF32,PQ8", "nprobe")])
def test_approximate_kinds_reach_the_floor_with_tuned_parameters(data, factory, knob):
    vectors, ids, queries = data
    floor = 0.9 if factory == "IVF32,PQ8" else 0.95  # plain PQ without re-ranking tops out lower
    index = build_index(vectors, ids, factory=factory, metric="l2", queries=queries, recall_floor=floor, recall_k=50)
    check = index.manifest["self_check"]
    assert check["recall"] >= floor and check["passed"] and knob in index.search_params
    # numpy reference on all 200 queries = the mean of the build's tuning and check halves (100 queries each):
    # a hit is a found item scoring at least the true 50th score (ties within 1e-4 relative count, ann-benchmarks)
    scores = -((queries[:, None, :] - vectors[None, :, :]) ** 2).sum(-1)
    kth = np.sort(scores, axis=1)[:, -50]
    found = np.take_along_axis(scores, index.search(queries, 50).indices - 2, axis=1)
    reference = np.mean(found >= (kth - 1e-4 * np.maximum(1, np.abs(kth)))[:, None])
    assert reference == pytest.approx((check["recall"] + check["tuning_recall"]) / 2)


def test_tuning_picks_the_smallest_knob_reaching_the_target(data):
    vectors, ids, queries = data
    index = build_index(vectors, ids, factory="IVF64,Flat", metric="ip", queries=queries,
                        search_params={"nprobe": 64})
    probe = RecallProbe(vectors, np.arange(N) + 2, queries, 100, "ip")
    params, recall, _ = tune(index.index, probe, 0.97)
    nprobe = params["nprobe"]
    assert 1 < nprobe < 64 and recall >= 0.97 and faiss.extract_index_ivf(index.index).nprobe == nprobe
    apply_search_params(index.index, {"nprobe": nprobe - 1})
    assert probe(index.index) < 0.97
    apply_search_params(index.index, {"nprobe": nprobe})
    assert probe(index.index) >= 0.97


def test_recall_probe_matches_set_intersection_and_counts_ties(data):
    vectors, ids, queries = data
    index = faiss.IndexIDMap2(faiss.IndexFlatL2(D))
    index.add_with_ids(vectors[::2], np.arange(0, N, 2).astype(np.int64) + 2)  # finds only even rows
    probe = RecallProbe(vectors, np.arange(N) + 2, queries, 20, "l2")
    top, _ = brute_force(vectors, queries, 20, "l2")
    assert probe(index) == pytest.approx(np.mean(top % 2 == 0))
    twins = np.repeat(vectors[:50], 2, axis=0)  # every vector twice: any tie order is a perfect answer
    flat = faiss.IndexIDMap2(faiss.IndexFlatL2(D))
    flat.add_with_ids(twins[::-1].copy(), np.arange(100)[::-1].astype(np.int64) + 2)
    assert RecallProbe(twins, np.arange(100) + 2, queries, 7, "l2")(flat) == 1.0


def test_self_check_refuses_an_index_below_the_floor(data):
    vectors, ids, queries = data
    with pytest.raises(IndexQualityError, match="below the floor"):  # given, untuned parameters
        build_index(vectors, ids, factory="IVF64,Flat", queries=queries, search_params={"nprobe": 1})
    with pytest.raises(IndexQualityError, match="recall@100"):  # PQ codes alone cannot rank 100 neighbours exactly
        build_index(vectors, ids, factory="IVF16,PQ4x4", queries=queries, recall_floor=0.99)
    assert issubclass(IndexQualityError, GateError) and not issubclass(IndexQualityError, InputError)


def test_save_load_round_trip_and_plain_faiss_readability(data, tmp_path):
    vectors, ids, queries = data
    index = build_index(vectors, ids, factory="IVF32,Flat", metric="cosine", queries=queries, model_version="v7")
    directory = index.save(tmp_path / "index")
    loaded = ItemIndex.load(directory)
    expected = index.search(queries, 25)
    for got in (loaded.search(queries, 25),):
        np.testing.assert_array_equal(got.indices, expected.indices)
        np.testing.assert_array_equal(got.item_ids, expected.item_ids)
    assert loaded.search_params == index.search_params and loaded.manifest["model_version"] == "v7"
    for key in ("dimension", "metric", "count", "factory", "search_params", "built_at", "self_check"):
        assert key in loaded.manifest
    id_table = pd.read_parquet(directory / "ids.parquet")
    np.testing.assert_array_equal(id_table["index"], np.arange(N) + 2)
    np.testing.assert_array_equal(id_table["item_id"], ids)
    plain = faiss.read_index(str(directory / "index.faiss"))  # no retrieval code involved
    assert faiss.extract_index_ivf(plain).nprobe == loaded.search_params["nprobe"]  # tuned value in the file
    unit = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    _, plain_ids = plain.search(unit, 25)
    np.testing.assert_array_equal(plain_ids, expected.indices)
    build_index(vectors[:100], ids[:100], factory="Flat").save(directory)  # an existing index is replaced whole
    assert len(ItemIndex.load(directory)) == 100


def test_custom_indices_and_missing_results(data):
    vectors, ids, _ = data
    index = build_index(vectors[:5], ids[:5], indices=np.array([10, 20, 30, 40, 50]), factory="Flat")
    found = index.search(vectors[:1], 10)  # k above the catalogue is clamped
    assert found.indices.shape == (1, 5) and found.indices[0, 0] == 10 and found.item_ids[0, 0] == "item0"
    assert list(index.id_map.indices_of(["item3", "nope", ""])) == [40, -1, -1]
    assert list(index.id_map.ids_of(np.array([-1, 20, 11]))) == ["", "item1", ""]


def test_auto_factory_thresholds(data):
    vectors, ids, _ = data
    assert auto_factory(49_999, 64) == "Flat"
    assert auto_factory(1_000_000, 64) == "IVF4096,PQ64x4fsr,RFlat"
    assert auto_factory(50_000, 32) == "IVF1024,PQ32x4fsr,RFlat"
    assert auto_factory(20_000_000, 64) == "IVF16384,PQ64x4fsr,RFlat"
    assert build_index(vectors, ids).factory == "Flat"


@pytest.mark.parametrize("kwargs, message", [
    ({"factory": "Bogus7"}, "FAISS cannot build"),
    ({"factory": "IVF4096,Flat"}, "training vectors"),
    ({"metric": "hamming"}, "unknown metric"),
    ({"queries": np.ones([3, 5], np.float32)}, "dimension"),
    ({"indices": np.zeros(N, np.int64)}, "unique"),
])
def test_bad_build_inputs_are_input_errors(data, kwargs, message):
    vectors, ids, _ = data
    with pytest.raises(InputError, match=message):
        build_index(vectors, ids, **kwargs)


def test_non_finite_vectors_and_duplicate_ids_are_rejected(data):
    vectors, ids, _ = data
    bad = vectors.copy()
    bad[3, 1] = np.nan
    with pytest.raises(InputError, match="NaN"):
        build_index(bad, ids)
    with pytest.raises(InputError, match="unique"):
        build_index(vectors[:3], ["a", "b", "a"])
