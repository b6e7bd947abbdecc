"""Baselines tuned on a holdout: the best validation point is chosen (recall checked against a per-user NumPy
reference), the time budget cuts the grid and says so, EASE^R at a large catalogue keeps its default in one line, and
evaluate_run refits the chosen point on all training data and records params, times and the holdout."""

import dataclasses
import logging

import numpy as np
import pandas as pd
import pytest

from retrieval.data import prepare
from retrieval.evaluation import baseline_tuning, baselines, csr, report, runs, summary
from tests.evaluation.test_evaluation_fakes import interactions, make_run

N_HUBS, N_CLUSTERS, PER_CLUSTER = 4, 6, 8


@pytest.fixture(scope="module")
def planted():
    """Every user has one of 4 hub items (each held by a quarter of the users) and 2 items of her cluster of 8, and
    her held-out item is another item of her cluster. An unpenalised random walk (b = 0) ranks the 3 hubs she lacks
    first (a quarter of her items' users have each, a seventh each other item of her cluster); dividing by
    popularity (b = 1) puts her cluster's items before them."""
    rng = np.random.default_rng(0)
    n_items = 2 + N_HUBS + N_CLUSTERS * PER_CLUSTER
    train, validation = [], []
    for user in range(240):
        cluster = 2 + N_HUBS + (user % N_CLUSTERS) * PER_CLUSTER + rng.permutation(PER_CLUSTER)
        train += [(user, 2 + rng.integers(N_HUBS))] + [(user, item) for item in cluster[:2]]
        validation.append((user, cluster[2]))
    train, validation = np.array(train), np.array(validation)
    return baseline_tuning.Holdout(csr.from_pairs(*train.T, 240), csr.from_pairs(*validation.T, 240), n_items,
                                   "planted")


def _reference_recall(scorer, holdout, rows, k):
    """Per-user loop: scores, training items and padding/OOV removed, stable descending order, hits over |R|."""
    recalls = []
    for row in rows:
        scores = np.asarray(scorer(np.array([row])), np.float64)[0]
        seen = holdout.train.indices[holdout.train.indptr[row]:holdout.train.indptr[row + 1]]
        scores[np.concatenate([seen, [0, 1]])] = -np.inf
        top = np.argsort(-scores, kind="stable")[:k]
        relevant = set(holdout.validation.indices[holdout.validation.indptr[row]:holdout.validation.indptr[row + 1]])
        relevant -= set(seen)
        recalls.append(len(relevant & set(top)) / len(relevant))
    return float(np.mean(recalls))


def test_tuning_picks_the_best_validation_point(planted):
    grid = {"a": (1.0,), "b": (0.0, 0.5, 1.0), "k": (50,)}
    tuned = baseline_tuning.tune("rp3beta", planted, k=2, grid=grid, max_users=100, seed=1)
    assert tuned.users == 100 and tuned.grid == 4 and len(tuned.points) == 4  # the defaults, then the grid
    assert tuned.points[0] == {**baselines.BASELINES["rp3beta"].defaults, "recall@2": tuned.points[0]["recall@2"]}
    by_b = {point["b"]: point["recall@2"] for point in tuned.points[1:]}
    assert by_b[1.0] > by_b[0.0] + 0.15 and by_b[1.0] == max(point["recall@2"] for point in tuned.points)
    assert tuned.params == {"a": 1.0, "b": 1.0, "k": 50} and tuned.value == by_b[1.0] and not tuned.note
    rows, _ = baseline_tuning.validation_users(planted, 100, seed=1)
    for point in tuned.points:
        params = {name: point[name] for name in ("a", "b", "k")}
        scorer = baselines.make("rp3beta", planted.train, planted.n_items, planted.popularity, params=params)
        assert point["recall@2"] == pytest.approx(_reference_recall(scorer, planted, rows, 2), abs=1e-12)
    metrics = tuned.metrics()
    assert metrics["baseline/rp3beta/validation/recall@2"] == by_b[1.0]
    assert metrics["baseline/rp3beta/tuning/tried"] == 4 and metrics["baseline/rp3beta/tuning/points"] == tuned.points
    assert metrics["baseline/rp3beta/tuning_seconds"] == tuned.seconds > 0


