"""benchmarks/run_all.py: a smoke run into a temporary folder, table conventions, failure isolation."""

import json
import shutil
import types

import pytest

from benchmarks import results_page, run_all


def test_smoke_run_writes_machine_facts_and_tables(tmp_path):
    output = run_all.main(["--smoke", "--only=data", f"--output={tmp_path / 'RESULTS.md'}"])
    text = output.read_text()
    for fact in ("| cpu |", "| logical_cores |", "| memory_gib |", "| python |", "| tensorflow |",
                 "| tensorflow-recommenders |", "| faiss-cpu |", "| gensim |", "| date |"):
        assert fact in text
    assert "## data" in text and "| name |" in text and "| next_item_examples |" in text
    raw = json.loads((tmp_path / "results.json").read_text())
    assert raw["smoke"] is True and [b["name"] for b in raw["benchmarks"]] == ["data"]
    assert raw["benchmarks"][0]["error"] is None and len(raw["benchmarks"][0]["rows"]) == 2


def test_smoke_without_output_never_writes_the_real_results():
    output = run_all.main(["--smoke", "--only=bench_data"])
    try:
        assert output != run_all.DEFAULT_OUTPUT and output.exists()
    finally:
        shutil.rmtree(output.parent)


def test_unknown_benchmark_is_a_usage_error():
    with pytest.raises(SystemExit) as error:
        run_all.main(["--smoke", "--only=nope"])
    assert error.value.code == 2


def test_discover_finds_the_benchmark_modules():
    assert {"data", "training"} <= set(run_all.discover())


def test_a_failing_benchmark_shows_its_error_and_the_others_still_render():
    def boom(smoke):
        raise RuntimeError("disk on fire")

    modules = {"bad": types.SimpleNamespace(__doc__="Bad one.", run=boom),
               "good": types.SimpleNamespace(__doc__="Good one.\n\nMore.", run=lambda smoke: [{"name": "x", "v": 1}])}
    results = [run_all.run_benchmark(name, True, load=modules.__getitem__) for name in ("bad", "good")]
    assert "disk on fire" in results[0]["error"] and results[0]["rows"] == []
    assert results[1]["error"] is None and results[1]["description"] == "Good one."
    text = results_page.render({"machine": {"cpu": "test"}, "smoke": True, "benchmarks": results})
    bad, good = text.split("## bad")[1].split("## good")
    assert "**Failed:**" in bad and "RuntimeError: disk on fire" in bad
    assert "| x | 1 |" in good


def test_missing_module_is_reported_not_raised():
    result = run_all.run_benchmark("does_not_exist", False)
    assert "ModuleNotFoundError" in result["error"]


def test_table_folds_min_max_and_puts_rss_beside_throughput():
    rows = [{"name": "ours", "examples_per_s": 2000, "examples_per_s_min": 1500, "examples_per_s_max": 2500,
             "ratio_vs_ref": 2.0, "peak_rss_mb": 512.25},
            {"name": "ref", "examples_per_s": 1000.0, "ratio_vs_ref": 1.0, "peak_rss_mb": 300, "note": "a|b"}]
    header, rule, first, second = results_page.markdown_table(rows).splitlines()
    assert header == "| name | examples_per_s (median, min-max) | peak_rss_mb | ratio_vs_ref | note |"
    assert rule == "|---|---|---|---|---|"
    assert first == "| ours | 2,000 (1,500-2,500) | 512 | 2 |  |"
    assert second == "| ref | 1,000 | 300 | 1 | a\\|b |"
