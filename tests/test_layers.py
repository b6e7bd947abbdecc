"""The package's floors: every import of ``retrieval`` points down the declared order, never up or sideways.

A room is a top-level module of ``retrieval/`` or one of its sub-packages; its imports are read from the source
(``ast``), lazy ones inside functions included, so an arrow up cannot hide in a function body. A new room must be
placed on a floor here (docs/design.md, "Floors"), which is where its place gets decided.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]

FLOORS = (  # ground first; a room imports rooms of lower floors only
    ("errors", "quiet", "periodic", "processes", "memory", "artifacts", "optimizers"),
    ("locations", "config_keys", "checkpoints", "resumable_stopping", "sampling"),
    ("cli", "settings", "data", "losses"),
    ("parameter_server",),
    ("distributed",),
    ("models",),
    ("export", "training"),
    ("index",),
    ("serving",),
    ("evaluation",),
    ("jobs",),
)
OUTSIDE = ("pipelines", "benchmarks", "tools", "configs", "tests", "deploy")  # above the package: never imported by it


def rooms(package: Path) -> dict[str, list[Path]]:
    """Room name -> its source files: each top-level module, and each sub-package with all files under it."""
    found: dict[str, list[Path]] = {}
    for path in sorted(package.iterdir()):
        if path.suffix == ".py" and path.name != "__init__.py":
            found[path.stem] = [path]
        elif path.is_dir() and (path / "__init__.py").exists():
            found[path.name] = sorted(path.rglob("*.py"))
    return found


def imported_modules(path: Path) -> Iterator[str]:
    """Absolute module names that ``path`` imports (``from a import b`` yields ``a`` and ``a.b``: b may be a
    module)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def arrows_against(package: Path, floors: Sequence[Sequence[str]]) -> list[str]:
    """Every import of ``package`` that breaks ``floors`` (a room importing its own floor or one above, or a module
    outside the package that sits above it), and every room that no floor places, one line each."""
    name = package.name
    level = {room: index for index, floor in enumerate(floors) for room in floor}
    found = rooms(package)
    problems = [f"{room}: on no floor" for room in found if room not in level]
    for room, files in found.items():
        for path in files:
            for module in imported_modules(path):
                parts = module.split(".")
                if parts[0] in OUTSIDE:
                    problems.append(f"{path.relative_to(package.parent)} imports {module} (outside the package)")
                if parts[0] != name or len(parts) < 2 or parts[1] not in found or parts[1] == room:
                    continue
                target = parts[1]
                if room in level and target in level and level[target] >= level[room]:
                    problems.append(f"{path.relative_to(package.parent)} imports {module}: floor {level[room]} "
                                    f"to floor {level[target]}")
    return sorted(set(problems))


def test_every_import_of_the_package_points_down_its_floors():
    assert arrows_against(ROOT / "retrieval", FLOORS) == []


def test_an_arrow_up_sideways_or_out_and_an_unplaced_room_are_each_reported(tmp_path):
    package = tmp_path / "pkg"
    (package / "wing").mkdir(parents=True)
    for path, text in {"__init__.py": "", "ground.py": "import os\n", "wing/__init__.py": "",
                       "wing/room.py": "from pkg import ground\n", "side.py": "import pkg.other\n",
                       "other.py": "def f():\n    from pkg.wing import room\n", "stray.py": "import pipelines.train\n"
                       }.items():
        (package / path).write_text(text)
    floors = (("ground",), ("wing",), ("side", "other"))
    assert arrows_against(package, floors) == [
        "pkg/side.py imports pkg.other: floor 2 to floor 2",
        "pkg/stray.py imports pipelines.train (outside the package)",
        "stray: on no floor",
    ]
    # the lazy import in a function body points up once the floors say so
    assert "pkg/other.py imports pkg.wing: floor 1 to floor 2" in arrows_against(
        package, (("ground",), ("other",), ("wing",), ("side",), ("stray",)))
