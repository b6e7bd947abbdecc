"""benchmarks/RESULTS.md is the page benchmarks.results_page writes from results.json: current, and the latest run
of each command per benchmark."""

from benchmarks import results_page
from retrieval.artifacts import read_json


def test_committed_page_is_current():
    assert results_page.is_current(), f"benchmarks/RESULTS.md is stale: run {results_page.COMMAND}"


def test_latest_run_of_each_command_newest_first():
    def entry(command, date, value):
        return {"benchmark": "bench_serving", "command": command, "date": date, "machine": {"git_commit": date[:4]},
                "rows": [{"v": value}]}

    data = {"machine": {"date": "2026-01-01", "git_commit": "aaa", "load_average_1_5_15": [1.0, 2.0, 3.0]},
            "benchmarks": [{"name": "serving", "description": "", "rows": [{"v": 0}], "error": None}],
            "separate_runs": [entry("python -m benchmarks.bench_serving --sizes=1", "2026-01-02", 1),
                              entry("python -m benchmarks.bench_serving --sizes=1 --record", "2026-01-03", 2),
                              entry("python -m benchmarks.bench_serving --sizes=2", "2026-01-01T10", 3)]}
    found = results_page.latest(results_page.runs(data))["serving"]
    assert [(run.command, run.rows[0]["v"]) for run in found] == [
        ("python -m benchmarks.bench_serving --sizes=1", 2), ("python -m benchmarks.bench_serving --sizes=2", 3),
        (results_page.RUN_ALL, 0)]
    text = results_page.render(data)
    assert "`python -m benchmarks.run_all`: 2026-01-01, commit aaa, load average 1, 2, 3." in text
    assert text.count("## serving") == 1 and "| 1 |" not in text


def test_every_recorded_benchmark_has_a_section():
    text = results_page.PAGE.read_text()
    names = {run.benchmark for run in results_page.runs(read_json(results_page.RESULTS_JSON))}
    assert names and all(f"\n## {name}\n" in text for name in names)
