"""The canary checks what the user tower says: the served answers must find the run's held-out items (recall@k above
a floor from the run's own metric, most-popular's and chance), so a tower of random finite vectors is refused."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from retrieval.artifacts import RunPaths
from retrieval.data.vocab import Vocabulary
from retrieval.export import read_item_embeddings, write_item_embeddings
from retrieval.index.run_index import build_run_index, user_queries
from retrieval.serving import CandidateGenerator
from retrieval.serving.canary import Canary, CanaryError
from retrieval.serving.demo_run import write_demo_run, write_user_tower

CLUSTERS = 8


def _held_out(paths: RunPaths, per_user: int = 5) -> pd.DataFrame:
    """Per user, the first ``per_user`` items of her taste cluster (item i is in cluster i % 8) she has not trained
    on: what a model of the clusters finds and random vectors do not."""
    train = pd.read_parquet(paths.train_data)
    rows = []
    for user, items in train.groupby("user_id")["item_id"]:
        seen = set(items)
        cluster = int(items.iloc[0][1:]) % CLUSTERS
        fresh = [f"i{i}" for i in range(cluster, 400, CLUSTERS) if f"i{i}" not in seen][:per_user]
        rows += [(user, item) for item in fresh]
    return pd.DataFrame(rows, columns=["user_id", "item_id"])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    paths = write_demo_run(tmp_path_factory.mktemp("canary") / "good", clusters=CLUSTERS)
    build_run_index(paths)
    _held_out(paths).to_parquet(paths.test_data, index=False)
    return paths


def _copy(paths: RunPaths, destination) -> RunPaths:
    shutil.copytree(paths.root, destination)
    return RunPaths(destination)


def test_a_good_tower_passes_against_most_popular(run):
    generator = CandidateGenerator.from_run(run.root)
    quality = Canary().check_quality(generator)
    assert quality["users"] == 80 and quality["k"] == min(20, len(generator.index) // 10)  # chance stays low
    assert quality["reference_source"] == "most-popular on the same users"
    assert quality["recall"] > 2 * quality["reference"] and quality["recall"] > quality["floor"] > 0.1


def test_a_tower_of_random_finite_vectors_is_refused(run, tmp_path):
    broken = _copy(run, tmp_path / "random")
    item_ids, vectors = read_item_embeddings(run.item_embeddings)
    shutil.rmtree(broken.user_tower)
    noise = np.random.default_rng(1).standard_normal(vectors.shape).astype(np.float32)
    write_user_tower(broken.user_tower, item_ids, noise, 20, "ip")  # finite, right shape, says nothing
    generator = CandidateGenerator.from_run(broken.root)
    with pytest.raises(CanaryError, match=r"answers reach recall@\d+ = 0\.0\d+ on the held-out items of 80 training "
                                          r"users, below the canary floor"):
        Canary()(generator)


def test_the_reference_is_the_runs_own_evaluated_recall(run, tmp_path):
    evaluated = _copy(run, tmp_path / "evaluated")
    good = Canary().check_quality(CandidateGenerator.from_run(evaluated.root))
    evaluated.metrics.write_text(json.dumps({"recall@10": 0.5, "recall@20": good["recall"]}))
    quality = Canary().check_quality(CandidateGenerator.from_run(evaluated.root))
    assert quality["reference_source"] == "the run's evaluated recall" and quality["reference"] == good["recall"]
    evaluated.metrics.write_text(json.dumps({"recall@20": 3 * good["recall"]}))  # far better than what it serves
    with pytest.raises(CanaryError, match="0.5 x the run's evaluated recall"):
        Canary().check_quality(CandidateGenerator.from_run(evaluated.root))


def test_runs_without_held_out_data_skip_the_check(run, tmp_path):
    bare = _copy(run, tmp_path / "bare")
    bare.test_data.unlink()
    assert Canary()(CandidateGenerator.from_run(bare.root))["quality"] == {
        "skipped": "the run has no data/test.parquet"}


def test_items_without_interactions_do_not_fail_the_check(run, tmp_path):
    """A catalogue refresh adding one item per user, each at that user's own query (so new items fill every top k),
    is checked among the warm items the tower was evaluated on: growth cannot refuse it."""
    grown = _copy(run, tmp_path / "grown")
    generator = CandidateGenerator.from_run(run.root)
    queries = user_queries(generator.encoder, generator.histories, generator.index.id_map, len(generator.histories),
                           0, generator.max_history)
    item_ids, vectors = read_item_embeddings(run.item_embeddings)
    new_ids = np.array([f"new{k}" for k in range(len(queries))], dtype=object)
    write_item_embeddings(grown.item_embeddings, np.concatenate([item_ids, new_ids]),
                          np.concatenate([vectors, 10 * queries]), np.arange(len(item_ids) + len(new_ids)) < len(item_ids))
    vocab = Vocabulary.load(run.item_vocab)
    Vocabulary(np.concatenate([vocab.ids, new_ids]), np.concatenate([vocab.counts, np.zeros(len(new_ids), np.int64)])
               ).save(grown.item_vocab)
    build_run_index(grown)
    served = CandidateGenerator.from_run(grown.root)
    assert set(served.recommend(user_id=str(served.histories.user_ids[0]), k=20).item_ids) <= set(new_ids)
    quality = Canary()(served)["quality"]
    assert quality["ranked_items"] == len(item_ids) and quality["recall"] > quality["floor"] > 0.1


def test_a_catalogue_too_small_for_the_cut_off_says_so(run, tmp_path):
    small = _copy(run, tmp_path / "small")
    small.metrics.write_text(json.dumps({"recall@20": 0.9}))
    item_ids, vectors = read_item_embeddings(run.item_embeddings)
    write_item_embeddings(small.item_embeddings, item_ids[:30], vectors[:30])
    vocab = Vocabulary.load(run.item_vocab)
    Vocabulary(vocab.ids[:32], vocab.counts[:32]).save(small.item_vocab)
    build_run_index(small)
    assert Canary().check_quality(CandidateGenerator.from_run(small.root)) == {
        "skipped": "30 catalogue items are too few for a recall@20 check: random answers would find about 67% of the "
                   "held-out items (at least 80 items needed)"}
