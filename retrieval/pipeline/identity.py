"""What a run is: its configuration and the contents of its input files. A rerun of a run id resumes it only if
both are unchanged; otherwise the stages already done (split, vocabularies, checkpoints) belong to another run.

The identity is recorded when a run starts: ``config.json`` (the configuration), the manifest's ``data_fingerprint``
(SHA-256 of every input file) and ``fingerprint`` (one SHA-256 over both). A rerun computes its own identity and
compares; a mismatch names the changed keys and files and asks for a new run id or ``--force``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Iterator, Mapping

import ml_collections

from retrieval import artifacts
from retrieval.errors import InputError
from retrieval.pipeline import provenance

INPUT_KEYS = ("train_path", "test_path", "validation_path", "item_features_path", "user_features_path")
MAX_LISTED = 5  # changes named in the error message


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """The configuration as ``config.json`` stores it, and the input files' digests by path."""

    config: dict
    data: dict

    @classmethod
    def of(cls, config: ml_collections.ConfigDict) -> RunIdentity:
        data = provenance.fingerprint([config.data.get(key, "") for key in INPUT_KEYS])
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
