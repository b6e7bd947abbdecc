"""benchmarks/bench_cold_start.py: the summary of a recipe's cold draws, and the draws a test run may read."""

import pytest

from benchmarks import bench_cold_start, results_page


def _draw(seed: int, among: float, content: float, low: float, dropout: float = 0.15) -> dict:
    row = {"split": "test", "id_dropout": dropout, "seed": seed, "warm recall@20": 0.3, "seconds": 100.0 + seed,
           "cold among cold recall@20": among, "cold among cold content recall@20": content,
           "cold among cold recall@20 / content": among / content}
    for label in ("cold among cold", "cold in catalogue"):
        for metric in bench_cold_start.HEADLINE:
            row[f"{label} {metric} minus content"] = [among - content, low, low + 0.02]
    return row


def test_the_summary_gives_each_figures_mean_and_range_and_counts_intervals_above_zero():
    rows = [_draw(43, 0.20, 0.16, 0.01), _draw(44, 0.18, 0.15, -0.001), _draw(45, 0.22, 0.17, 0.02),
            _draw(43, 0.10, 0.16, -0.08, dropout=0.0)]
    shipped, without = bench_cold_start.summary(rows)
    assert (shipped["draws"], shipped["seeds"], without["draws"], without["seeds"]) == (3, "43, 44, 45", 1, "43")
    assert [shipped[f"cold among cold recall@20 mean{end}"] for end in ("", "_min", "_max")] == [0.2, 0.18, 0.22]
    ratios = [0.20 / 0.16, 0.18 / 0.15, 0.22 / 0.17]
    assert shipped["cold among cold recall@20 / content mean"] == round(sum(ratios) / 3, 4)
    assert shipped["cold in catalogue recall@20 minus content: draws with the interval above zero"] == 2
    assert without["cold among cold ndcg@20 minus content: draws with the interval above zero"] == 0
    assert "cold in catalogue recall@20 mean" not in shipped  # no draw had the figure
    assert [shipped[f"seconds mean{end}"] for end in ("", "_min", "_max")] == [144, 143, 145]
    table = results_page.markdown_table([shipped])  # the page shows each figure as mean (min-max)
    assert "| cold among cold recall@20 mean (min-max) |" in table and "| 0.2 (0.18-0.22) |" in table


def test_a_test_run_refuses_validation_draws_and_defaults_to_fresh_ones():
    assert bench_cold_start.FIRST_SEED["test"] not in bench_cold_start.READ_TEST_SEEDS
    assert not set(bench_cold_start.READ_TEST_SEEDS) & set(bench_cold_start.VALIDATION_SEEDS)
    with pytest.raises(SystemExit):
        bench_cold_start.main(["--split=test", "--first_seed=7", "--no-record"])
