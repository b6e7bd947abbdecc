"""Smoke run of benchmarks/bench_scale.py: every stage runs in its subprocess and reports its rates and memory."""

from benchmarks import bench_scale


def test_bench_scale_smoke():
    rows = bench_scale.run(smoke=True)
    assert {row["name"] for row in rows} == {"generate", "prepare", "train", "prepare_dask_1", "prepare_dask_2",
                                             "prepare_in_memory"}
    by_name = {row["name"]: row for row in rows}
    assert by_name["train"]["steps"] == bench_scale.SMOKE_TRAIN_STEPS and by_name["train"]["examples_per_s"] > 0
    assert by_name["prepare"]["rows"] == by_name["generate"]["rows"] == by_name["prepare_dask_2"]["rows"]
    assert by_name["prepare"]["examples"] == by_name["prepare_in_memory"]["examples"] > 0
    for row in rows:
        assert row["peak_rss_mb"] > 0 and row["seconds"] > 0
    assert by_name["prepare"]["rss_vs_in_memory"] > 0
