"""Up-front checks of the names and paths a command line gives: run ids, output directories, input files.

Everything here is checked before any work starts, so a bad path fails at once with exit 2 and one line naming the
flag and what is allowed, never after a full training run. TensorFlow-free, so ``pipelines.evaluate`` and
``pipelines.recommend`` check their flags instantly.
"""

from __future__ import annotations

import datetime
import os
import re
from pathlib import Path
from typing import Optional

from retrieval.errors import InputError, shown

# A run id or a model name is one path component: no separators, no "..", no leading dot (hidden files and lock files
# of the model directory start with a dot), at most 128 characters.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
NAME_RULE = "1-128 characters among letters, digits, '.', '_' and '-', starting with a letter or digit, without '..'"
RUN_MARKERS = ("config.json", "manifest.json")  # a directory holding both is a run directory
LATEST = "latest"  # the published-run link of a model directory (retrieval.jobs.publish)
LINEAGES = "lineages"  # the directory of each lineage's published-run link (retrieval.jobs.publish)
RESERVED_NAMES = (LATEST, LINEAGES)
# Kernel interfaces mounted like directories: writing a run there fails half-way (or worse, writes kernel settings).
PSEUDO_FILESYSTEMS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs",
                                "tracefs", "pstore", "bpf", "configfs", "fusectl", "mqueue", "binfmt_misc", "efivarfs"})
_PSEUDO_ROOTS = ("/proc", "/sys")  # where /proc/mounts cannot be read


def new_run_id() -> str:
    """The default run id: the UTC time, ``YYYYmmddTHHMMSS``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")


def check_name(name: object, field: str) -> None:
    """``name`` can be a run id or a model name: one safe path component, not ``latest`` or ``lineages``."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise InputError(f"{shown(name, 40)} is not a valid name: use {NAME_RULE}", field=field)
    if name in RESERVED_NAMES:
        raise InputError(f"{name!r} is reserved (the published runs' links of a model directory)", field=field)


def lineage_dir(model_dir: str, lineage: str, field: str = "lineage") -> str:
    """The directory whose ``latest`` link names lineage ``lineage``'s published run in the model directory
    ``model_dir`` (``<model_dir>/lineages/<lineage>``: the server watches it like a model directory); InputError
    naming the lineages there when it has none."""
    check_name(lineage, field)
    path = Path(model_dir) / LINEAGES / lineage
    if not (path / LATEST).exists():
        known = sorted(p.name for p in (Path(model_dir) / LINEAGES).glob("*") if (p / LATEST).exists())
        raise InputError(f"{model_dir} has no published run of lineage {lineage!r} (lineages there: "
                         f"{', '.join(known) or 'none'})", field=field)
    return str(path)


def resolve_run_dir(path: object, lineage: Optional[str] = None, field: str = "run_dir") -> Path:
    """The run directory a ``--run_dir`` names, resolved the same way by every entry point: a run directory, a
    ``latest`` link, or a model directory (its ``latest`` run, or with ``lineage`` that lineage's published run,
    see :func:`lineage_dir`). InputError naming ``field`` when it is none of these."""
    if not isinstance(path, str) or not path:
        raise InputError("must be a run or model directory", field=field)
    check_input(path, field, kind="dir")
    target = Path(lineage_dir(path, lineage) if lineage else path).expanduser()
    if (target / LATEST).exists():
        target = target / LATEST
    real = Path(os.path.realpath(target))
    if not (real / "manifest.json").is_file():
        raise InputError(f"{path} is not a run directory (no manifest.json) nor a model directory with a published "
                         f"run ('latest')", field=field)
    return real


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _enclosing_run(path: Path) -> Optional[Path]:
    for directory in (path, *path.parents):
        if all((directory / marker).is_file() for marker in RUN_MARKERS):
            return directory
    return None


def _mount_of(path: Path) -> tuple[str, str]:
    """(mount point, filesystem type) of the mount holding ``path``, from ``/proc/mounts``; ("", "") if unknown."""
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as mounts:
            entries = [line.split()[1:3] for line in mounts if len(line.split()) >= 3]
    except OSError:
        return "", ""
    best = ("", "")
    for point, kind in entries:
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)  # a space is written \040
        if (path == Path(point) or Path(point) in path.parents) and len(point) >= len(best[0]):
            best = (point, kind)
    return best


def check_writable_dir(path: object, field: str) -> Path:
    """``path`` is a writable directory or can be created as one (its nearest existing ancestor is a writable
    directory on a writable disk filesystem, not a kernel interface such as /proc or /sys); returns it resolved."""
    if not isinstance(path, str) or not path:
        raise InputError("must be a directory path", field=field)
    resolved = Path(path).expanduser().resolve()
    existing = _nearest_existing(resolved)
    if not existing.is_dir():
        where = "is a file" if existing == resolved else f"is under the file {existing}"
        raise InputError(f"{path} {where}; expected a directory (existing or to be created)", field=field)
    point, kind = _mount_of(existing)
    if kind in PSEUDO_FILESYSTEMS or (not kind and str(resolved).startswith(_PSEUDO_ROOTS)):
        raise InputError(f"{path} is on {point or 'a kernel interface'} ({kind or 'pseudo filesystem'}), which cannot "
                         f"hold files; choose a directory on a disk", field=field)
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        raise InputError(f"{existing} is on a read-only filesystem", field=field)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{existing} is not writable", field=field)
    return resolved


def check_output_dir(output_dir: object, model_name: str, run_id: str, field: str = "output_dir") -> None:
    """The training output directory can hold ``<output_dir>/<model_name>/<run_id>/``: writable or creatable (see
    :func:`check_writable_dir`), not inside an existing run directory, the model and run directories, where they
    exist, writable directories, and the model directory's ``latest``, where it exists, a link (publishing replaces
    it; a real directory there would fail only after every stage ran)."""
    resolved = check_writable_dir(output_dir, field)
    run = _enclosing_run(resolved)
    if run is not None:
        raise InputError(f"{output_dir} is inside the run directory {run}; choose a directory outside any run",
                         field=field)
    for directory in (resolved / model_name, resolved / model_name / run_id):
        check_writable_dir(str(directory), field)
    latest = resolved / model_name / LATEST
    if latest.exists() and not latest.is_symlink():
        what = "a directory" if latest.is_dir() else "a file"
        raise InputError(f"{latest} is {what}, not the link to the published run that publishing replaces; move it "
                         f"away or choose another output directory", field=field)


def check_input(path: object, field: str, kind: str = "file") -> None:
    """``path`` exists and is a ``kind`` ("file", "dir" or "any": a file or a directory, e.g. a Parquet dataset)."""
    if not isinstance(path, str) or not path:
        raise InputError(f"must be a {kind if kind != 'any' else 'file'} path", field=field)
    target = Path(path).expanduser()
    if not target.exists():
        raise InputError(f"{path} does not exist", field=field)
    if kind == "file" and not target.is_file():
        raise InputError(f"{path} is not a file", field=field)
    if kind == "dir" and not target.is_dir():
        raise InputError(f"{path} is not a directory", field=field)


def check_output_file(path: object, field: str) -> None:
    """``path`` can be written as a file: not a directory, its directory writable or creatable."""
    if not isinstance(path, str) or not path:
        raise InputError("must be a file path", field=field)
    if Path(path).expanduser().is_dir():
        raise InputError(f"{path} is a directory; expected a file", field=field)
    check_writable_dir(str(Path(path).expanduser().resolve().parent), field)
