"""retrieval.serving (library): candidates against a numpy reference (mean-of-history user vector, exact scores,
seen items excluded), history precedence, popularity fallback, batching, similar items, run indexing, reload with
a canary."""

import json
import shutil
import weakref

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from retrieval.artifacts import RunPaths, point_link
from retrieval.errors import InputError
from retrieval.export import read_item_embeddings, resource_handles, write_item_embeddings
from retrieval.index import ItemIndex, build_index
from retrieval.index.run_index import build_run_index
from retrieval.serving import CandidateGenerator, UnknownItemError
from retrieval.serving.canary import Canary, CanaryError
from retrieval.serving.demo_run import write_demo_run
from retrieval.serving.reload import GeneratorHolder

MAX_HISTORY = 8  # shorter than the demo histories (12), so truncation to the most recent items is exercised


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving") / "item2vec"
    paths = write_demo_run(root / "run1", version="1", max_history=MAX_HISTORY)
    build_run_index(paths)
    point_link(root / "latest", "run1")
    return root


@pytest.fixture(scope="module")
def generator(model_dir):
    return CandidateGenerator.from_run(model_dir)


@pytest.fixture(scope="module")
def reference(model_dir):
    """Item vectors, training frame and a numpy recommender following the documented rules."""
    paths = RunPaths(model_dir / "latest")
    item_ids, vectors = read_item_embeddings(paths.item_embeddings)
    train = pd.read_parquet(paths.train_data).sort_values("timestamp", ascending=False, kind="stable")
    row_of = {item: row for row, item in enumerate(item_ids)}

    def recommend(history, k, exclude=()):
        known = [item for item in history if item in row_of]
        user = vectors[[row_of[item] for item in known[:MAX_HISTORY]]].mean(axis=0)
        scores = vectors @ user
        banned = {row_of[item] for item in list(known) + [e for e in exclude if e in row_of]}
        order = [row for row in np.argsort(-scores, kind="stable") if row not in banned][:k]
        return item_ids[order], scores[order]

    return {"recommend": recommend, "train": train, "item_ids": item_ids, "vectors": vectors}


def stored(reference, user):
    return reference["train"].loc[reference["train"]["user_id"] == user, "item_id"].tolist()  # newest first


def test_known_user_gets_the_stored_history_most_recent_first_and_never_seen_items(generator, reference):
    history = stored(reference, "u3")
    result = generator.recommend(user_id="u3", k=15)
    expected_ids, expected_scores = reference["recommend"](history, 15)
    np.testing.assert_array_equal(result.item_ids, expected_ids)
    np.testing.assert_allclose(result.scores, expected_scores, rtol=1e-5)
    assert result.history_source == "stored" and result.history_used == min(len(history), MAX_HISTORY) == MAX_HISTORY
    assert not result.fallback
    assert not set(result.item_ids) & set(history) and len(result.item_ids) == 15
    with_seen = generator.recommend(user_id="u3", k=15, exclude_history=False)
    assert set(with_seen.item_ids) & set(history)  # the nearest items of a mean-of-history vector are its own


def test_request_history_takes_precedence_and_unknown_ids_are_counted(generator, reference):
    history = ["i9", "no-such-item", "i17", "", "i25"]
    result = generator.recommend(user_id="u3", history=history, k=10, exclude=["i41", "also-unknown"])
    expected_ids, _ = reference["recommend"](["i9", "i17", "i25"], 10, exclude=["i41"])
    np.testing.assert_array_equal(result.item_ids, expected_ids)
    assert result.history_source == "request" and result.history_used == 3
    assert result.unknown_history == ("no-such-item", "")


