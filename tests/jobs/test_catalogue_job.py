"""The catalogue end to end: cold items trained, evaluated, indexed and served; the refresh without retraining;
bad refresh tables; warm start across a changed catalogue."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from retrieval import artifacts, export
from retrieval.errors import InputError
from retrieval.jobs.job import TrainingJob
from retrieval.jobs.publish import ModelDirectory
from retrieval.jobs.refresh import refresh
from tests.jobs.conftest import random_titles
from tests.jobs.test_pipeline_job import make_config

ROOT = Path(__file__).resolve().parents[2]
COLD = 20  # catalogue rows without any interaction
COPIES = 10  # known items a refresh copies under new ids


@pytest.fixture(scope="module")
def catalogue_dir(log_path, tmp_path_factory):
    """The log of ``log_path`` with an item table of titles and genres, plus COLD items nobody clicked."""
    directory = tmp_path_factory.mktemp("catalogue")
    items = pd.read_csv(log_path / "items.csv")
    rng = np.random.default_rng(0)
    new = pd.DataFrame({"item_id": [f"cold{k}" for k in range(COLD)],
                        "genres": rng.choice(items["genres"].to_numpy(), COLD)})
    table = pd.concat([items, new], ignore_index=True)
    table["title"] = random_titles(rng, len(table))
    table.to_csv(directory / "items.csv", index=False)
    (directory / "interactions.csv").symlink_to(log_path / "interactions.csv")
    return directory


def config_of(directory: Path, **extra):
    return make_config(directory, **{"data.item_features_path": str(directory / "items.csv"),
                                     "data.item_features": "genres:multi,title:text",
                                     "data.cold_item_fraction": 0.1, "train.epochs": 3,
                                     # as configs/catalogue.py:
                                     "model.item_tower.content_match": True, "model.item_tower.cold_head": True,
                                     "model.item_tower.content_profile_weight": 0.3,
                                     "eval.bootstrap": 20, **extra})


@pytest.fixture(scope="module")
def trained(catalogue_dir, tmp_path_factory):
    output = tmp_path_factory.mktemp("out")
    outcome = TrainingJob(config_of(catalogue_dir), str(output), "first").run()
    return output / "two_tower", outcome


def test_every_catalogue_item_is_embedded_indexed_and_served(trained, catalogue_dir):
    model_dir, outcome = trained
    paths = artifacts.RunPaths(outcome.run_dir)
    catalogue = artifacts.read_json(paths.stages / "prepare.json")["summary"]["catalogue"]
    table = pd.read_csv(catalogue_dir / "items.csv")
    assert catalogue["items"] == len(table) and catalogue["cold"] > COLD  # the cold holdout's items are cold too
    ids, vectors = export.read_item_embeddings(paths.item_embeddings)
    assert sorted(ids) == sorted(table["item_id"].astype(str)) and np.isfinite(vectors).all()
    warm = export.read_warm(paths.item_embeddings)
    assert int((~warm).sum()) == catalogue["cold"]
    assert artifacts.read_json(paths.index / "manifest.json")["count"] == len(table)
    from retrieval.serving import CandidateGenerator

    generator = CandidateGenerator.from_run(model_dir)
    neighbours = generator.similar("cold3", k=5).item_ids.tolist()
    assert len(neighbours) == 5 and "cold3" not in neighbours
    # Warm and cold items in one item-to-item index (the cold head's blocks give every warm-cold pair 0 otherwise).
    assert artifacts.read_json(paths.manifest)["item_similarity"] == "score_correlation"
    assert generator.index.similar is not None and (paths.index / "similar" / "index.faiss").is_file()
    answers = [generator.similar(f"cold{k}", k=5) for k in range(COLD)]
    warm_ids = set(ids[warm])
    assert any(set(answer.item_ids) & warm_ids for answer in answers)
    assert all(np.all(answer.scores <= 1 + 1e-5) for answer in answers)  # correlations
    served = set(generator.recommend(history=["cold1", "cold2"], k=len(table)).item_ids)
    assert {"cold4", "cold5"} <= served  # cold items are candidates like any other


def test_cold_items_are_reported_apart_beside_the_content_baseline(trained):
    metrics = artifacts.read_json(Path(trained[1].run_dir) / "metrics.json")
    assert metrics["count/cold_items/test_pairs"] > 0 and metrics["count/cold_items/eval_users"] > 0
    for space in ("", "among_cold/"):
        assert 0 <= metrics[f"cold_items/{space}recall@20"] <= 1
        assert 0 <= metrics[f"cold_items/{space}content/recall@20"] <= 1
        assert f"cold_items/{space}paired/content/recall@20_diff_ci_low" in metrics
    assert metrics["count/test_interactions_unknown_item"] > 0  # the headline ranks warm items only


def test_refresh_publishes_new_items_without_retraining(trained, catalogue_dir, tmp_path):
    model_dir, outcome = trained
    before = artifacts.RunPaths(outcome.run_dir)
    table = pd.read_csv(catalogue_dir / "items.csv")
    kept = table.iloc[5:]
    new = pd.DataFrame({"item_id": [f"new{k}" for k in range(30)], "genres": kept["genres"].iloc[:30].to_numpy(),
                        "title": ["blue tent"] * 30})
    pd.concat([kept, new]).to_csv(tmp_path / "today.csv", index=False)
    result = refresh(model_dir, str(tmp_path / "today.csv"))
    assert (result.items, result.new, result.removed) == (len(kept) + 30, 30, 5) and result.latest_moved
    assert ModelDirectory(model_dir).latest_run_id() == Path(result.run_dir).name
    after = artifacts.RunPaths(result.run_dir)
    old_ids, old_vectors = export.read_item_embeddings(before.item_embeddings)
    ids, vectors = export.read_item_embeddings(after.item_embeddings)
    position = pd.Index(old_ids).get_indexer(ids)
    np.testing.assert_allclose(vectors[position >= 0], old_vectors[position[position >= 0]], rtol=1e-5, atol=1e-6)
    assert artifacts.read_json(after.manifest)["refreshed_from"] == before.root.name
    from retrieval.serving import CandidateGenerator

    generator = CandidateGenerator.from_run(model_dir)
    assert "new3" in generator.index.id_map.item_ids and table["item_id"].iloc[0] not in generator.index.id_map.item_ids
    assert len(generator.similar("new3", k=3).item_ids) == 3
    # A history of new items only (none the user tower reads): items like them in the item-to-item view, not the
    # popular ones, the new items themselves never among them.
    answer = generator.recommend(history=["new3", "new4"], k=10)
    popular = generator.recommend(history=["nobody"], k=10)
    assert (answer.history_source, answer.fallback, answer.history_used) == ("similar", False, 0)
    assert answer.unknown_history == ("new3", "new4") and popular.fallback
    assert not {"new3", "new4"} & set(answer.item_ids) and list(answer.item_ids) != list(popular.item_ids)
    np.testing.assert_allclose(answer.scores, np.sort(answer.scores)[::-1])


def test_a_new_copy_of_a_known_item_finds_it_among_its_neighbours(trained, catalogue_dir, tmp_path):
    """The folded item-to-item view (``retrieval.index.similar``): a copy of a known item (same title and genres,
    a new id) is placed by its features alone, the original by its id; the fold gives the original its feature
    placement too, so the two meet. Unfolded, the copy and its original met through the heads' covariance only."""
    model_dir, outcome = trained
    table = pd.read_csv(catalogue_dir / "items.csv")
    warm = set(export.read_item_embeddings(artifacts.RunPaths(outcome.run_dir).item_embeddings)[0][
        export.read_warm(artifacts.RunPaths(outcome.run_dir).item_embeddings)])
    originals = table[table["item_id"].astype(str).isin(warm)].iloc[:COPIES]
    copies = originals.assign(item_id=[f"copy{k}" for k in range(COPIES)])
    pd.concat([table, copies]).to_csv(tmp_path / "copies.csv", index=False)
    result = refresh(model_dir, str(tmp_path / "copies.csv"))
    assert artifacts.PLACED_BY_FEATURES in pq.read_schema(artifacts.RunPaths(result.run_dir).item_embeddings).names
    from retrieval.serving import CandidateGenerator

    generator = CandidateGenerator.from_run(result.run_dir)
    found = sum(str(original) in generator.similar(f"copy{k}", k=10).item_ids
                for k, original in enumerate(originals["item_id"]))
    back = sum(f"copy{k}" in generator.similar(str(original), k=10).item_ids
               for k, original in enumerate(originals["item_id"]))
    assert found >= 0.8 * COPIES and back >= 0.5 * COPIES


