"""Smoke run of the catalogue refresh benchmark: the user's command, then a hot-reloading holder serving new items."""

from benchmarks import bench_refresh


def test_bench_refresh_smoke():
    rows = bench_refresh.run(new_items=50, smoke=True)
    assert len(rows) == 2 and rows[-1]["repeat"] == "median"
    first = rows[0]
    assert first["new items"] == 50 and first["similar to a new item"] == 5
    assert first["refresh command s"] > 0 and first["until served s"] >= 0