def test_without_a_usable_history_known_users_use_stored_and_unknown_users_get_popularity(generator, reference):
    known = generator.recommend(user_id="u5", history=["nope"], k=5)
    np.testing.assert_array_equal(known.item_ids, reference["recommend"](stored(reference, "u5"), 5)[0])
    assert known.history_source == "stored" and known.unknown_history == ("nope",)
    cold = generator.recommend(user_id="stranger", k=6, exclude=["i0"])
    counts = reference["train"]["item_id"].value_counts()
    counts = counts.drop("i0", errors="ignore")
    popular = counts.sort_values(ascending=False, kind="stable")
    assert cold.fallback and cold.history_source == "none"
    # the training counts rank them, in counts: scores are NaN, no model scored them (counts were there, issue 50)
    np.testing.assert_array_equal(cold.counts, popular.to_numpy()[:6])
    assert np.isnan(cold.scores).all() and len(cold.scores) == 6
    assert set(cold.item_ids) <= set(popular.index[popular >= popular.iloc[5]])  # ties may come in any order
    assert generator.recommend(k=3).fallback  # neither user nor history


def test_batch_equals_single_requests(generator):
    users = ["u1", None, "stranger", "u2"]
    histories = [None, ["i3", "i11"], None, ["zzz"]]
    excludes = [["i4"], None, None, []]
    batch = generator.recommend_batch(users, histories, k=7, excludes=excludes)
    for user, history, exclude, got in zip(users, histories, excludes, batch, strict=True):
        single = generator.recommend(user, history, 7, exclude)
        np.testing.assert_array_equal(got.item_ids, single.item_ids)
        np.testing.assert_allclose(got.scores, single.scores, rtol=1e-5)
        assert (got.fallback, got.history_source) == (single.fallback, single.history_source)
    with pytest.raises(InputError, match="k must be positive"):
        generator.recommend_batch(["u1"], k=0)


def test_similar_items_are_the_nearest_neighbours_of_the_item_vector(generator, reference):
    item_ids, vectors = reference["item_ids"], reference["vectors"]
    row = int(np.flatnonzero(item_ids == "i9")[0])
    scores = vectors @ vectors[row]
    order = [r for r in np.argsort(-scores, kind="stable") if r != row][:5]
    result = generator.similar("i9", 5)
    np.testing.assert_array_equal(result.item_ids, item_ids[order])
    np.testing.assert_allclose(result.scores, scores[order], rtol=1e-5)
    with pytest.raises(UnknownItemError):
        generator.similar("no-such-item", 5)


def test_run_index_is_self_checked_on_user_queries_and_versioned(model_dir):
    index = ItemIndex.load(model_dir / "latest" / "index")
    manifest = json.loads((model_dir / "latest" / "index" / "manifest.json").read_text())
    assert manifest["self_check"]["query_source"] == "users" and manifest["self_check"]["passed"]
    assert manifest["model_version"] == "1" and manifest["run_id"] == "run1" and manifest["metric"] == "ip"
    assert index.factory == "Flat"  # auto, for a catalogue this small


def test_run_without_index_builds_one_and_a_mismatched_index_is_refused(model_dir, tmp_path):
    run = tmp_path / "run2"
    shutil.copytree(model_dir / "run1", run, ignore=shutil.ignore_patterns("index"))
    assert len(CandidateGenerator.from_run(run).index) == len(ItemIndex.load(model_dir / "run1" / "index"))
    item_ids, vectors = read_item_embeddings(run / "item_embeddings.parquet")
    build_index(vectors[::-1], item_ids[::-1], factory="Flat").save(run / "index")
    with pytest.raises(InputError, match="does not match"):
        CandidateGenerator.from_run(run)
    with pytest.raises(InputError, match="nothing-here does not exist"):
        CandidateGenerator.from_run(tmp_path / "nothing-here")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not a run directory"):
        CandidateGenerator.from_run(tmp_path / "empty")


def test_a_run_with_sharded_item_embeddings_is_indexed_and_served_like_one_file(model_dir, generator, tmp_path):
    run = tmp_path / "sharded"
    shutil.copytree(model_dir / "run1", run, ignore=shutil.ignore_patterns("index", "item_embeddings.parquet"))
    item_ids, vectors = read_item_embeddings(model_dir / "run1" / "item_embeddings.parquet")
    (run / "item_embeddings.parquet").mkdir()  # a directory of shards, read in name order
    for n, rows in enumerate(np.array_split(np.arange(len(item_ids)), 3)):
        write_item_embeddings(run / "item_embeddings.parquet" / f"part-{n}.parquet", item_ids[rows], vectors[rows])
    build_run_index(run)
    sharded = CandidateGenerator.from_run(run)
    np.testing.assert_array_equal(sharded.item_vectors, generator.item_vectors)
    for user in ("u1", "u7"):
        assert sharded.recommend(user, k=10).item_ids.tolist() == generator.recommend(user, k=10).item_ids.tolist()


