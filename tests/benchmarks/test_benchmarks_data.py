"""Smoke run of benchmarks/bench_data.py: rows are complete and the fast builders match the loop reference."""

from benchmarks import bench_data


def test_bench_data_smoke():
    rows = bench_data.run(smoke=True)
    assert {row["name"] for row in rows} == {"next_item_examples", "skipgram_pairs"}
    for row in rows:
        assert row["matches_reference"], row
        assert row["examples"] > 0 and row["median_s"] > 0 and row["examples_per_s"] > 0
        assert row["reference_examples_per_s"] > 0 and row["speedup_vs_loop"] > 0
