"""benchmarks/bench_cold_start.py: the summary of a recipe's cold draws, and the draws a test run may read."""

import pytest

from benchmarks import bench_cold_start


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
    assert shipped["seed"] == "3 draws (43, 44, 45)" and without["seed"] == "1 draws (43)"
    assert shipped["cold among cold recall@20"] == "0.2000 (0.1800-0.2200)"
    ratios = [0.20 / 0.16, 0.18 / 0.15, 0.22 / 0.17]
    assert shipped["cold among cold recall@20 / content"] == (
        f"{sum(ratios) / 3:.4f} ({min(ratios):.4f}-{max(ratios):.4f})")
    assert shipped["cold in catalogue recall@20 minus content"] == "interval above zero in 2 of 3"
    assert without["cold among cold ndcg@20 minus content"] == "interval above zero in 0 of 1"
    assert "cold in catalogue recall@20" not in shipped  # no draw had the figure
    assert shipped["seconds"] == "144 (143-145)"


def test_a_test_run_refuses_validation_draws_and_defaults_to_fresh_ones():
    assert bench_cold_start.FIRST_SEED["test"] not in bench_cold_start.READ_TEST_SEEDS
    assert not set(bench_cold_start.READ_TEST_SEEDS) & set(bench_cold_start.VALIDATION_SEEDS)
    with pytest.raises(SystemExit):
        bench_cold_start.main(["--split=test", "--first_seed=7", "--no-record"])
