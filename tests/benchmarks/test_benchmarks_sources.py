"""Smoke run of benchmarks/bench_sources.py: both sources train the same examples, rates positive, the ratio paired."""

from benchmarks import bench_sources


def test_bench_sources_smoke():
    rows = bench_sources.run(smoke=True)
    assert [row["name"] for row in rows] == ["in_memory", "streamed"]
    in_memory, streamed = rows
    assert in_memory["examples"] == streamed["examples"] > 0
    for row in rows:
        assert 0 < row["examples_per_s_min"] <= row["examples_per_s"] <= row["examples_per_s_max"], row
    ratio = streamed["examples_per_s"] / in_memory["examples_per_s"]
    assert abs(streamed["ratio_vs_in_memory"] - ratio) <= 0.01 * ratio + 0.001
    assert streamed["meets_target"] == (streamed["ratio_vs_in_memory"] >= bench_sources.TARGET_RATIO)
