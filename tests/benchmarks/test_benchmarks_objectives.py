"""Smoke run of the objectives study, so it does not rot (the real figures come from a full run)."""

from benchmarks import bench_objectives


def test_bench_objectives_smoke():
    rows = bench_objectives.run(smoke=True)
    quality = [row for row in rows if row["study"] == "quality"]
    assert [row["objective"] for row in quality] == [name for name, _ in bench_objectives.OBJECTIVES] + [
        "most-popular (baseline)"]
    for row in quality:
        assert 0.0 <= row["recall@20"] <= 1.0 and 0.0 <= row["ndcg@20"] <= 1.0
        assert 0.0 <= row["tail_share@20"] <= 1.0 and row["avg_popularity@20"] > 0
    for row in quality[:-1]:
        assert row["steps"] == 3 and row["infonce_bound_nats"] <= bench_objectives.np.log(bench_objectives.BATCH)
    gradient = [row for row in rows if row["study"] == "gradient"]
    assert [row["objective"] for row in gradient] == ["sampled_softmax", "nce", "negative_sampling",
                                                      "sampled_logistic"]
    assert all(-1.0 <= row[f"cosine_S{s}"] <= 1.0 for row in gradient for s in bench_objectives.GRADIENT_SIZES_SMOKE)