def test_item_knn_tuning_finds_the_shrinkage_that_helps(planted):
    """Shrinkage lowers pairs seen by few users: with the hubs' pairs counted by many, a large shrink ranks hubs
    first and loses; the grid's best is the cosine without shrink here, and every point matches the reference."""
    tuned = baseline_tuning.tune("item_knn", planted, k=2, grid={"shrink": (0.0, 1000.0), "alpha": (0.5, 0.9)},
                                 max_users=60)
    rows, _ = baseline_tuning.validation_users(planted, 60, seed=0)
    assert len(tuned.points) == 4
    for point in tuned.points:
        params = {name: point[name] for name in ("k", "shrink", "alpha")}
        scorer = baselines.make("item_knn", planted.train, planted.n_items, planted.popularity, params=params)
        assert point["recall@2"] == pytest.approx(_reference_recall(scorer, planted, rows, 2), abs=1e-12)
    best = max(tuned.points, key=lambda point: point["recall@2"])
    assert tuned.params == {name: best[name] for name in ("k", "shrink", "alpha")}


class FakeClock:
    """Time that moves only when a fit says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_small_budget_tries_fewer_points_keeps_the_best_so_far_and_says_so(planted, monkeypatch, caplog):
    clock = FakeClock()
    original = baselines.BASELINES["rp3beta"]

    def slow_fit(training, points):
        clock.now += 10.0  # every fit takes 10 s
        return original.fit(training, points)

    monkeypatch.setitem(baselines.BASELINES, "rp3beta", dataclasses.replace(original, fit=slow_fit))
    grid = {"a": (0.5, 1.0, 1.5), "b": (1.0,), "k": (50,)}  # with the defaults: 4 fits of one point each
    full = baseline_tuning.tune("rp3beta", planted, k=2, grid=grid, budget_s=100, clock=clock)
    assert len(full.points) == 4 and not full.note and full.seconds == 40.0
    clock.now = 0.0
    caplog.clear()  # the full tuning's line too is captured where an earlier test left absl at INFO
    with caplog.at_level(logging.INFO, logger="absl"):
        cut = baseline_tuning.tune("rp3beta", planted, k=2, grid=grid, budget_s=25, clock=clock)
    # the first fit on the model's estimate (far below 25 s), the second on the first's 10 s, the third would end at 30
    assert len(cut.points) == 2 and cut.points == full.points[:2] and cut.seconds == 20.0
    assert cut.note.startswith("2 of 4 grid points within eval.baseline_budget_s = 25")
    best = max(cut.points, key=lambda point: point["recall@2"])
    assert cut.params == {name: best[name] for name in ("a", "b", "k")}
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("baseline rp3beta")]
    assert len(lines) == 1 and "2 of 4 grid points" in lines[0]

    none = baseline_tuning.tune("rp3beta", planted, k=2, grid=grid, budget_s=1e-9, clock=clock)
    assert none.points == [] and none.params == dict(original.defaults)
    assert none.note.startswith("not tuned: one fit")
    assert "over eval.baseline_budget_s = 1e-09" in none.note
    assert "baseline/rp3beta/validation/recall@2" not in none.metrics()


def test_ease_at_a_large_catalogue_keeps_its_lambda_in_one_line_when_the_budget_holds_no_fit(monkeypatch, caplog):
    """41k items, all modelled (``eval.ease_max_items=0``): its refit is a Cholesky of the 41k x 41k Gram matrix
    (about 11 minutes), its tuning fits 6,000 items (2 s a fit); a budget that holds no tuning fit keeps the
    configured lambda in one line, and one that holds the defaults' fit but not another fits nothing."""
    n_items = 40_983
    rng = np.random.default_rng(0)
    train = csr.from_pairs(rng.integers(0, 50, 400), rng.integers(2, n_items, 400), 50)
    holdout = baseline_tuning.Holdout(train, csr.from_pairs(np.arange(50), rng.integers(2, n_items, 50), 50),
                                      n_items, "synthetic")
    monkeypatch.setattr(baselines, "Ease", None)  # a fit would fail
    with caplog.at_level(logging.INFO, logger="absl"):
        tuned = baseline_tuning.tune("ease", holdout, defaults={"lambda": 250.0, "items": 0}, memory_mb=1e9,
                                     budget_s=1)
    assert tuned.params == {"lambda": 250.0, "items": 0} and tuned.points == []
    lines = [r.getMessage() for r in caplog.records if "baseline ease" in r.getMessage()]
    assert len(lines) == 1 and "not tuned: one fit" in lines[0] and ", over eval.baseline_budget_s = 1;" in lines[0]
    assert "lambda=250 items=0 (defaults)" in lines[0]
    shape = baselines.Shape.of(train, n_items)
    assert 600 < baselines.BASELINES["ease"].seconds(shape, [tuned.params]) < 800  # about 11 minutes on 2 cores
    capped = baselines.params_of("ease")  # the default cap: 15,000 items, 34 s a fit (the refit)...
    assert 30 < baselines.BASELINES["ease"].seconds(shape, [capped]) < 40
    stand_in = baselines.BASELINES["ease"].tuning_point(capped, n_items)  # ... tuned on 6,000: 2 s a fit
    assert stand_in == {**capped, "items": 6000} and 2 < baselines.BASELINES["ease"].seconds(shape, [stand_in]) < 3
    monkeypatch.setattr(baselines, "Ease", lambda *args, **kwargs: pytest.fail("a fit started"))
    with pytest.raises(pytest.fail.Exception):
        baseline_tuning.tune("ease", holdout, memory_mb=1e9)
    one = baseline_tuning.tune("ease", holdout, memory_mb=1e9, budget_s=4)  # ... but not 4 s
    assert one.points == [] and "eval.baseline_budget_s = 4 does not hold the defaults' and another" in one.note
    over_memory = baseline_tuning.tune("ease", holdout, defaults={"items": 0}, memory_mb=4096)
    assert over_memory.points == [] and "eval.baseline_memory_mb" in over_memory.note


