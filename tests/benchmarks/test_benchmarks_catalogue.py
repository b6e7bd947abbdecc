"""benchmarks/bench_catalogue.py: a smoke run (one subprocess per size and mode: rows complete, the lazy optimizer
used exactly where asked, the row-wise mode on row-wise Adagrad), the paired ratios and medians over repeats (with
the children's measurements replaced), and a size too large for the machine skipped."""

from unittest import mock

from benchmarks import bench_catalogue


def test_bench_catalogue_smoke():
    rows = bench_catalogue.run(smoke=True, modes=("off", "rowwise"))
    assert [(row["items"], row["sparse_updates"]) for row in rows] == [(300, "off"), (300, "rowwise"),
                                                                         (3000, "off"), (3000, "rowwise")]
    for row in rows:
        assert row["examples_per_s"] > 0 and row["examples_per_cpu_s"] > 0 and row["peak_rss_mb"] > 0, row
        assert row["lazy_optimizer"] == (row["sparse_updates"] != "off"), row
        assert (row["optimizer_class"] == "LazyRowwiseAdagrad") == (row["sparse_updates"] == "rowwise"), row
    assert rows[0]["ratio_vs_smallest"] == rows[1]["ratio_vs_smallest"] == rows[0]["ratio_vs_shipped_smallest"] == 1


def test_ratios_are_paired_per_repeat_and_rates_are_medians():
    """Repeat r measures every rate times (1, 2, 4)[r]: the paired ratios are exact whatever the drift."""
    calls = []

    def spawn(items, mode, smoke, jit_compile):
        calls.append((items, mode))
        rate = {300: 1000.0, 1_000_000: 800.0}[items] * (0.5 if mode == "on" else 1) * (1, 2, 4)[(len(calls) - 1) // 4]
        return {"examples_per_s": rate, "examples_per_cpu_s": rate / 2, "lazy": mode == "on", "optimizer": "x",
                "peak_rss_mb": 1.0}

    with mock.patch.object(bench_catalogue, "_spawn", spawn):
        rows = bench_catalogue.run(smoke=True, sizes=[300, 1_000_000], modes=("off", "on"), repeats=3)
    assert calls == [(300, "off"), (300, "on"), (1_000_000, "off"), (1_000_000, "on")] * 3  # sizes interleaved
    big_on = rows[3]
    assert (big_on["examples_per_s"], big_on["examples_per_s_min"], big_on["examples_per_s_max"]) == (800, 400, 1600)
    assert big_on["ratio_vs_smallest"] == 0.8 and big_on["ratio_vs_shipped_smallest"] == 0.4
    assert big_on["ratio_vs_shipped_smallest_cpu"] == 0.4 and big_on["meets_target"] is False
    assert rows[0]["load_average_before"] and rows[0]["wall_s"] >= 0


def test_a_catalogue_beyond_the_memory_is_skipped():
    rows = bench_catalogue.run(smoke=True, sizes=[10 ** 12], modes=("off",))
    assert all("skipped" in row and "examples_per_s" not in row for row in rows)
