"""Smoke run of benchmarks/bench_catalogue.py: one subprocess per (size, mode), rows complete, the lazy optimizer
used exactly where asked, ratios against the smallest size; a size too large for the machine is skipped."""

from benchmarks import bench_catalogue


def test_bench_catalogue_smoke():
    rows = bench_catalogue.run(smoke=True)
    assert [(row["items"], row["sparse_updates"]) for row in rows] == [(300, "off"), (300, "on"), (3000, "off"),
                                                                         (3000, "on")]
    for row in rows:
        assert row["examples_per_s"] > 0 and row["examples_per_cpu_s"] > 0 and row["peak_rss_mb"] > 0, row
        assert row["lazy_optimizer"] == (row["sparse_updates"] == "on"), row
    assert rows[0]["ratio_vs_smallest"] == rows[1]["ratio_vs_smallest"] == 1.0


def test_a_catalogue_beyond_the_memory_is_skipped():
    rows = bench_catalogue.run(smoke=True, sizes=[10 ** 12])
    assert all("skipped" in row and "examples_per_s" not in row for row in rows)
