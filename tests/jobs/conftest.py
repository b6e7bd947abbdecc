"""Fixtures shared by the job tests: a small synthetic log with item and user feature tables."""

import pytest

from retrieval.data import synthetic


@pytest.fixture(scope="module")
def log_path(tmp_path_factory):
    interactions, items, users = synthetic.generate(num_users=300, num_items=200, interactions_per_user=20,
                                                    num_clusters=5, seed=3)
    directory = tmp_path_factory.mktemp("log")
    interactions.to_csv(directory / "interactions.csv", index=False)
    items.to_csv(directory / "items.csv", index=False)
    users.to_csv(directory / "users.csv", index=False)
    return directory