def test_ease_tunes_its_lambda_on_fewer_items_and_the_chosen_point_keeps_its_own(planted, monkeypatch, caplog):
    """Where EASE^R's cap models more than ``EASE_TUNING_ITEMS`` items, every tuning fit models that many, the chosen
    lambda keeps the configured cap (the refit's), its value is the stand-in's, and the one line says so; under it
    the points are the grid's own."""
    monkeypatch.setattr(baselines, "EASE_TUNING_ITEMS", 20)
    fits = []
    fit = baselines.fit
    monkeypatch.setattr(baselines, "fit", lambda name, training, points: fits.extend(dict(p) for p in points)
                        or fit(name, training, points))
    with caplog.at_level(logging.INFO, logger="absl"):
        tuned = baseline_tuning.tune("ease", planted, k=2, defaults={"items": 40}, max_users=100, seed=1)
    assert [p["items"] for p in fits] == [20] * 5 and [p["lambda"] for p in fits] == [p["lambda"] for p in tuned.points]
    best = max(tuned.points, key=lambda point: point["recall@2"])
    assert tuned.params == {"lambda": best["lambda"], "items": 40} and tuned.fitted_at == {"items": 20}
    assert tuned.value == best["recall@2"] and tuned.note == "tuned at items=20 (the validation recall@2 there), " \
        "refitted at items=40"
    line = [r.getMessage() for r in caplog.records if "baseline ease" in r.getMessage()][-1]
    assert f"items=40 (validation recall@2 {best['recall@2']:.4f}; 5 of 5 grid points); tuned at items=20" in line
    fits.clear()
    small = baseline_tuning.tune("ease", planted, k=2, defaults={"items": 20}, max_users=100, seed=1)
    assert [p["items"] for p in fits] == [20] * 5 and small.fitted_at == {} and not small.note
    assert small.points == tuned.points and small.params == {**tuned.params, "items": 20}


def _with_holdout(root):
    """A fake run with an automatic holdout: each user's first training item (by time) held out."""
    paths = make_run(root)
    train = pd.read_parquet(paths.train_data)
    first = train.sort_values("timestamp", kind="stable").groupby("user_id").head(1)
    prepare.tuning_data(paths, "train").parent.mkdir(parents=True, exist_ok=True)
    train.drop(first.index).to_parquet(prepare.tuning_data(paths, "train"), index=False)
    first.to_parquet(prepare.tuning_data(paths, "validation"), index=False)
    return paths


