"""What a run is: its configuration and the contents of its input files. A rerun of a run id resumes it only if
both are unchanged; otherwise the stages already done (split, vocabularies, checkpoints) belong to another run.

The identity is recorded when a run starts: ``config.json`` (the configuration), the manifest's ``data_fingerprint``
(SHA-256 of every input file) and ``fingerprint`` (one SHA-256 over both). A rerun computes its own identity and
compares; a mismatch names the changed keys and files and asks for a new run id or ``--force``.

A run also belongs to a *lineage* (:func:`lineage_of`): the runs trained on one data source, the only ones its gate
compares it with and the only ones it may replace as published (``retrieval.jobs.publish``). The lineage is
``publish.lineage`` when set, else ``data-<12 hex digits>``: a digest of where the data comes from, the absolute
paths of the input files and the user and item columns, not of their contents, so a daily retrain on a log that
grows (or is re-exported) at the same path stays in its lineage, while a run on another dataset starts its own. A job
whose input path changes every day (dated file names) names its lineage with ``publish.lineage``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, Iterator, Mapping, Optional

import ml_collections

from retrieval import artifacts
from retrieval.errors import InputError
from retrieval.jobs import provenance
from retrieval.jobs.sections import Settled

INPUT_KEYS = ("train_path", "test_path", "validation_path", "item_features_path", "user_features_path")
SOURCE_COLUMNS = ("user_column", "item_column")
AUTO_PREFIX = "data-"
MAX_LISTED = 5  # changes named in the error message


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """The configuration as ``config.json`` stores it, and the input files' digests by path."""

    config: dict
    data: dict

    @classmethod
    def of(cls, config: ml_collections.ConfigDict) -> RunIdentity:
        c = Settled(config)
        data = provenance.fingerprint([c[f"data.{key}"] for key in INPUT_KEYS])
        return cls(config=json.loads(json.dumps(config.to_dict())), data=data)

    @property
    def digest(self) -> str:
        canonical = json.dumps({"config": self.config, "data": self.data}, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()


def _changed_keys(old: Any, new: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new), key=str):
            yield from _changed_keys(old.get(key), new.get(key), f"{prefix}{key}.")
    elif old != new:
        yield f"{prefix[:-1]} {old!r} -> {new!r}"


def changes(paths: artifacts.RunPaths, identity: RunIdentity) -> list[str]:
    """How ``identity`` differs from the one recorded in the run at ``paths`` (empty: the same run, or nothing
    recorded yet)."""
    if not paths.config.exists():
        return []
    manifest = artifacts.read_json(paths.manifest) if paths.manifest.exists() else {}
    if manifest.get("fingerprint") == identity.digest:
        return []
    found = list(_changed_keys(artifacts.read_json(paths.config), identity.config))
    recorded = manifest.get("data_fingerprint") or {}
    found += [f"contents of {path}" for path, digest in identity.data.items()
              if path in recorded and recorded[path] != digest]
    return found


def check_resume(paths: artifacts.RunPaths, identity: RunIdentity, run_id: str) -> None:
    """Raises ``InputError`` if the run at ``paths`` was started with another configuration or other inputs."""
    found = changes(paths, identity)
    if found:
        listed = "; ".join(found[:MAX_LISTED]) + (f"; and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED
                                                  else "")
        raise InputError(f"run {run_id} was started with a different configuration or input ({listed}); use a new "
                         "--run_id, or --force to redo it from scratch", field="run_id")


@dataclasses.dataclass(frozen=True)
class Lineage:
    """The lineage a run belongs to: ``name`` (a path component under ``<model>/lineages/``), whether it was named
    explicitly (``publish.lineage``), and the data source an automatic name digests."""

    name: str
    explicit: bool
    source: dict

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def lineage_of(config: Mapping) -> Lineage:
    """The lineage of a run's configuration (a ``ConfigDict`` or the dict of its ``config.json``); relative input
    paths are resolved against the working directory."""
    c = Settled(config.to_dict() if isinstance(config, ml_collections.ConfigDict) else config)
    source = {key: os.path.abspath(c[f"data.{key}"]) for key in INPUT_KEYS if c[f"data.{key}"]}
    source.update({key: c[f"data.{key}"] for key in SOURCE_COLUMNS})
    named = c["publish.lineage"]
    if named:
        return Lineage(named, True, source)
    digest = hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()
    return Lineage(AUTO_PREFIX + digest[:12], False, source)


def validation_scored(config: Mapping, digests: Mapping[str, str]) -> Optional[str]:
    """Why a run is a tuning run, scored on its validation data (``data.test_path`` is ``data.validation_path``, by
    path or by content; ``digests``: the input files' SHA-256 by path, as :class:`RunIdentity` records them), or
    None. Such a run measures how well its settings generalise to data it early-stopped on: never published."""
    c = Settled(config.to_dict() if isinstance(config, ml_collections.ConfigDict) else config)
    test, validation = c["data.test_path"], c["data.validation_path"]
    if not test or not validation:
        return None
    same_path = os.path.realpath(test) == os.path.realpath(validation)
    test_digest = digests.get(test)
    same_content = test_digest not in (None, "missing") and test_digest == digests.get(validation)
    if not (same_path or same_content):
        return None
    return (f"data.test_path is the validation data ({test}{'' if same_path else ', same contents as ' + validation}"
            "): a tuning run scored on the data it early-stopped on is never published; rerun the final model "
            "with its own test file")
