"""Run directories and atomic writes.

Every artifact is written under a temporary name in its destination directory and then renamed, so a reader (a
server, the next scheduled run, a person) sees either the old file or the new one, never half of one, and a failed
write leaves the old one in place. (A directory that replaces another takes two renames: between them the path is
briefly absent, never lost; see ``atomic_path``.) ``latest`` is a symbolic link switched by renaming a fresh link over
it, which POSIX makes atomic: it never goes missing.

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
# item_embeddings.parquet's column of the vectors the items' features alone give them (runs with the cold head;
# written by retrieval.export and the catalogue refresh, folded by retrieval.index.similar)
PLACED_BY_FEATURES = "placed_by_features"


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
    item_features = property(lambda self: self.root / "vocab" / "item_features.json")  # the item feature specs
    # A catalogue refresh's run keeps the training vocabulary its id tables are indexed by apart from its catalogue.
    training_item_vocab = property(lambda self: self.root / "vocab" / "training_items.parquet")

    @property
    def model_item_vocab(self) -> Path:
        """The item vocabulary the run's id tables (``id_tables.npz``) are indexed by: the training vocabulary of a
        catalogue refresh's run, else ``item_vocab`` (what a warm start reads)."""
        return self.training_item_vocab if self.training_item_vocab.is_file() else self.item_vocab
    item_tower = property(lambda self: self.root / "item_tower")
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

    A file (or a new directory) arrives in one ``os.replace``. An existing directory cannot be renamed over, so it is
    replaced in two renames: the old one is moved aside (into the temporary directory), then the new one into place;
    if that second rename fails, the old one is moved back. The old copy is removed only after the new one is in
    place: the temporary directory is never deleted while it holds the only copy (a process killed between the two
    renames, or a failed move back, leaves it there, named in the error).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    target, aside = tmp / path.name, tmp / (path.name + ".old")
    try:
        yield target
        if target.is_dir() and path.is_dir():
            _replace_directory(target, path, aside)
        else:
            os.replace(target, path)
    finally:
        if path.exists() or not aside.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _replace_directory(new: Path, path: Path, aside: Path) -> None:
    """Moves the directory ``path`` to ``aside`` and ``new`` to ``path``; on failure moves ``aside`` back."""
    os.rename(path, aside)
    try:
        os.rename(new, path)
    except BaseException:
        try:
            os.rename(aside, path)
        except OSError as error:
            raise OSError(f"could not replace {path} nor move the old copy back; it is at {aside}") from error
        raise


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
    """Atomically points the symbolic link ``link`` at ``target`` (a name relative to the link's directory).

    A fresh link is renamed over the old one (``rename(2)`` replaces it in one step), so a reader always finds
    ``link`` and finds it pointing at the old target or the new one; if the rename fails the fresh link is removed.
    """
    link = Path(link)
    tmp = link.parent / f".{link.name}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        tmp.unlink()
        raise