def test_holder_swaps_to_the_new_latest_and_keeps_serving_through_a_broken_run(model_dir, tmp_path):
    root = tmp_path / "model"
    for name, version in (("a", "1"), ("b", "2")):
        shutil.copytree(model_dir / "run1", root / name)
        manifest = json.loads((root / name / "manifest.json").read_text())
        (root / name / "manifest.json").write_text(json.dumps({**manifest, "version": version}))
    shutil.copytree(model_dir / "run1", root / "broken", ignore=shutil.ignore_patterns("user_tower"))
    point_link(root / "latest", "a")
    holder = GeneratorHolder(root)
    first = holder.current
    assert first.version == "1" and not holder.poll() and holder.status()["last_reload"] is None
    point_link(root / "latest", "broken")
    assert not holder.poll() and holder.current is first  # refused, old run kept
    refused = holder.status()
    assert refused["status"] == "degraded" and refused["last_reload"]["outcome"] == "refused"
    assert refused["last_reload"]["error"].startswith("cannot load the run: file broken/user_tower: ")
    point_link(root / "latest", "b")
    assert holder.poll() and holder.current.version == "2" and holder.reloads == 1
    swapped = holder.status()
    assert swapped["status"] == "ok" and swapped["serving"]["run"] == "b"
    assert (swapped["last_reload"]["run"], swapped["last_reload"]["outcome"]) == ("b", "swapped")
    assert first.recommend(user_id="u1", k=3).item_ids.shape == (3,)  # an old object still answers
    with pytest.raises(CanaryError, match="refused: cannot load the run: file broken/user_tower: "):
        GeneratorHolder(root / "broken")  # at startup there is no old run to keep: refused loudly


def test_a_swapped_out_run_is_freed_with_its_user_towers_tables(model_dir, tmp_path):
    """Hot reloads keep no old run: after the poll that follows a swap, the old generator is gone and its user
    tower's lookup tables destroyed (the server grew by 0.45 MB per reload of the bundled run while they stayed)."""
    root = tmp_path / "model"
    for name in ("a", "b"):
        shutil.copytree(model_dir / "run1", root / name)
    point_link(root / "latest", "a")
    holder = GeneratorHolder(root, canary=None)
    old, tables = weakref.ref(holder.current), resource_handles(holder.current.encoder._loaded)
    assert tables and all(int(tf.raw_ops.LookupTableSizeV2(table_handle=table)) > 0 for table in tables)
    point_link(root / "latest", "b")
    assert holder.poll() and not holder.poll()  # the swap, then the poll that frees what the swap released
    assert old() is None
    for table in tables:
        with pytest.raises(tf.errors.NotFoundError):
            tf.raw_ops.LookupTableSizeV2(table_handle=table)
    assert holder.current.recommend(user_id="u1", k=3).item_ids.shape == (3,)


def test_canary_reports_what_it_measured_and_refuses_an_unreachable_floor(generator):
    report = Canary(num_users=16)(generator)
    assert report["users"] == 16 and report["k"] == len(generator.index) // 10
    assert report["recall"] == 1.0  # a Flat index is exact search
    with pytest.raises(CanaryError, match=r"recall@\d+ = 1\.000 .* below the canary floor 1\.01"):
        Canary(recall_floor=1.01)(generator)


def test_history_used_counts_the_items_the_user_tower_reads(generator, reference):
    """A request may send more items than the tower reads (its max_history most recent): those count, no more."""
    items = list(dict.fromkeys(reference["train"]["item_id"]))[:MAX_HISTORY + 7]
    longer, capped = (generator.recommend(history=items, k=5), generator.recommend(history=items[:MAX_HISTORY], k=5))
    assert (longer.history_used, capped.history_used) == (MAX_HISTORY, MAX_HISTORY)
    np.testing.assert_allclose(longer.scores, capped.scores, rtol=1e-6)  # the 7 oldest were never read
