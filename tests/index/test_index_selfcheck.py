"""retrieval.index.selfcheck on small hand-built FAISS indexes whose recall is known exactly: the held-out half of the
queries decides, and FAISS's empty result slots (id -1) are misses."""

import faiss
import numpy as np
import pytest

from retrieval.index.selfcheck import RecallProbe, SelfCheck, self_check

D, PER_CLUSTER, K = 8, 50, 10


def _exact_index(vectors: np.ndarray, ids: np.ndarray) -> faiss.Index:
    """An exact L2 index over ``vectors`` under the external ``ids`` (as ``build_index`` stores vocabulary indices)."""
    index = faiss.IndexIDMap2(faiss.IndexFlatL2(vectors.shape[1]))
    index.add_with_ids(vectors, ids)
    return index


def _clusters() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two far-apart clusters of items; returns (vectors, their ids, whether each is in cluster A)."""
    rng = np.random.default_rng(0)
    centers = np.zeros([2, D], np.float32)
    centers[:, 0] = [10.0, -10.0]
    in_a = np.repeat([True, False], PER_CLUSTER)
    vectors = centers[(~in_a).astype(int)] + rng.standard_normal([2 * PER_CLUSTER, D]).astype(np.float32)
    return vectors, np.arange(len(vectors), dtype=np.int64) + 2, in_a


def _near(vectors: np.ndarray, rows: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` queries each close to an item drawn from ``rows``."""
    return (vectors[rng.choice(rows, n)] + 0.1 * rng.standard_normal([n, D])).astype(np.float32)


def test_the_held_out_half_decides_not_the_tuning_half():
    vectors, ids, in_a = _clusters()
    index = _exact_index(vectors[in_a], ids[in_a])  # an index that lost every item of cluster B
    rng, a_rows, b_rows = np.random.default_rng(1), np.flatnonzero(in_a), np.flatnonzero(~in_a)
    # Tuning half: 10 queries near A (recall 1); held-out half: 8 near A (recall 1), 2 near B (recall 0).
    queries = np.concatenate([_near(vectors, a_rows, 10, rng), _near(vectors, a_rows, 8, rng),
                              _near(vectors, b_rows, 2, rng)])
    check = self_check(index, vectors, ids, queries, "users", "l2", k=K, floor=0.9, margin=0.05, search_params=None)
    assert (check.tuning_recall, check.recall) == (1.0, 0.8)
    assert (check.num_tuning_queries, check.num_queries) == (10, 10)
    assert not check.passed and check.to_dict()["passed"] is False


def test_passed_compares_the_held_out_recall_with_the_floor():
    common = dict(k=20, num_queries=100, num_tuning_queries=100, query_source="users", search_params={},
                  settings_tried=3)
    assert not SelfCheck(floor=0.9, recall=0.8, tuning_recall=0.99, **common).passed
    assert SelfCheck(floor=0.9, recall=0.9, tuning_recall=0.85, **common).passed  # at the floor passes


def test_empty_result_slots_are_misses():
    vectors, ids, _ = _clusters()
    query = vectors[:1] + np.float32(0.01)  # its nearest item is row 0, which the index holds alone
    probe = RecallProbe(vectors, ids, query, 3, "l2")
    index = _exact_index(vectors[:1], ids[:1])
    assert index.search(query, 3)[1].tolist() == [[ids[0], -1, -1]]
    assert probe(index) == pytest.approx(1 / 3)