def test_evaluate_run_tunes_on_the_holdout_then_refits_the_chosen_point_on_all_training_data(tmp_path, monkeypatch):
    paths = _with_holdout(tmp_path / "run")
    fits = []
    fit = baselines.fit
    monkeypatch.setattr(baselines, "fit", lambda name, training, points: fits.append(
        (name, training.train.indices.size, [dict(p) for p in points])) or fit(name, training, points))
    metrics = runs.evaluate_run(paths.root, baselines=("most_popular", "item_knn", "rp3beta", "ease"), n_bootstrap=0)
    assert "automatic validation holdout" in metrics["protocol/baseline_tuning"]
    assert "recall@5 of 64 validation users" in metrics["protocol/baseline_tuning"]
    train_pairs = metrics["count/train_pairs"]
    for name in ("item_knn", "rp3beta", "ease"):
        prefix = f"baseline/{name}/"
        points = metrics[prefix + "tuning/points"]
        assert len(points) == metrics[prefix + "tuning/grid"] == len(baselines.BASELINES[name].grid_points())
        best = max(points, key=lambda point: point["recall@5"])
        chosen = {key[len(prefix) + 7:]: value for key, value in metrics.items() if key.startswith(prefix + "params/")}
        assert chosen == {param: best[param] for param in baselines.BASELINES[name].defaults}
        assert metrics[prefix + "validation/recall@5"] == best["recall@5"]
        assert metrics[prefix + "tuning_seconds"] > 0 and metrics[prefix + "fit_seconds"] > 0
        refits = [(size, points) for fitted, size, points in fits if fitted == name and size == train_pairs]
        assert refits == [(train_pairs, [chosen])]  # one refit, on all training data, at the chosen point
    tuning_sizes = {size for fitted, size, _ in fits if fitted == "rp3beta"} - {train_pairs}
    assert tuning_sizes == {train_pairs - 64}  # the holdout's training part: one item per user held out
    assert "baseline/most_popular/params/" not in str(list(metrics)) and "baseline/most_popular/fit_seconds" in metrics
    text = paths.report.read_text()
    assert "## Baselines" in text and "automatic validation holdout" in text
    params = " ".join(f"{p}={metrics[f'baseline/rp3beta/params/{p}']:g}" for p in ("a", "b", "k"))
    assert f"| rp3beta | {params} | {metrics['baseline/rp3beta/validation/recall@5']:.4f} | 27 of 27 |" in text


def test_without_validation_data_the_defaults_are_kept_and_said(tmp_path):
    paths = make_run(tmp_path / "run")
    metrics = runs.evaluate_run(paths.root, baselines=("most_popular", "rp3beta"), n_bootstrap=0, write=False)
    assert metrics["protocol/baseline_tuning"].startswith("not tuned: the run has no validation data")
    defaults = baselines.BASELINES["rp3beta"].defaults
    assert {p: metrics[f"baseline/rp3beta/params/{p}"] for p in defaults} == dict(defaults)
    assert "baseline/rp3beta/tuning_seconds" not in metrics
    assert "not tuned: the run has no validation data" in report.render_markdown(metrics)


def test_the_users_validation_data_is_the_holdout_when_there_is_no_automatic_one(tmp_path):
    paths = make_run(tmp_path / "run")
    train, _ = interactions()
    train.groupby("user_id").head(1).to_parquet(paths.validation_data, index=False)  # items also in train: excluded
    metrics = runs.evaluate_run(paths.root, baselines=("rp3beta",), n_bootstrap=0, write=False,
                                baseline_budget_s=0)
    assert "the run's validation data" in metrics["protocol/baseline_tuning"]
    assert metrics["baseline/rp3beta/tuning/note"].startswith("not tuned (no validation user")


def test_the_model_trailing_the_best_baseline_is_said_in_one_line(tmp_path):
    weak = np.random.default_rng(9).standard_normal((48, 8)).astype(np.float32)
    paths = make_run(tmp_path / "run", vectors=weak)
    metrics = runs.evaluate_run(paths.root, baselines=("most_popular", "random", "item_knn"), n_bootstrap=50,
                                write=False)
    table = summary.headline_table(metrics)
    lines = [line for line in table.splitlines() if line.startswith("model trails")]
    assert len(lines) == 1 and lines[0].startswith("model trails item_knn (paired diff): recall@5 ")
    assert f"recall@5 {metrics['paired/item_knn/recall@5_diff']:+.4f} [" in lines[0]
    assert ", NDCG@5 " in lines[0] and len(lines[0]) <= summary.WIDTH
    assert table.splitlines()[0].startswith("| system |")
    assert "--config.train.teacher_items=10 --config.train.teacher_weighting=score" in report.render_markdown(metrics)  # the lever for an item-item lead
    ahead = {**metrics, "recall@5": 1.0}
    assert "teacher_items" not in report.render_markdown(ahead)


