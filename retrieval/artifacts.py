"""Run directories and atomic writes.

Every artifact is written under a temporary name in its destination directory and then renamed, so a reader (a
server, the next scheduled run, a person) sees either the old file or the new one, never half of one. ``latest`` is a
symbolic link switched by renaming a fresh link over it, which POSIX makes atomic.

The layout of one run, ``<output_dir>/<model>/<run_id>/``, is fixed by :class:`RunPaths`; every stage and every
consumer (evaluation, index, serving) finds its files through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Union

PathLike = Union[str, os.PathLike]


@dataclasses.dataclass(frozen=True)
class RunPaths:
    """Where each artifact of a run lives."""

    root: Path

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    config = property(lambda self: self.root / "config.json")
    manifest = property(lambda self: self.root / "manifest.json")
    item_vocab = property(lambda self: self.root / "vocab" / "items.parquet")
    user_vocab = property(lambda self: self.root / "vocab" / "users.parquet")
    train_data = property(lambda self: self.root / "data" / "train.parquet")
    validation_data = property(lambda self: self.root / "data" / "validation.parquet")
    test_data = property(lambda self: self.root / "data" / "test.parquet")
    checkpoints = property(lambda self: self.root / "checkpoints")
    tensorboard = property(lambda self: self.root / "tensorboard")
    user_tower = property(lambda self: self.root / "user_tower")
    item_embeddings = property(lambda self: self.root / "item_embeddings.parquet")
    index = property(lambda self: self.root / "index")
    metrics = property(lambda self: self.root / "metrics.json")
    report = property(lambda self: self.root / "report.md")
    plot = property(lambda self: self.root / "recall_at_k.png")
    stages = property(lambda self: self.root / "stages")


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yields a temporary sibling of ``path``; on success renames it onto ``path`` (file or directory).

    A directory destination that already exists is replaced: the old one is moved aside first and removed only after
    the new one is in place.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    target = tmp / path.name
    try:
        yield target
        if target.is_dir() and path.is_dir():
            old = tmp / (path.name + ".old")
            os.rename(path, old)
            os.rename(target, path)
        else:
            os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: PathLike, text: str) -> None:
    """Writes ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: PathLike, obj: Any) -> None:
    """Writes ``obj`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: PathLike) -> Any:
    with open(path) as f:
        return json.load(f)


def point_link(link: PathLike, target: str) -> None:
    """Atomically points the symbolic link ``link`` at ``target`` (a name relative to the link's directory)."""
    link = Path(link)
    tmp = link.parent / f".{link.name}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, link)
