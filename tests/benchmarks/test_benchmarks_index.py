"""Smoke runs of the index and serving benchmarks (tiny sizes; the figures themselves are not asserted)."""

from benchmarks import bench_index, bench_serving


def test_bench_index_smoke():
    rows = {row["name"]: row for row in bench_index.run(smoke=True)}
    assert set(rows) == {"Flat", "HNSW32", "IVF-Flat", "IVF-PQ+refine", "auto from files"}
    assert rows["Flat"]["recall_at_100"] == 1.0 and rows["Flat"]["qps_vs_flat"] == 1.0
    for name in ("HNSW32", "IVF-Flat", "IVF-PQ+refine"):  # tuned to the floor by the build's self-check
        assert rows[name]["self_check_recall"] >= 0.95 and rows[name]["qps"] > 0 and rows[name]["index_bytes"] > 0
    assert rows["IVF-PQ+refine"]["codes_only_recall"] < rows["IVF-PQ+refine"]["recall_at_100"]  # re-ranking helps
    streamed = rows["auto from files"]  # 60k items built from Parquet shards in a child process
    assert streamed["items"] == 60_000 and streamed["factory"].startswith("IVF1024,PQ64x4fsr")
    assert streamed["recall_at_100"] >= 0.9 and streamed["peak_rss_mb"] > 0 and streamed["index_bytes"] > 0


def test_bench_serving_smoke():
    rows = {row["name"]: row for row in bench_serving.run(smoke=True)}
    assert set(rows) == {"library_1_client", "batcher_8_clients", "http_1_client", "http_8_clients",
                         "http_1_client_2_workers", "http_8_clients_2_workers", "http_8_clients_unbatched"}
    for row in rows.values():
        assert row["requests"] > 0 and row["p99_ms"] >= row["p50_ms"] > 0 and row["errors"] == 0
    assert rows["http_8_clients_2_workers"]["workers"] == 2 and rows["http_8_clients"]["workers"] == 1
    assert rows["http_8_clients_2_workers"]["server_pss_mb"] > 0
    assert rows["http_8_clients"]["server_cpu_ms_per_request"] > 0
