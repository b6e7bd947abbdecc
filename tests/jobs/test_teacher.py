"""The item-item teacher: each user's top unseen items under the teacher baseline (``train.teacher``), as a NumPy
reference of that baseline ranks them."""

import numpy as np
import pytest

from retrieval import settings
from retrieval.data.vocab import NUM_RESERVED
from retrieval.evaluation import baselines
from retrieval.jobs import teacher


def rp3beta_scores(dense: np.ndarray, a: float, b: float) -> np.ndarray:
    """W = P_iu^a P_ui^a / degree_j^b, zero diagonal; score = X W (Paudel et al. 2017)."""
    degree = np.maximum(dense.sum(0), 1)
    p_ui = (dense / np.maximum(dense.sum(1, keepdims=True), 1)) ** a
    p_iu = (dense.T / degree[:, None]) ** a
    weights = (p_iu @ p_ui) / degree[None, :] ** b
    np.fill_diagonal(weights, 0)
    return dense @ weights


def ease_scores(dense: np.ndarray, lam: float) -> np.ndarray:
    """B = I - P / diag(P), P = (X^T X + lambda I)^-1 (Steck 2019, eq. 8); score = X B."""
    inverse = np.linalg.inv(dense.T @ dense + lam * np.eye(dense.shape[1]))
    weights = -inverse / np.diag(inverse)[None, :]
    np.fill_diagonal(weights, 0)
    return dense @ weights


@pytest.mark.parametrize("name, params, reference", [
    ("rp3beta", {"a": 0.6, "b": 0.35, "k": 40 + NUM_RESERVED}, lambda dense: rp3beta_scores(dense, 0.6, 0.35)),
    ("ease", {"lambda": 20.0, "items": 0}, lambda dense: ease_scores(dense, 20.0)),
])
def test_teacher_pairs_are_each_users_top_unseen_items_under_the_teacher(name, params, reference):
    rng = np.random.default_rng(3)
    n_users, n_items = 60, 40 + NUM_RESERVED
    dense = (rng.random((n_users, n_items)) < 0.15).astype(np.float64)
    dense[:, :NUM_RESERVED] = 0
    dense[0] = 0  # a user without training pairs gets no teacher pair
    users, items = np.nonzero(dense)
    per_user = 3
    got_users, got_items, sureness = teacher.pairs(name, users, items, n_users, n_items, per_user, params)
    scores = reference(dense)
    scores[dense > 0] = -np.inf
    scores[:, :NUM_RESERVED] = -np.inf
    for user in range(n_users):
        mine = got_items[got_users == user]
        if user == 0:
            assert len(mine) == 0
            continue
        expected = np.argsort(-scores[user], kind="stable")[:per_user]
        expected = expected[scores[user, expected] > 0]
        np.testing.assert_allclose(np.sort(scores[user, mine]), np.sort(scores[user, expected]), rtol=1e-4)
        # each pair's sureness: its score over the user's best teacher score
        np.testing.assert_allclose(sureness[got_users == user], scores[user, mine] / scores[user, expected[0]],
                                   rtol=1e-4)
        assert not (dense[user, mine] > 0).any()


def test_every_teacher_is_a_tunable_baseline():
    """A teacher is a baseline of the report (tuned on the automatic holdout like it), named in settings.TEACHERS."""
    assert all(name in baselines.BASELINES and baselines.BASELINES[name].tunable for name in settings.TEACHERS)
