"""Randomness keyed by the user, not by where the user's rows happen to be processed.

The prepare stage runs the same tasks on one partition (in memory) or on many (streamed, or on a cluster); a random
holdout or a within-user shuffle drawn from one generator per partition would give a different test set for every
partition count. Here each row's random number is a hash of ``(seed, salt, user id, the row's position among its
user's rows)``: the same wherever and in whatever company the user's rows are processed. Written by hand (NumPy has
no counter-based generator over arbitrary keys): SplitMix64's finaliser (Steele et al. 2014) over pandas' stable
``hash_array`` of the id string.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
HOLDOUT, SHUFFLE, TUNING, COLD_ITEMS = 1, 2, 3, 4  # salts: one independent stream per use


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (a bijection of uint64 with good avalanche)."""
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def user_uniforms(user_ids: pd.Series, seed: int, salt: int) -> np.ndarray:
    """One number in [0, 1) per row of ``user_ids``, a function of ``(seed, salt, user id, the row's position among
    the rows of its user in this order)`` only: identical for any partition of the users."""
    user_ids = pd.Series(np.asarray(user_ids, dtype=object))
    hashed = pd.util.hash_array(user_ids.to_numpy(dtype=object))
    position = user_ids.groupby(user_ids, sort=False).cumcount().to_numpy().astype(np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed) * np.uint64(4) + np.uint64(salt))
        z = _mix(_mix(hashed ^ key) + position * _GOLDEN)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def id_uniforms(ids: pd.Series, seed: int, salt: int) -> np.ndarray:
    """One number in [0, 1) per id, a function of ``(seed, salt, id)`` only: every row of an id gets the same one,
    in any partition (a seeded choice of items, e.g. the cold-item holdout)."""
    hashed = pd.util.hash_array(np.asarray(ids, dtype=object))
    with np.errstate(over="ignore"):
        z = _mix(hashed ^ _mix(np.uint64(seed) * np.uint64(4) + np.uint64(salt)))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
