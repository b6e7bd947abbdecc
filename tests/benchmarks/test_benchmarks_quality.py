"""Smoke run of the quality benchmark, so it does not rot (the real figures come from `make bench`)."""

import pytest

from benchmarks import bench_quality


def test_bench_quality_smoke():
    rows = bench_quality.run(smoke=True)
    assert [row["model"] for row in rows] == [name for name, _, _ in bench_quality.RECIPE] + [
        "most-popular", "item-knn", "ease"]
    for row in rows:
        assert 0.0 <= row["recall@20"] <= 1.0 and 0.0 <= row["ndcg@20"] <= 1.0
        assert "leave-last-one-out" in row["protocol"] and "order: time" in row["protocol"]
        assert row["users"] == 200  # the smoke data's users: the rows come from the data the benchmark chose
    model = rows[0]
    for row in rows[1:]:  # each baseline row carries the per-user paired difference of the model against it
        assert row["model minus this, recall@20"] == pytest.approx(model["recall@20"] - row["recall@20"], abs=2e-4)
        low, high = map(float, row["its 95% CI"].strip("[]").split(", "))
        assert low <= row["model minus this, recall@20"] <= high and 0.0 <= row["p"] <= 1.0
