"""Cold catalogue items reported apart, against NumPy references."""

import numpy as np
import pytest

from retrieval.evaluation import cold_items
from retrieval.evaluation import csr as csr_lib

V, D = 9, 4  # indices 2..5 warm, 6..8 cold
WARM = np.array([True] * 6 + [False] * 3)
TRAIN = {0: [2, 3], 1: [4], 2: [], 3: [5, 2]}
TEST = {0: [6, 3], 1: [7, 8, 2], 2: [6], 3: [4]}


def csr(pairs):
    rows = np.concatenate([[u] * len(items) for u, items in pairs.items()]).astype(np.int64)
    cols = np.concatenate([items for items in pairs.values()]).astype(np.int64)
    return csr_lib.from_pairs(rows, cols, len(pairs))


def reference_recall(scores, relevant, candidates, excluded, k):
    """Recall@k of one user ranking ``candidates`` (minus ``excluded``) by ``scores``."""
    ranked = [c for c in sorted(candidates, key=lambda c: -scores[c]) if c not in excluded][:k]
    return len(set(ranked) & set(relevant)) / len(relevant)


def test_cold_items_metrics_match_a_reference():
    rng = np.random.default_rng(0)
    users, items = rng.normal(size=(4, D)).astype(np.float32), rng.normal(size=(V, D)).astype(np.float32)
    out = cold_items.evaluate(users, items, WARM, csr(TRAIN), csr(TEST), None, ks=(1, 2), n_bootstrap=0)
    # users 0 and 1 have cold test items and a history; user 2 has no history, user 3 no cold test item
    assert out["count/cold_items/eval_users"] == 2 and out["count/cold_items/test_pairs"] == 4
    assert out["count/cold_items/items"] == 3
    for k in (1, 2):
        whole, among = [], []
        for user in (0, 1):
            scores = items @ users[user]
            relevant = [i for i in TEST[user] if not WARM[i]]
            whole.append(reference_recall(scores, relevant, range(2, V), TRAIN[user], k))
            among.append(reference_recall(scores, relevant, range(6, V), [], k))
        assert out[f"cold_items/recall@{k}"] == pytest.approx(np.mean(whole))
        assert out[f"cold_items/among_cold/recall@{k}"] == pytest.approx(np.mean(among))


def test_no_cold_test_pair_gives_counts_only():
    rng = np.random.default_rng(0)
    out = cold_items.evaluate(rng.normal(size=(4, D)), rng.normal(size=(V, D)), np.ones(V, bool), csr(TRAIN),
                              csr(TEST), None, ks=(1,))
    assert out == {"count/cold_items/items": 0, "count/cold_items/test_pairs": 0, "count/cold_items/eval_users": 0}


def test_content_scorer_is_the_cosine_of_the_profile():
    rng = np.random.default_rng(1)
    import scipy.sparse as sp

    content = sp.csr_matrix(np.abs(rng.normal(size=(V, 5))) * (rng.random((V, 5)) < 0.6))
    train = csr(TRAIN)
    scores = cold_items.content_scorer(content, train, np.arange(V))(np.array([0, 3]))
    dense = content.toarray()
    unit = dense / np.maximum(np.linalg.norm(dense, axis=1, keepdims=True), 1e-12)
    for row, user in enumerate((0, 3)):
        profile = unit[TRAIN[user]].mean(axis=0)
        expected = unit @ (profile / np.linalg.norm(profile))
        np.testing.assert_allclose(scores[row, 2:], expected[2:], rtol=1e-5)
        assert np.isneginf(scores[row, :2]).all()


def _evaluated(n_users: int, n_bootstrap: int = 50, **settings) -> dict:
    """The headline and the cold-item metrics of ``n_users`` users who each hold one cold test item."""
    from retrieval.evaluation import evaluator

    rng = np.random.default_rng(2)
    users, items = rng.normal(size=(n_users, D)).astype(np.float32), rng.normal(size=(V, D)).astype(np.float32)
    train = csr({u: [2 + u % 4] for u in range(n_users)})
    test = csr({u: [2 + (u + 1) % 4, 6 + u % 3] for u in range(n_users)})
    metrics = evaluator.evaluate(users, items[WARM], train, _warm_only(test), ks=(1, 2), n_bootstrap=n_bootstrap,
                                 baselines=("most_popular",))
    metrics.update(cold_items.evaluate(users, items, WARM, train, test, None, ks=(1, 2), n_bootstrap=n_bootstrap,
                                       **settings))
    return metrics


def _warm_only(test):
    rows, cols = csr_lib.to_pairs(test)
    return csr_lib.from_pairs(rows[WARM[cols]], cols[WARM[cols]], test.n_rows)


def _cold_rows(text: str) -> list[str]:
    """The model's rows of the report's cold-item table."""
    section = text.split("## Cold items", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and "| model |" in line]


def test_too_few_cold_pairs_give_means_without_intervals_and_say_so():
    from retrieval.evaluation import report

    few = _evaluated(cold_items.MIN_INTERVAL_USERS - 1)
    assert few["count/cold_items/eval_users"] == cold_items.MIN_INTERVAL_USERS - 1
    assert not [key for key in few if key.startswith("cold_items/") and "_ci_" in key]
    text = report.render_markdown(few)
    assert f"Too few pairs for intervals: {cold_items.MIN_INTERVAL_USERS - 1} users" in text
    assert _cold_rows(text) and not any("[" in row for row in _cold_rows(text))
    enough = _evaluated(cold_items.MIN_INTERVAL_USERS)
    assert "cold_items/recall@1_ci_low" in enough and "cold_items/among_cold/recall@1_ci_high" in enough
    text = report.render_markdown(enough)
    assert "Too few pairs" not in text and all("[" in row for row in _cold_rows(text))
