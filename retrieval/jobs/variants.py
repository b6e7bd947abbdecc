"""Variants of the configured towers that the tuning phase tries on the run's own holdout (``train.variants``).

One recipe does not fit every log: the temperature that suits a large sparse catalogue (0.1: Yelp2018, Gowalla,
MovieLens-1M's sets) overfits a small or dense one within two epochs, where twice that temperature reads more on the
holdout (validation recall@20: the bundled data 0.2797 -> 0.3057, MovieLens-100K's time-ordered log 0.3217 ->
0.3546, Last.fm 0.2940 -> 0.2966; benchmarks/JOURNAL.md, "Issue 47: the temperature, chosen by the run"). So a run
whose first tuning was cheap (``train.variant_budget_s``) tunes each listed variant as well, and keeps whichever
reads the highest validation metric (``retrieval.jobs.tuning.tune``); the refit and the export follow the choice.

A variant is a name, one line saying what it changes, and the overrides it makes to the run's config (dotted keys,
computed from that config). Adding one is a function and a registry line here, and its name in
``retrieval.settings.VARIANTS`` (the key's rule). Written by hand: none of the dependencies chooses among model
configurations on a holdout inside a resumable job.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import ml_collections

from retrieval import settings


@dataclasses.dataclass(frozen=True)
class Variant:
    """A named change to the run's config: ``overrides(config)`` maps dotted keys to their values in the variant."""

    name: str
    description: str
    overrides: Callable[[ml_collections.ConfigDict], Mapping[str, Any]]


def _softer(config: ml_collections.ConfigDict) -> Mapping[str, Any]:
    return {"model.temperature": 2.0 * float(config.model.temperature)}


VARIANTS = {variant.name: variant for variant in (
    Variant("softer", "the temperature doubled", _softer),
)}
assert tuple(VARIANTS) == settings.VARIANTS, "retrieval.settings.VARIANTS names the registered variants"


def apply(config: ml_collections.ConfigDict, name: Optional[str]) -> ml_collections.ConfigDict:
    """``config`` itself without a variant (``name`` None), else a copy with the variant's overrides."""
    if name is None:
        return config
    changed = ml_collections.ConfigDict(config.to_dict())
    changed.update_from_flattened_dict(dict(VARIANTS[name].overrides(config)))
    return changed


def describe(config: ml_collections.ConfigDict, name: str) -> str:
    """One line: the variant's name, what it changes, and the values it sets, e.g. ``softer (the temperature
    doubled: model.temperature=0.2)``."""
    values = ", ".join(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
                       for key, value in VARIANTS[name].overrides(config).items())
    return f"{name} ({VARIANTS[name].description}: {values})"
