"""Uncertainty of mean metrics over users: bootstrap intervals and paired comparisons.

- :func:`bootstrap_ci`: percentile bootstrap (Efron & Tibshirani 1993, ch. 13) of the mean over users. Resample i
  draws U users with replacement; its mean is ``w_i . m / U`` with ``w_i`` the draw counts, so a chunk of resamples
  is one matrix product [R, U] x [U, M] for all M metrics at once (seeded, no Python loop over users).
- :func:`paired_comparison`: two systems scored on the same users. The per-user difference d = a - b removes the
  between-user variance that unpaired intervals carry. Reports mean(d), its bootstrap interval and a two-sided
  sign-flip permutation p-value (under H0 "a and b are exchangeable per user" each d_u is symmetric around 0):
  ``p = (1 + #{|mean(s * d)| >= |mean(d)|}) / (1 + R)`` over R random sign vectors s (Phipson & Smyth 2010).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

# paired_comparison's fields as metric-key suffixes: "recall@20_diff", "recall@20_diff_ci_low", ...
PAIRED_KEYS = {"diff": "diff", "ci_low": "diff_ci_low", "ci_high": "diff_ci_high", "p_value": "p_value"}

def _chunks(total: int, n_users: int, budget: int = 1 << 24) -> Iterator[int]:
    size = max(1, budget // max(n_users, 1))
    for start in range(0, total, size):
        yield min(size, total - start)


def _resampled_means(values: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """[R, M] means of ``values`` [U, M] over R bootstrap resamples of the users."""
    n_users = len(values)
    out = []
    for size in _chunks(n_resamples, n_users):
        draws = rng.integers(0, n_users, size=(size, n_users))
        counts = np.bincount((draws + np.arange(size)[:, None] * n_users).reshape(-1), minlength=size * n_users)
        out.append(counts.reshape(size, n_users).astype(np.float64) @ values / n_users)
    return np.concatenate(out, axis=0)


def _as_matrix(per_user: dict[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    names = list(per_user)
    return names, np.stack([np.asarray(per_user[n], dtype=np.float64) for n in names], axis=1)


def bootstrap_ci(per_user: dict[str, np.ndarray], n_resamples: int = 1000, seed: int = 0,
                 confidence: float = 0.95) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap interval of the mean of every per-user metric; NaNs when there are no users."""
    if not per_user:
        return {}
    names, values = _as_matrix(per_user)
    if len(values) == 0 or n_resamples < 1:
        return {n: (float("nan"), float("nan")) for n in names}
    means = _resampled_means(values, n_resamples, np.random.default_rng(seed))
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    return {n: (float(lo), float(hi)) for n, lo, hi in zip(names, low, high, strict=True)}


def paired_comparison(a: dict[str, np.ndarray], b: dict[str, np.ndarray], n_resamples: int = 1000, seed: int = 0,
                      confidence: float = 0.95) -> dict[str, dict[str, float]]:
    """Per metric (names present in both): ``diff`` = mean(a - b), ``ci_low``, ``ci_high``, ``p_value``.

    ``a[name]`` and ``b[name]`` must be aligned on the same users.
    """
    names = [n for n in a if n in b]
    if not names:
        return {}
    diffs = {n: np.asarray(a[n], np.float64) - np.asarray(b[n], np.float64) for n in names}
    if len({d.shape for d in diffs.values()}) != 1:
        raise ValueError("paired metrics must be aligned on the same users")
    _, d = _as_matrix(diffs)
    n_users = len(d)
    if n_users == 0 or n_resamples < 1:
        nan = float("nan")
        return {n: {"diff": nan, "ci_low": nan, "ci_high": nan, "p_value": nan} for n in names}
    intervals = bootstrap_ci(diffs, n_resamples, seed, confidence)
    observed = np.abs(d.mean(axis=0))
    rng = np.random.default_rng([seed, 1])
    extreme = np.zeros(len(names), dtype=np.int64)
    for size in _chunks(n_resamples, n_users):
        signs = rng.integers(0, 2, size=(size, n_users)).astype(np.float64) * 2.0 - 1.0
        flipped = np.abs(signs @ d / n_users)
        extreme += (flipped >= observed - 1e-12).sum(axis=0)
    p_values = (1.0 + extreme) / (1.0 + n_resamples)
    return {n: {"diff": float(d[:, m].mean()), "ci_low": intervals[n][0], "ci_high": intervals[n][1],
                "p_value": float(p_values[m])} for m, n in enumerate(names)}
