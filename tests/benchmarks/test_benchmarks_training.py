"""Smoke run of benchmarks/bench_training.py: one subprocess per side, rows complete, rates and memory positive,
ratios paired by repeat, the same timed steps on both sides."""

from benchmarks import bench_training


def test_bench_training_smoke():
    rows = bench_training.run(smoke=True)
    assert [row["name"] for row in rows] == ["ours", "tfrs", "ours_first_epoch", "tfrs_first_epoch"]
    for row in rows:
        assert row["dataset"] == "synthetic-smoke" and row["examples"] > 0 and row["repeats"] == 1, row
        for key in ("examples_per_s", "best_window_examples_per_s", "examples_per_cpu_s", "ratio_vs_tfrs",
                    "best_window_ratio_vs_tfrs", "cpu_ratio_vs_tfrs"):
            assert 0 < row[f"{key}_min"] <= row[key] <= row[f"{key}_max"], row
        assert row["peak_rss_mb"] > 0, row
    by_name = {row["name"]: row for row in rows}
    assert by_name["tfrs"]["ratio_vs_tfrs"] == 1.0 and by_name["tfrs"]["cpu_ratio_vs_tfrs"] == 1.0
    # One repeat: the paired ratio is the ratio of the two rates.
    ours, tfrs = by_name["ours"], by_name["tfrs"]
    assert abs(ours["ratio_vs_tfrs"] - ours["examples_per_s"] / tfrs["examples_per_s"]) <= 0.01 * ours["ratio_vs_tfrs"]
    assert ours["meets_target"] == (ours["ratio_vs_tfrs_min"] >= bench_training.TARGET_RATIO)
    assert ours["best_window_examples_per_s"] >= ours["examples_per_s"]


def test_both_sides_are_timed_over_the_same_steps():
    """A whole epoch of warm-up before the steady window, the first-epoch window after ``window`` warm-up steps."""
    windows, epochs = bench_training._windows(num_examples=10_000, batch_size=100, window=30, count=2)
    assert windows == {"first_epoch": (30, 90), "steady": (120, 180)} and epochs == 2
