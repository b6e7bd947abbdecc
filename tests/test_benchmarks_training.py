"""Smoke run of benchmarks/bench_training.py: one subprocess per side, rows complete, rates and memory positive."""

import math

from benchmarks import bench_training


def test_bench_training_smoke():
    rows = bench_training.run(smoke=True)
    assert [row["name"] for row in rows] == ["ours", "tfrs", "tfrs_first_epoch"]
    for row in rows:
        assert row["dataset"] == "synthetic-smoke" and row["examples"] > 0 and row["repeats"] == 1, row
        for key in ("examples_per_s", "examples_per_cpu_s"):
            assert 0 < row[f"{key}_min"] <= row[key] <= row[f"{key}_max"], row
        assert row["peak_rss_mb"] > 0 and row["ratio_vs_tfrs"] > 0 and row["cpu_ratio_vs_tfrs"] > 0, row
    by_name = {row["name"]: row for row in rows}
    assert by_name["tfrs"]["ratio_vs_tfrs"] == 1.0 and by_name["tfrs"]["cpu_ratio_vs_tfrs"] == 1.0
    assert math.isclose(by_name["ours"]["ratio_vs_tfrs"],
                        by_name["ours"]["examples_per_s"] / by_name["tfrs"]["examples_per_s"], abs_tol=0.01)
