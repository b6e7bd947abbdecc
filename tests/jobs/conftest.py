"""Fixtures shared by the job tests: a small synthetic log with item and user feature tables."""

import numpy as np
import pytest

from retrieval.data import synthetic

TITLE_WORDS = np.array(["red", "blue", "tent", "boot", "lamp", "desk", "cup", "rope"])


def random_titles(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` two-word titles drawn from :data:`TITLE_WORDS` (a text feature for the catalogue tests)."""
    return [" ".join(rng.choice(TITLE_WORDS, 2)) for _ in range(n)]


@pytest.fixture(scope="module")
def log_path(tmp_path_factory):
    interactions, items, users = synthetic.generate(num_users=300, num_items=200, interactions_per_user=20,
                                                    num_clusters=5, seed=3)
    directory = tmp_path_factory.mktemp("log")
    interactions.to_csv(directory / "interactions.csv", index=False)
    items.to_csv(directory / "items.csv", index=False)
    users.to_csv(directory / "users.csv", index=False)
    return directory
