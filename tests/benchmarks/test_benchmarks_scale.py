"""Smoke run of benchmarks/bench_scale.py: every side runs in its subprocess, the pipeline end to end, and each
reports its rates and memory."""

from benchmarks import bench_scale


def test_bench_scale_smoke():
    rows = bench_scale.run(smoke=True)
    by_name = {row["name"]: row for row in rows}
    stages = {f"pipeline/{name}" for name in bench_scale.PIPELINE_STAGES}
    assert set(by_name) == {"generate", "pipeline", "prepare_dask_1", "prepare_dask_2", "prepare_in_memory"} | stages
    assert by_name["pipeline"]["rows"] == by_name["generate"]["rows"] == by_name["prepare_dask_2"]["rows"]
    assert by_name["pipeline"]["examples"] == by_name["prepare_in_memory"]["examples"] > 0
    assert by_name["pipeline"]["steps"] > 0 and by_name["pipeline/train"]["examples_per_s"] > 0
    assert by_name["pipeline/prepare"]["rows_per_s"] > 0 and by_name["pipeline/prepare"]["rss_vs_in_memory"] > 0
    for row in rows:
        assert row["peak_rss_mb"] > 0 and row["seconds"] >= 0
    assert all(by_name[side]["seconds"] > 0 for side in ("generate", "pipeline", "prepare_dask_1"))
    # the peak RSS after each stage is the process's high-water mark so far: it never falls
    peaks = [by_name[f"pipeline/{name}"]["peak_rss_mb"] for name in bench_scale.PIPELINE_STAGES]
    assert peaks == sorted(peaks) and peaks[-1] <= by_name["pipeline"]["peak_rss_mb"]