def test_trailing_line_format_and_silence_when_ahead():
    metrics = {"protocol/ks": [10, 20], "protocol/baselines": ["most_popular", "item_knn", "rp3beta"],
               "recall@20": 0.1695, "ndcg@20": 0.12, "baseline/most_popular/recall@20": 0.05,
               "baseline/item_knn/recall@20": 0.156, "baseline/rp3beta/recall@20": 0.1773,
               "baseline/rp3beta/ndcg@20": 0.14, "paired/rp3beta/recall@20_diff": -0.0078,
               "paired/rp3beta/recall@20_diff_ci_low": -0.0101, "paired/rp3beta/recall@20_diff_ci_high": -0.0055}
    assert summary.trailing_line(metrics) == ("model trails rp3beta (paired diff): recall@20 -0.0078 [-0.0101, "
                                              "-0.0055], NDCG@20 0.1200 vs 0.1400")
    both = {**metrics, "paired/rp3beta/ndcg@20_diff": -0.0139, "paired/rp3beta/ndcg@20_diff_ci_low": -0.0196,
            "paired/rp3beta/ndcg@20_diff_ci_high": -0.0077, "baseline/rp3beta/recall@20": 0.3053,
            "recall@20": 0.2843, "paired/rp3beta/recall@20_diff": -0.0210,
            "paired/rp3beta/recall@20_diff_ci_low": -0.0300, "paired/rp3beta/recall@20_diff_ci_high": -0.0090}
    line = summary.trailing_line({**both, "protocol/baselines": ["most_popular", "item_knn", "rp3beta"]})
    assert line == ("model trails rp3beta (paired diff): recall@20 -0.0210 [-0.0300, -0.0090], NDCG@20 -0.0139 "
                    "[-0.0196, -0.0077]") and len(line) <= summary.WIDTH
    assert summary.headline_table(metrics).endswith("\n\n" + summary.trailing_line(metrics))
    ahead = {**metrics, "recall@20": 0.18, "ndcg@20": 0.15}
    assert summary.trailing_line(ahead) is None and "trails" not in summary.headline_table(ahead)


def test_a_long_tuning_fit_logs_a_line_every_interval(planted, monkeypatch, caplog):
    """EASE^R's tuning fits ran 35 s without a line where the guide promises one every 30 s."""
    import time

    original = baselines.BASELINES["rp3beta"]

    def slow_fit(training, points):
        time.sleep(2.5)
        return original.fit(training, points)

    monkeypatch.setitem(baselines.BASELINES, "rp3beta", dataclasses.replace(original, fit=slow_fit))
    with caplog.at_level(logging.INFO, logger="absl"):
        baseline_tuning.tune("rp3beta", planted, k=2, grid={"a": (0.5,), "b": (1.0,), "k": (50,)}, budget_s=100,
                             progress_interval_s=1.0)
    beats = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    assert len(beats) >= 2 and beats[0].startswith("evaluation: tuning baseline rp3beta, fit 1 of 2 (1 point, ")


def test_short_tuning_fits_in_a_row_are_not_silent_together(planted, monkeypatch, caplog):
    """The bundled data's EASE^R tuning, five fits of ~6 s each, logged nothing for 31 s (a fresh-clone trial): the
    heartbeat spans the whole tuning, each line naming the fit under way."""
    import re
    import time

    original = baselines.BASELINES["rp3beta"]

    def short_fit(training, points):
        time.sleep(0.6)  # each fit shorter than the interval
        return original.fit(training, points)

    monkeypatch.setitem(baselines.BASELINES, "rp3beta", dataclasses.replace(original, fit=short_fit))
    with caplog.at_level(logging.INFO, logger="absl"):
        baseline_tuning.tune("rp3beta", planted, k=2, grid={"a": (0.25, 0.5, 0.75, 1.0), "b": (1.0,), "k": (50,)},
                             budget_s=100, progress_interval_s=1.0)
    beats = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    assert len(beats) >= 2
    assert all(re.fullmatch(r"evaluation: tuning baseline rp3beta, fit [1-4] of 4 \(\d points?, [\d,]+ validation users\), "
                            r"\d+ s so far", line) for line in beats), beats