@pytest.mark.parametrize("change, message", [
    (lambda t: t.drop(columns=["item_id"]), "item_id"),
    (lambda t: pd.concat([t, t.iloc[:1]]), "duplicate id"),
    (lambda t: t.assign(title=["x" * 20_000] + list(t["title"].iloc[1:])), "text cell"),
    (lambda t: t.rename(columns={"title": "name"}), "title"),
    (lambda t: t.drop(columns=["genres"]), "genres"),
])
def test_a_bad_refresh_table_changes_nothing(trained, catalogue_dir, tmp_path, change, message):
    model_dir, _ = trained
    latest = ModelDirectory(model_dir).latest_run_id()
    runs = sorted(os.listdir(model_dir))
    change(pd.read_csv(catalogue_dir / "items.csv")).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(InputError, match=message):
        refresh(model_dir, str(tmp_path / "bad.csv"))
    assert ModelDirectory(model_dir).latest_run_id() == latest and sorted(os.listdir(model_dir)) == runs


def test_the_refresh_command_refuses_a_bad_table_in_one_line(trained, catalogue_dir, tmp_path):
    pd.read_csv(catalogue_dir / "items.csv").drop(columns=["genres"]).to_csv(tmp_path / "bad.csv", index=False)
    done = subprocess.run([sys.executable, "-m", "pipelines.refresh", f"--run_dir={trained[0]}",
                           f"--item_features_path={tmp_path / 'bad.csv'}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "column 'genres'" in errors[0] and "bad.csv" in errors[0]


def test_warm_start_across_a_changed_catalogue(trained, catalogue_dir, tmp_path):
    """After a refresh (latest = the refreshed run), a warm-started retrain on a grown table keeps working."""
    model_dir, _ = trained
    table = pd.read_csv(catalogue_dir / "items.csv")
    grown = pd.concat([table, pd.DataFrame({"item_id": ["later0", "later1"], "genres": table["genres"].iloc[:2],
                                            "title": ["red cup", "blue boot"]})])
    grown.to_csv(tmp_path / "items.csv", index=False)
    (tmp_path / "interactions.csv").symlink_to(catalogue_dir / "interactions.csv")
    quick = {"publish.lineage": "catalogue", "train.epochs": 1, "gate.min_lift_over_popular": -1.0}
    config = config_of(tmp_path, **{"publish.warm_start": True, **quick})
    first = config_of(catalogue_dir, **quick)
    TrainingJob(first, str(model_dir.parent), "lineage-start").run()
    refresh(model_dir / "lineages" / "catalogue", str(tmp_path / "items.csv"))
    outcome = TrainingJob(config, str(model_dir.parent), "warm").run()
    ids = export.read_item_embeddings(Path(outcome.run_dir) / "item_embeddings.parquet")[0]
    assert {"later0", "later1"} <= set(ids)
