"""Bootstrap intervals and the paired test against explicit references."""

import itertools

import numpy as np
import pytest

from retrieval.evaluation import bootstrap


def test_resampled_means_equal_explicit_resampling():
    values = np.random.default_rng(0).random((50, 2))
    got = bootstrap._resampled_means(values, 30, np.random.default_rng(5))
    draws = np.random.default_rng(5).integers(0, 50, size=(30, 50))
    np.testing.assert_allclose(got, values[draws].mean(axis=1))


def test_interval_matches_normal_approximation_of_a_mean():
    # Bernoulli(0.3) over 4000 users: standard error sqrt(0.3 * 0.7 / 4000) = 0.007246; 95% half-width 0.014201.
    values = (np.random.default_rng(1).random(4000) < 0.3).astype(float)
    low, high = bootstrap.bootstrap_ci({"recall@20": values}, n_resamples=2000, seed=0)["recall@20"]
    assert (high - low) / 2 == pytest.approx(0.014201, rel=0.1)
    assert low < values.mean() < high


def test_paired_p_value_matches_exact_sign_flip_enumeration():
    d = np.array([0.5, 0.2, -0.1, 0.4, 0.3, 0.0, 0.25, -0.05, 0.6, 0.1])
    # Exact: share of the 2^10 sign vectors whose |mean| reaches the observed |mean|.
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=len(d))))
    exact = np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-12)
    got = bootstrap.paired_comparison({"m": d}, {"m": np.zeros_like(d)}, n_resamples=20000, seed=0)["m"]
    assert got["p_value"] == pytest.approx(exact, abs=0.005)
    assert got["diff"] == pytest.approx(d.mean())
    assert got["ci_low"] > 0  # every resample of these differences is positive more than 97.5% of the time


def test_identical_systems_are_not_different():
    a = np.random.default_rng(2).random(300)
    got = bootstrap.paired_comparison({"m": a}, {"m": a.copy()}, n_resamples=200)["m"]
    assert got == {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_value": 1.0}


def test_empty_groups_give_nan():
    low, high = bootstrap.bootstrap_ci({"m": np.zeros(0)})["m"]
    assert np.isnan(low) and np.isnan(high)
