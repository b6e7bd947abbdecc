"""evaluate_run on a fake run directory: counts, protocol, reference numbers, report files, ANN and run comparison."""

import json

import faiss
import numpy as np
import pytest

from retrieval.errors import InputError
from retrieval.evaluation import runs
from tests.evaluation.test_evaluation_fakes import ITEMS, interactions, item_vectors, make_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval") / "run"
    paths = make_run(root)
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(item_vectors().shape[1]))
    index.add_with_ids(item_vectors(), np.arange(48) + 2)  # like retrieval.index: ids are vocabulary indices
    faiss.write_index(index, str(root / "flat.faiss"))
    other = make_run(root.parent / "other", vectors=np.random.default_rng(9).standard_normal((48, 8)).astype(
        np.float32), run_id="other-run")
    metrics = runs.evaluate_run(root, ann_index_path=str(root / "flat.faiss"), compare_run_dir=str(other.root))
    return paths, metrics


def _reference_recall_ndcg(k):
    """Per-user loop: user = mean of training item vectors, rank all items minus training ones."""
    train, test = interactions()
    vectors = item_vectors()
    recalls, ndcgs = [], []
    for user, items in train.groupby("user_id")["item_id"]:
        seen = set(items)
        relevant = set(test.loc[test.user_id == user, "item_id"]) & (set(ITEMS) - seen)
        scores = vectors @ vectors[[int(i[1:]) for i in items]].mean(axis=0)
        ranked = [ITEMS[i] for i in np.argsort(-scores, kind="stable") if ITEMS[i] not in seen][:k]
        hits = [item in relevant for item in ranked]
        recalls.append(sum(hits) / len(relevant))
        ideal = sum(1 / np.log2(r + 2) for r in range(min(len(relevant), k)))
        ndcgs.append(sum(h / np.log2(r + 2) for r, h in enumerate(hits)) / ideal)
    return np.mean(recalls), np.mean(ndcgs)


def test_model_metrics_match_a_per_user_reference(run):
    _, metrics = run
    for k in (2, 5):
        recall, ndcg = _reference_recall_ndcg(k)
        assert metrics[f"recall@{k}"] == pytest.approx(recall, abs=1e-9)
        assert metrics[f"ndcg@{k}"] == pytest.approx(ndcg, abs=1e-9)


def test_counts_and_protocol_are_reported(run):
    _, m = run
    assert m["protocol"].startswith("leave-last-2-out") and m["protocol/split"] == "leave_last_n"
    assert m["protocol/ks"] == [2, 5, 10] and m["protocol/bootstrap_resamples"] == 200 and m["protocol/seed"] == 3
    assert m["count/test_interactions"] == 2 * 64 + 3 + 2
    assert m["count/test_interactions_unknown_item"] == 1
    assert m["count/test_pairs_seen_in_train"] == 1
    assert m["count/eval_users"] == 64 and m["count/cold_start_users"] == 3
    assert m["count/test_users_without_rankable_items"] == 0 and m["count/test_users_with_known_items"] == 67
    assert m["count/items"] == 48 and m["count/users"] == 67 and m["count/test_users"] == 67
    assert "cold_start/recall@2" in m and "baseline/most_popular/cold_start/recall@2" in m


def test_model_beats_baselines_with_intervals_and_paired_tests(run):
    _, m = run
    for name in ("most_popular", "random"):
        assert m["recall@5"] > m[f"baseline/{name}/recall@5"]
        assert m[f"baseline/{name}/recall@5_ci_low"] <= m[f"baseline/{name}/recall@5"]
    # Co-occurrence finds the clusters too: every user's 4 cluster items co-occur with her 2 test items.
    assert m["baseline/item_knn/recall@5"] > 0.9 > m["baseline/most_popular/recall@5"]
    assert m["recall@5_ci_low"] <= m["recall@5"] <= m["recall@5_ci_high"]
    assert m["paired/random/recall@5_diff"] == pytest.approx(m["recall@5"] - m["baseline/random/recall@5"])
    assert m["paired/random/recall@5_diff_ci_low"] > 0 and m["paired/random/recall@5_p_value"] < 0.05
    assert 0 < m["coverage@10"] <= 1 and 0 <= m["tail_share@10"] <= 1 and m["avg_popularity@10"] > 0


def test_ann_and_compared_run(run):
    _, m = run
    assert m["ann/recall_vs_exact@10"] == pytest.approx(1.0)  # a flat index is exact
    assert m["ann/recall@5"] == pytest.approx(m["recall@5"])
    assert m["compare/recall@5"] < m["recall@5"]  # random item vectors
    assert m["paired/compare/recall@5_diff"] > 0


