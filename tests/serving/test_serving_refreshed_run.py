"""Serving a catalogue refresh's run: histories are read through the user tower's training vocabulary, not through the
new catalogue (issue 50). The refresh is made by hand on the demo run (its mean-of-history tower knows the items it
was written with): one item removed from the catalogue, one new item with a vector of its own."""

import shutil

import numpy as np
import pytest

from retrieval.artifacts import RunPaths
from retrieval.data.vocab import NUM_RESERVED, OOV, PAD, Vocabulary
from retrieval.export import read_item_embeddings, write_item_embeddings
from retrieval.serving import CandidateGenerator, UnknownItemError
from retrieval.serving.canary import Canary
from retrieval.serving.demo_run import write_demo_run

NEW = "new-item"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(the parent run's generator, the refreshed run's, the removed item): the most clicked item leaves the
    catalogue, a new item joins it with that item's vector (so it would rank where the removed one did)."""
    root = tmp_path_factory.mktemp("refreshed")
    parent = write_demo_run(root / "parent", max_history=50)
    refreshed = RunPaths(root / "refreshed")
    shutil.copytree(parent.root, refreshed.root)
    vocabulary = Vocabulary.load(parent.item_vocab)
    vocabulary.save(refreshed.training_item_vocab)
    removed = str(vocabulary.ids[NUM_RESERVED])  # the most clicked item
    item_ids, vectors = read_item_embeddings(parent.item_embeddings)
    kept = item_ids != removed
    catalogue = np.append(item_ids[kept], NEW)
    write_item_embeddings(refreshed.item_embeddings, catalogue, np.vstack([vectors[kept], vectors[~kept]]))
    Vocabulary(np.concatenate([[PAD, OOV], catalogue]), np.zeros(len(catalogue) + NUM_RESERVED)).save(
        refreshed.item_vocab)
    return CandidateGenerator.from_run(parent.root), CandidateGenerator.from_run(refreshed.root), removed


def _scores(result) -> dict:
    return dict(zip(result.item_ids.tolist(), result.scores.tolist(), strict=True))


def test_an_item_a_refresh_removed_still_counts_in_the_stored_histories(runs):
    """It vanished from every user's stored history, and their vectors changed, though the user tower knows it."""
    parent, refreshed, removed = runs
    users = [str(user) for row, user in enumerate(parent.histories.user_ids)
             if removed in parent.index.id_map.ids_of(parent.histories.history(row))]
    assert users
    for user in users[:5]:
        before, after = parent.recommend(user_id=user, k=20), refreshed.recommend(user_id=user, k=20)
        assert after.history_used == before.history_used and after.history_source == "stored"
        shared = set(_scores(before)) & set(_scores(after))
        assert len(shared) >= 15
        np.testing.assert_allclose([_scores(after)[i] for i in shared], [_scores(before)[i] for i in shared],
                                   rtol=1e-5)
    assert Canary()(refreshed)["users"] > 0  # the canary reads the same histories


def test_a_new_item_in_a_request_history_is_reported_unused_and_changes_nothing(runs):
    """The user tower cannot read an item it never trained on (its signature takes ids): the answer said
    ``history_used: 2, unknown_history: []`` and was the same whatever the new items were."""
    _, refreshed, removed = runs
    known = ["i3", "i11"]
    with_new = refreshed.recommend(history=[NEW, *known], k=10)
    without = refreshed.recommend(history=known, k=10, exclude=[NEW])
    assert (with_new.history_source, with_new.history_used, with_new.unknown_history) == ("request", 2, (NEW,))
    np.testing.assert_array_equal(with_new.item_ids, without.item_ids)
    np.testing.assert_allclose(with_new.scores, without.scores, rtol=1e-5)
    assert NEW not in with_new.item_ids  # the user has it: excluded like the rest of the history
    alone = refreshed.recommend(user_id="stranger", history=[NEW], k=5)
    assert (alone.fallback, alone.history_source, alone.history_used, alone.unknown_history) == (True, "none", 0, (NEW,))
    assert NEW not in alone.item_ids
    # an item the refresh removed is still read in a request history (the tower knows it), never recommended
    gone = refreshed.recommend(history=[removed], k=5)
    assert (gone.history_source, gone.history_used, gone.unknown_history) == ("request", 1, ())
    assert removed not in gone.item_ids
    with pytest.raises(UnknownItemError, match="a catalogue refresh removed it"):  # not "unknown": the tower reads it
        refreshed.similar(removed)
    with pytest.raises(UnknownItemError, match="unknown item 'nope'"):
        refreshed.similar("nope")


def test_the_index_self_check_queries_read_histories_as_serving_does(runs, monkeypatch):
    """``build_run_index`` read the self-check users' histories through the catalogue: an item a refresh removed
    vanished from them, so a refreshed run's self-check did not send the queries its server sends."""
    from retrieval.index import run_index

    _, refreshed, _ = runs
    sent = []

    def build_index(vectors, id_map, queries=None, **options):
        sent.append(queries)
        return real(vectors, id_map, queries=queries, **options)

    real = run_index.build_index
    monkeypatch.setattr(run_index, "build_index", build_index)
    users = len(refreshed.histories)
    run_index.build_run_index(refreshed.run_dir, save=False, encoder=refreshed.encoder, num_check_queries=users)
    served = run_index.user_queries(refreshed.encoder, refreshed.histories, refreshed.vocabulary, users, 0,
                                    refreshed.max_history)
    np.testing.assert_allclose(sent[0], served, rtol=1e-5)
