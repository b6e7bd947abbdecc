"""What a run records about where it came from: package versions, data fingerprint, git revision."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Dict, Iterable, Optional

PACKAGES = ("retrieval", "tensorflow", "tf-keras", "tensorflow-recommenders", "numpy", "pandas", "pyarrow",
            "faiss-cpu", "absl-py", "ml_collections")


def package_versions() -> Dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def fingerprint(paths: Iterable[Optional[str]]) -> Dict[str, str]:
    """SHA-256 of each input file (streamed in 1 MiB chunks), keyed by path; "missing" for absent files (the reader
    reports those as input errors)."""
    digests = {}
    for path in paths:
        if not path:
            continue
        if not os.path.isfile(path):
            digests[str(path)] = "missing"
            continue
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        digests[str(path)] = digest.hexdigest()
    return digests


def git_revision(directory: os.PathLike = ".") -> Optional[str]:
    """The git commit of ``directory`` (with ``-dirty`` if modified), or None outside a repository."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(directory), capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=Path(directory),
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")