def test_report_files(run):
    paths, m = run
    assert json.loads(paths.metrics.read_text())["recall@5"] == m["recall@5"]
    text = paths.report.read_text()
    assert "| model |" in text and "| item_knn |" in text and "## Cold-start users" in text
    assert "leave-last-2-out" in text and "| test_pairs_seen_in_train | 1 |" in text
    assert paths.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_explicit_settings_and_errors(run, tmp_path):
    paths, _ = run
    test_file = tmp_path / "test.csv"
    interactions()[1].iloc[:10].to_csv(test_file, index=False)
    m = runs.evaluate_run(paths.root, ks=[3], test_path=str(test_file), baselines=["most_popular"], n_bootstrap=0,
                          output_dir=str(tmp_path / "elsewhere"))
    assert (tmp_path / "elsewhere" / "report.md").exists() and "recall@3" not in paths.metrics.read_text()
    assert m["protocol"] == f"explicit test file {test_file}" and m["count/eval_users"] == 5
    assert "recall@3_ci_low" not in m and "baseline/random/recall@3" not in m
    with pytest.raises(InputError, match="unknown baselines"):
        runs.evaluate_run(paths.root, baselines=["svd"], write=False)
    with pytest.raises(InputError, match="not found"):
        runs.evaluate_run(tmp_path, write=False)


def test_user_sample_reads_only_sampled_rows_and_equals_evaluating_those_users(run, tmp_path, monkeypatch):
    """eval.max_users: the sampled evaluation equals a full evaluation whose test file holds just the sampled users
    (the model and most-popular, whose popularity still counts the whole training table); the whole-table reader is
    never called, and the item-item baselines are reported as skipped."""
    import pandas as pd

    from retrieval.evaluation import loading

    paths, _ = run
    sample = runs.user_sample(paths.test_data, 20, seed=5)
    test = pd.read_parquet(paths.test_data)
    test[test.user_id.isin(sample)].to_parquet(tmp_path / "sampled_test.parquet", index=False)
    settings = dict(ks=(5,), n_bootstrap=0, seed=5, write=False, baselines=("most_popular", "item_knn", "ease"))
    reference = runs.evaluate_run(paths.root, test_path=str(tmp_path / "sampled_test.parquet"), **settings)

    def whole_table(*args, **kwargs):
        raise AssertionError("a sampled evaluation read a whole table")

    monkeypatch.setattr(loading, "read_interactions", whole_table)
    sampled = runs.evaluate_run(paths.root, max_users=20, **settings)
    assert len(sample) == 20 and sampled["count/test_users"] == 20
    for key in ("recall@5", "ndcg@5", "baseline/most_popular/recall@5", "count/eval_users"):
        assert sampled[key] == pytest.approx(reference[key], abs=1e-12), key
    assert sampled["protocol/skipped_baselines"] == ["item_knn", "ease"]
    assert "20 test users" in sampled["protocol/user_sample"]
    assert runs.user_sample(paths.test_data, 10_000, seed=5) is None  # no more users than asked: all of them


def test_the_training_curves_are_plotted_beside_the_recall_plot(run, tmp_path):
    from retrieval import artifacts
    from retrieval.evaluation import report

    _, metrics = run
    tuned = {"best_epoch": 2, "refit": True, "history": {"loss": [6.3, 5.9]},
             "tuning": {"history": {"loss": [6.4, 5.9, 5.7], "val_recall": [0.27, 0.28, 0.275]}}}
    assert report.training_histories(tuned) == {"tuning": tuned["tuning"]["history"], "refit": tuned["history"]}
    assert report.training_histories({"history": {"loss": [1.0]}}) == {"training": {"loss": [1.0]}}
    root = tmp_path / "run"
    artifacts.write_json(root / "stages" / "train.json", {"summary": tuned, "seconds": 1.0})
    report.write(root, metrics)
    assert (root / "recall_at_k.png").is_file()
    assert (root / report.TRAINING_PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    untuned = tmp_path / "untuned"  # trained without a holdout: the stage recorded no history
    artifacts.write_json(untuned / "stages" / "train.json", {"summary": {"steps": 10}, "seconds": 1.0})
    report.write(untuned, metrics)
    assert (untuned / "report.md").is_file() and not (untuned / report.TRAINING_PLOT).exists()
