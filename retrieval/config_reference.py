"""Generates ``docs/reference.md``: every configuration key, what it accepts, its default and what it means.

Three sources, none written twice:

* the rule table :data:`retrieval.jobs.config_checks.RULES` says what a key accepts;
* the comment block above each ``config.<key> = ...`` assignment in the code that builds the shipped configs says
  what it means; the first assignment of a key met while following the shipped configs' ``get_config`` down through
  the functions they call (``base_config``, ``default_data_config``, ``default_config``, ``default_train_config``,
  ``default_item2vec_config``, ...) is its definition, so the recipe comments of a config file that merely overrides
  a default never replace the owner's description. A key without a comment of its own shares the one of the key
  assigned on the line just above it (``user_column`` / ``item_column`` / ``timestamp_column``);
* the value at the definition (a literal), else the value the shipped configs agree on, is its default; the shipped
  configs that set another value are listed beside it.

The sources are read with :mod:`ast` and the configs are built without TensorFlow, so this runs in about a second::

    python -m retrieval.config_reference --write   # rewrite docs/reference.md
    python -m retrieval.config_reference --check   # exit 1 if docs/reference.md is stale

``tests/test_docs_reference.py`` fails when the committed page differs from what this module generates.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import io
import sys
import tokenize
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference.md"
CONFIGS = ROOT / "configs"
COMMAND = "python -m retrieval.config_reference --write"
SECTIONS = ("", "data", "eval", "index", "gate", "publish", "model", "train", "item2vec")  # page order; others last
_MISSING = object()


@dataclasses.dataclass
class Definition:
    """Where a key is first assigned, its comment and its literal value (``_MISSING`` when not a literal)."""

    key: str
    path: Path
    line: int
    comment: str
    value: Any = _MISSING
    own: bool = True  # the comment is the key's own (False: it points to the key above, whose comment it shares)


@dataclasses.dataclass
class _Source:
    """One parsed Python file: its tree, its comments by line, its functions and imported names."""

    path: Path
    tree: ast.Module
    comments: dict[int, str]  # line -> comment text (without '#'), own-line and trailing alike
    own_line: set[int]  # lines holding only a comment
    functions: dict[str, ast.FunctionDef]
    imports: dict[str, tuple[str, str]]  # local name -> (module, name), imports inside functions included

    @classmethod
    def parse(cls, path: Path) -> _Source:
        text = path.read_text()
        comments, own_line = {}, set()
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                line = token.start[0]
                comments[line] = token.string[1:].strip()
                if not token.line[:token.start[1]].strip():
                    own_line.add(line)
        tree = ast.parse(text, str(path))
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        imports = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    imports[alias.asname or alias.name] = (node.module, alias.name)
        return cls(path, tree, comments, own_line, functions, imports)

    def comment_above(self, node: ast.stmt) -> str:
        """The contiguous own-line comments right above ``node`` plus any trailing comment on its lines."""
        lines, line = [], node.lineno - 1
        while line in self.own_line:
            lines.insert(0, self.comments[line])
            line -= 1
        trailing = [self.comments[n] for n in range(node.lineno, node.end_lineno + 1)
                    if n in self.comments and n not in self.own_line]
        return " ".join(part for part in lines + trailing if part)


class _Collector:
    """Follows ``get_config`` of the shipped configs through the functions that build them (see the docstring)."""

    def __init__(self, shipped: set[Path]):
        self.shipped = shipped  # the config files themselves: their assignments define a key only if nothing else does
        self.sources: dict[Path, _Source] = {}
        self.definitions: dict[str, Definition] = {}

    def source(self, path: Path) -> _Source:
        if path not in self.sources:
            self.sources[path] = _Source.parse(path)
        return self.sources[path]

    def function(self, source: _Source, name: str) -> Optional[tuple[_Source, ast.FunctionDef]]:
        """The definition of ``name`` as seen from ``source``: a function of the file, or one it imports."""
        if name in source.functions:
            return source, source.functions[name]
        if name not in source.imports:
            return None
        module, original = source.imports[name]
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None
        target = self.source(Path(spec.origin).resolve())
        return (target, target.functions[original]) if original in target.functions else None

    def walk(self, source: _Source, function: ast.FunctionDef, prefix: str) -> None:
        variable = "config"
        previous: Optional[tuple[int, Definition]] = None  # (last line, definition) of the last leaf assigned
        for node in function.body:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                previous = None
                continue
            target, value = node.targets[0], node.value
            callee = self._callee(source, value)
            if isinstance(target, ast.Name) and target.id == variable:
                if callee is not None:
                    self.walk(*callee, prefix)
                previous = None
                continue
            path = _attribute_path(target, variable)
            if path is None:
                previous = None
                continue
            key = prefix + path
            if callee is not None:
                self.walk(*callee, key + ".")
                previous = None
                continue
            if _is_config_dict(value):
                previous = None
                continue
            comment = source.comment_above(node)
            if not comment and previous is not None and previous[0] == node.lineno - 1:
                comment, own = (f"See `{previous[1].key}`." if previous[1].own else previous[1].comment), False
            else:
                own = True
            definition = Definition(key, source.path, node.lineno, comment, _literal(value), own)
            known = self.definitions.get(key)
            if known is None or (known.path in self.shipped and source.path not in self.shipped):
                self.definitions[key] = definition
            previous = (node.end_lineno, definition)

    def _callee(self, source: _Source, value: ast.expr) -> Optional[tuple[_Source, ast.FunctionDef]]:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            return self.function(source, value.func.id)
        return None


def _attribute_path(target: ast.expr, variable: str) -> Optional[str]:
    """``config.a.b`` -> ``"a.b"`` when rooted at ``variable``; else None."""
    parts = []
    while isinstance(target, ast.Attribute):
        parts.insert(0, target.attr)
        target = target.value
    return ".".join(parts) if parts and isinstance(target, ast.Name) and target.id == variable else None


def _is_config_dict(value: ast.expr) -> bool:
    return isinstance(value, ast.Call) and getattr(value.func, "attr", getattr(value.func, "id", "")) == "ConfigDict"


def _literal(value: ast.expr) -> Any:
    try:
        return ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


def shipped_configs() -> list[str]:
    """Names of the shipped configs: the files of ``configs/`` that define ``get_config``."""
    return sorted(path.stem for path in CONFIGS.glob("*.py")
                  if "get_config" in _Source.parse(path).functions)


def _values(name: str) -> dict[str, Any]:
    from retrieval.jobs.config_checks import flatten

    return dict(flatten(importlib.import_module(f"configs.{name}").get_config().to_dict()))


def _show(value: Any) -> str:
    if value is _MISSING:
        return "-"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, list):
        value = tuple(value)
    return f"`{value!r}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def generate() -> str:
    """The text of ``docs/reference.md``."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from retrieval.jobs.config_checks import RULES

    names = shipped_configs()
    collector = _Collector({(CONFIGS / f"{name}.py").resolve() for name in names})
    for name in names:
        source = collector.source((CONFIGS / f"{name}.py").resolve())
        collector.walk(source, source.functions["get_config"], "")
    values = {name: _values(name) for name in names}
    keys = list(collector.definitions)
    keys += [key for name in names for key in values[name] if key not in keys]
    keys += [key for key in RULES if key not in keys]
    keys = list(dict.fromkeys(keys))
    sections: dict[str, list[str]] = {}
    for key in keys:
        sections.setdefault(key.split(".")[0] if "." in key else "", []).append(key)

    out = [
        "# Configuration reference",
        "",
        f"Generated by `{COMMAND}` from the rule table `RULES` in `retrieval/jobs/config_checks.py` (what a key "
        "accepts) and the comment above each key's first assignment in the code that builds the shipped configs "
        "(what it means, and its default). Do not edit by hand: change the comment or the rule and regenerate; "
        "`tests/test_docs_reference.py` fails while this page is stale.",
        "",
        "Override any key on the command line, `--config.<key>=<value>` (e.g. `--config.train.epochs=5`), or in "
        "Python with `configs.base.override(config, {\"train.epochs\": 5})`. Every key is checked before any work "
        "starts; a value outside what the key accepts exits 2 with one line naming the key.",
        "",
        "Shipped configs: " + ", ".join(f"`configs/{name}.py`" for name in names) + ". The column *set by* lists "
        "the shipped configs whose value differs from the default; a key absent from a config is not listed.",
        "",
    ]
    order = {name: position for position, name in enumerate(SECTIONS)}
    for section, section_keys in sorted(sections.items(), key=lambda item: order.get(item[0], len(order))):
        title = f"`{section}`" if section else "top level"
        files = sorted({_relative(collector.definitions[k].path) for k in section_keys if k in collector.definitions})
        out += [f"## {title}", "", "Defined in " + ", ".join(f"`{f}`" for f in files) + "." if files else
                "Not set by any shipped config.", "",
                "| key | default | accepts | set by | meaning |", "|---|---|---|---|---|"]
        for key in section_keys:
            definition = collector.definitions.get(key)
            present = {name: values[name][key] for name in names if key in values[name]}
            default = definition.value if definition is not None else _MISSING
            if default is _MISSING and present and len({repr(v) for v in present.values()}) == 1:
                default = next(iter(present.values()))
            default = tuple(default) if isinstance(default, list) else default
            differs = [f"{name}: {_show(v)}" for name, v in present.items()
                       if default is _MISSING or repr(tuple(v) if isinstance(v, list) else v) != repr(default)]
            rule = RULES.get(key)
            accepts = rule.allowed() if rule is not None else "**no rule** (validation refuses the config)"
            meaning = definition.comment if definition is not None and definition.comment else "(undocumented)"
            out.append(f"| `{key}` | {_cell(_show(default))} | {_cell(accepts)} | {_cell('; '.join(differs))} | "
                       f"{_cell(meaning)} |")
        out.append("")
    return "\n".join(out)


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def stale() -> bool:
    """Whether ``docs/reference.md`` differs from :func:`generate`'s text."""
    return not REFERENCE.exists() or REFERENCE.read_text() != generate()


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        REFERENCE.write_text(generate())
        print(f"wrote {_relative(REFERENCE)}")
        return 0
    if argv == ["--check"]:
        if stale():
            print(f"{_relative(REFERENCE)} is stale: run `{COMMAND}` and commit it")
            return 1
        return 0
    if not argv:
        sys.stdout.write(generate())
        return 0
    print("usage: python -m retrieval.config_reference [--write | --check]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
