"""Smoke run of benchmarks/bench_evaluation.py: every row is there and the fast path matches the naive loop."""

from benchmarks import bench_evaluation


def test_bench_evaluation_smoke():
    rows = bench_evaluation.run(smoke=True)
    names = [row["name"] for row in rows]
    assert names.count("exact_ranking_metrics") == 3
    assert {"naive_loop", "baseline_most_popular", "baseline_random", "baseline_item_knn", "item_knn_fit",
            "bootstrap", "full_evaluation"} <= set(names)
    for row in rows:
        if row["name"] != "naive_loop":
            assert row["median_s"] > 0 and row["cpu_s"] > 0 and row["users"] > 0
        if row["name"] == "naive_loop":
            assert row["matches_reference"] and row["extrapolated"] and row["speedup_vs_naive"] > 0
