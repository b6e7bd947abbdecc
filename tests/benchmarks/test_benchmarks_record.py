"""benchmarks.record: a benchmark command's rows land in results.json's separate_runs and on the RESULTS.md page
rewritten from it, and run_all keeps them when it rewrites results.json."""

import json

from benchmarks import record, run_all

ROWS = [{"name": "http_8_clients", "items": 1_000_000, "clients": 8, "qps": 1234.5, "p50_ms": 5.0, "p99_ms": 9.0,
         "errors": 0}]


def test_record_appends_to_results_json_and_rewrites_results_md(tmp_path):
    results_md = tmp_path / "RESULTS.md"
    results_md.write_text("# Benchmark results\n")
    (tmp_path / "results.json").write_text(json.dumps({"machine": {}, "smoke": False, "benchmarks": []}))
    facts = {"date": "2026-11-24T00:00:00+00:00", "git_commit": "abc", "load_average_1_5_15": [1.0, 1.0, 1.0]}
    record.record("serving", ROWS, "python -m benchmarks.bench_serving --sizes=1000000", results_md, facts=facts)
    record.record("index", [{"items": 10}], "python -m benchmarks.bench_index", results_md,
                  source="copied", facts=facts)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["benchmarks"] == [] and [e["benchmark"] for e in data["separate_runs"]] == ["serving", "index"]
    entry = data["separate_runs"][0]
    assert entry["rows"] == ROWS and entry["date"] == facts["date"] and entry["machine"] == facts
    assert entry["command"] == "python -m benchmarks.bench_serving --sizes=1000000"
    assert data["separate_runs"][1]["source"] == "copied"
    text = results_md.read_text()
    assert text.startswith("# Benchmark results\n") and "## serving" in text and "## index" in text
    assert "`python -m benchmarks.bench_serving --sizes=1000000`: 2026-11-24T00:00:00+00:00, commit abc" in text
    assert "| http_8_clients | 8 | 0 | 1,000,000 | 5 | 9 | 1,234 |" in text  # name first, then as results.json sorts


def test_run_all_keeps_separate_runs(tmp_path, monkeypatch):
    (tmp_path / "results.json").write_text(json.dumps({"separate_runs": [{"benchmark": "serving", "rows": ROWS}]}))
    monkeypatch.setattr(run_all, "run_benchmark", lambda name, smoke: {"name": name, "description": "", "rows": [],
                                                                      "error": None, "seconds": 0.0})
    run_all.run_all(["data"], smoke=True, output=tmp_path / "RESULTS.md")
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["separate_runs"] == [{"benchmark": "serving", "rows": ROWS}] and data["benchmarks"][0]["name"] == "data"


def test_record_flag_defaults_to_recording_unless_smoke():
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    record.add_record_flag(parser)
    assert record.should_record(parser.parse_args([]))
    assert not record.should_record(parser.parse_args(["--smoke"]))
    assert not record.should_record(parser.parse_args(["--no-record"]))
    assert record.should_record(parser.parse_args(["--smoke", "--record"]))
