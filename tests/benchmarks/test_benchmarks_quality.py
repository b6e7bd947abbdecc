"""Smoke run of the quality benchmark, so it does not rot (the real figures: `python -m benchmarks.bench_quality`)."""

import pytest

from benchmarks import bench_quality


def _cells(text: str) -> list[tuple[float, float, float]]:
    """``(diff, low, high)`` of each seed in a ``+d [low, high] p x; ...`` cell."""
    out = []
    for part in text.split("; "):
        diff, interval = part.split(" [")
        low, high = interval.split("]")[0].split(", ")
        out.append((float(diff), float(low), float(high)))
    return out


def test_bench_quality_smoke_runs_the_one_command_per_seed_with_paired_differences():
    rows = bench_quality.run(smoke=True)
    assert [row["model"] for row in rows] == [name for name, _, _ in bench_quality.RECIPE] + [
        "most-popular", "item-knn", "ease"]
    model, baselines = rows[0], rows[1:]
    assert model["seeds"] == "42, 43"
    # The one command tuned on its automatic holdout (a best epoch per seed) and the test part was leave-last-one-out.
    assert "leave-last-one-out" in model["protocol"] and "order: time" in model["protocol"]
    assert all(epoch in ("1", "2") for epoch in model["epochs per seed"].split(", "))
    for metric in bench_quality.HEADLINE:
        per_seed = [float(v) for v in model[f"{metric} per seed"].split(", ")]
        assert len(per_seed) == 2 and model[f"{metric} mean"] == pytest.approx(sum(per_seed) / 2, abs=1e-4)
    for row in rows:
        assert 0.0 <= row["recall@20 mean"] <= 1.0 and 0.0 <= row["ndcg@20 mean"] <= 1.0
        assert row["users"] == 200  # the smoke data's users: the rows come from the data the benchmark chose
    for row in baselines:  # per seed, the model minus the baseline per user, inside its own 95% interval
        for metric in bench_quality.HEADLINE:
            model_values = [float(v) for v in model[f"{metric} per seed"].split(", ")]
            cells = _cells(row[f"model minus this, {metric} [95% CI], per seed"])
            assert len(cells) == 2
            for value, (diff, low, high) in zip(model_values, cells, strict=True):
                assert diff == pytest.approx(value - row[f"{metric} mean"], abs=2e-4)  # deterministic baselines
                assert low <= diff <= high


def test_one_command_has_no_validation_file():
    flags = bench_quality.one_command("train.txt", "test.txt")
    assert flags["data.split"] == "files" and flags["data.test_path"] == "test.txt"
    assert not any("validation" in key for key in flags)
