"""The item-item teacher: each user's top unseen items under RP3beta, as a NumPy reference ranks them."""

import numpy as np

from retrieval.data.vocab import NUM_RESERVED
from retrieval.jobs import teacher


def test_teacher_pairs_are_each_users_top_unseen_items_under_rp3beta():
    rng = np.random.default_rng(3)
    n_users, n_items = 60, 40 + NUM_RESERVED
    dense = (rng.random((n_users, n_items)) < 0.15).astype(np.float64)
    dense[:, :NUM_RESERVED] = 0
    dense[0] = 0  # a user without training pairs gets no teacher pair
    users, items = np.nonzero(dense)
    a, b, per_user = 0.6, 0.35, 3
    got_users, got_items = teacher.pairs(users, items, n_users, n_items, per_user, {"a": a, "b": b, "k": n_items})
    # reference: W = P_iu^a P_ui^a / degree_j^b, zero diagonal; score = X W
    degree = np.maximum(dense.sum(0), 1)
    p_ui = (dense / np.maximum(dense.sum(1, keepdims=True), 1)) ** a
    p_iu = (dense.T / degree[:, None]) ** a
    weights = (p_iu @ p_ui) / degree[None, :] ** b
    np.fill_diagonal(weights, 0)
    scores = dense @ weights
    scores[dense > 0] = -np.inf
    scores[:, :NUM_RESERVED] = -np.inf
    for user in range(n_users):
        mine = got_items[got_users == user]
        if user == 0:
            assert len(mine) == 0
            continue
        expected = np.argsort(-scores[user], kind="stable")[:per_user]
        expected = expected[scores[user, expected] > 0]
        np.testing.assert_allclose(np.sort(scores[user, mine]), np.sort(scores[user, expected]), rtol=1e-5)
        assert not (dense[user, mine] > 0).any()


def _rp3beta_weights(dense: np.ndarray, a: float, b: float) -> np.ndarray:
    """W = P_iu^a P_ui^a / degree_j^b with a zero diagonal (Paudel et al. 2017), densely."""
    degree = np.maximum(dense.sum(0), 1)
    p_ui = (dense / np.maximum(dense.sum(1, keepdims=True), 1)) ** a
    p_iu = (dense.T / degree[:, None]) ** a
    weights = (p_iu @ p_ui) / degree[None, :] ** b
    np.fill_diagonal(weights, 0)
    return weights


def test_item_neighbours_are_each_items_best_rp3beta_rows_normalised():
    rng = np.random.default_rng(5)
    n_users, n_items = 50, 30 + NUM_RESERVED
    dense = (rng.random((n_users, n_items)) < 0.2).astype(np.float64)
    dense[:, :NUM_RESERVED] = 0
    dense[:, -1] = 0  # an item nobody clicked has no neighbour: zero weights
    users, items = np.nonzero(dense)
    rows, weights = teacher.neighbours(users, items, n_users, n_items, 4, {"a": 0.5, "b": 0.3, "k": n_items})
    assert rows.shape == weights.shape == (n_items, 4)
    reference = _rp3beta_weights(dense, 0.5, 0.3)
    for item in range(NUM_RESERVED, n_items - 1):
        best = np.sort(reference[item])[::-1][:4]
        np.testing.assert_allclose(weights[item], best / best.sum(), rtol=1e-5)
        np.testing.assert_allclose(reference[item, rows[item]], best, rtol=1e-5)
    assert not weights[-1].any() and not weights[:NUM_RESERVED].any()
