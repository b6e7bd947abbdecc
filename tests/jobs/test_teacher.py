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
    got_users, got_items, sureness = teacher.pairs(users, items, n_users, n_items, per_user, {"a": a, "b": b, "k": n_items})
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
        # each pair's sureness: its score over the user's best teacher score
        np.testing.assert_allclose(sureness[got_users == user], scores[user, mine] / scores[user, expected[0]],
                                   rtol=1e-5)
        assert not (dense[user, mine] > 0).any()
