"""Smoke run of the quality benchmark, so it does not rot (the real figures: `python -m benchmarks.bench_quality`)."""

import numpy as np
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
        "most-popular", "item-knn", "rp3beta", "ease"]
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


def test_ease_kept_on_disk_gives_the_fitted_weights_and_reads_them_back(tmp_path):
    from retrieval.evaluation import baselines, csr

    rng = np.random.default_rng(0)
    rows, cols = rng.integers(0, 30, 400), rng.integers(0, 25, 400)
    train = csr.from_pairs(rows, cols, 30)
    reference = baselines.Ease(train, 25, 5.0).weights
    with bench_quality._ease_kept_on_disk(tmp_path):
        first = baselines.make("ease", train, 25, np.ones(25), params={"lambda": 5.0, "items": 0})
        (saved,) = tmp_path.glob("ease-*.npy")
        np.save(saved, np.load(saved) + 1.0)  # a second scorer must read the file, not fit again
        second = baselines.make("ease", train, 25, np.ones(25), params={"lambda": 5.0, "items": 0})
        other = baselines.make("ease", train, 25, np.ones(25), params={"lambda": 6.0})  # another lambda: afresh
        capped = baselines.make("ease", train, 25, np.ones(25), params={"lambda": 5.0, "items": 10})  # and cap
        capped_again = baselines.make("ease", train, 25, np.ones(25), params={"lambda": 5.0, "items": 10})
    np.testing.assert_array_equal(first.weights, reference)
    np.testing.assert_array_equal(second.weights, reference + 1.0)
    np.testing.assert_array_equal(other.weights, baselines.Ease(train, 25, 6.0).weights)
    np.testing.assert_array_equal(capped.weights, baselines.Ease(train, 25, 5.0, max_items=10).weights)
    np.testing.assert_array_equal(capped_again(np.arange(30)), capped(np.arange(30)))
    assert baselines.Ease.__name__ == "Ease"  # restored on exit


@pytest.mark.skipif(not (bench_quality.DATASETS / "set-splits" / "yelp2018" / "train.txt").exists(),
                    reason="needs ../shared/datasets/set-splits/yelp2018")
def test_large_set_parts_deal_each_users_items_80_20_without_loss(tmp_path):
    parts = bench_quality.large_set_parts("yelp2018", tmp_path)
    source = {line.split()[0]: line.split()[1:] for line in
              open(bench_quality.DATASETS / "set-splits" / "yelp2018" / "train.txt")}
    train = {line.split()[0]: line.split()[1:] for line in open(parts["train"])}
    test = {line.split()[0]: line.split()[1:] for line in open(parts["test"])}
    assert train.keys() == source.keys()
    for user, items in source.items():
        held = test.get(user, [])
        assert sorted(train[user] + held, key=int) == sorted(items, key=int) and not set(train[user]) & set(held)
        assert len(train[user]) == int(np.floor(0.8 * len(items) + 0.5))
    (tmp_path / "again").mkdir()
    again = bench_quality.large_set_parts("yelp2018", tmp_path / "again")
    assert again["test"].read_text() == parts["test"].read_text()  # seeded: the same split every time
    other = bench_quality.large_set_parts("yelp2018", tmp_path / "again", seed=1)
    assert other["test"].read_text() != parts["test"].read_text()  # another seed, another draw
