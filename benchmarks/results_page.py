"""Writes ``benchmarks/RESULTS.md``, the current measurements, from ``results.json``: one section per benchmark.

``results.json`` holds the last ``run_all`` (``benchmarks``, measured on its ``machine``) and every benchmark command
recorded on its own (``separate_runs``, :mod:`benchmarks.record`). Per benchmark the page shows the latest run of
each distinct command (``--record``/``--no-record`` aside), newest first, with its commit, date and the machine's load
average when it started. Nothing on the page is written by hand: the dated journal, with the analyses behind the
figures, is ``benchmarks/JOURNAL.md``. ``run_all`` and ``record`` rewrite the page after every run; by hand::

    python -m benchmarks.results_page --write   # rewrite RESULTS.md
    python -m benchmarks.results_page --check   # exit 1 if RESULTS.md is stale (tests/benchmarks/test_results_page.py)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
from pathlib import Path
from typing import Optional, Sequence

from retrieval.artifacts import read_json, write_text

HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results.json"
PAGE = HERE / "RESULTS.md"
COMMAND = "python -m benchmarks.results_page --write"
RUN_ALL = "python -m benchmarks.run_all"
_RECORD_FLAGS = ("--record", "--no-record")
# results.json stores keys sorted: the columns that name a row come first again.
LEADING = ("name", "dataset", "system", "recipe")


@dataclasses.dataclass(frozen=True)
class Run:
    """One benchmark's rows from one command, with where and when they were measured."""

    benchmark: str
    command: str
    date: str
    commit: str
    load: Optional[Sequence[float]]
    rows: tuple
    note: str = ""
    error: Optional[str] = None


def _command(command: str) -> str:
    """The command without the flags that only say whether to record it."""
    return " ".join(part for part in command.split() if part not in _RECORD_FLAGS)


def runs(data: dict) -> list[Run]:
    """Every run of ``data`` (``results.json``): the ``run_all`` benchmarks, then the separately recorded ones."""
    machine = data.get("machine", {})
    command = RUN_ALL + (" --smoke" if data.get("smoke") else "")
    found = [Run(b["name"], command, str(machine.get("date", "")), str(machine.get("git_commit", "")),
                 machine.get("load_average_1_5_15"), tuple(b.get("rows", ())), error=b.get("error"))
             for b in data.get("benchmarks", [])]
    for entry in data.get("separate_runs", []):
        facts = entry.get("machine", {})
        source = entry.get("source", "")
        notes = [entry.get("note", ""), "" if source in ("", "measured by the command") else f"Source: {source}."]
        found.append(Run(entry["benchmark"].removeprefix("bench_"), _command(entry.get("command", "")),
                         str(entry.get("date") or facts.get("date", "")), str(facts.get("git_commit", "")),
                         facts.get("load_average_1_5_15"), tuple(entry.get("rows", ())),
                         note=" ".join(n for n in notes if n)))
    return found


def latest(all_runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Per benchmark (sorted), the latest run of each distinct command, newest first (a later entry wins a tie)."""
    newest: dict[tuple[str, str], Run] = {}
    for run in all_runs:
        key = (run.benchmark, run.command)
        if key not in newest or run.date >= newest[key].date:
            newest[key] = run
    by_benchmark: dict[str, list[Run]] = {}
    for (benchmark, _), run in sorted(newest.items()):
        by_benchmark.setdefault(benchmark, []).append(run)
    return {name: sorted(found, key=lambda r: r.date, reverse=True) for name, found in by_benchmark.items()}


def _description(benchmark: str, data: dict) -> str:
    """The first sentence of the benchmark module's docstring (read without importing the module), else what
    ``run_all`` stored."""
    path = HERE / f"bench_{benchmark}.py"
    if not path.is_file():
        return next((b.get("description", "") for b in data.get("benchmarks", []) if b["name"] == benchmark), "")
    paragraph = " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").strip().split("\n\n")[0].split())
    return paragraph.split(". ")[0].rstrip(".") + "." if paragraph else ""


def _table(rows: Sequence[dict]) -> str:
    """The Markdown table of ``rows``, the :data:`LEADING` columns first."""
    return markdown_table([{**{key: row[key] for key in LEADING if key in row}, **row} for row in rows])


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _columns(rows: Sequence[dict]) -> list[str]:
    """Keys in order of first appearance, ``k_min``/``k_max`` folded into ``k``, ``peak_rss_mb`` after the first
    ``*_per_s`` column."""
    keys = list(dict.fromkeys(key for row in rows for key in row))
    ranged = {key for key in keys if f"{key}_min" in keys and f"{key}_max" in keys}
    columns = [key for key in keys if not any(key in (f"{k}_min", f"{k}_max") for k in ranged)]
    throughput = next((key for key in columns if key.endswith("_per_s")), None)
    if throughput is not None and "peak_rss_mb" in columns:
        columns.remove("peak_rss_mb")
        columns.insert(columns.index(throughput) + 1, "peak_rss_mb")
    return columns


CENTRES = (" mean", " median")  # a ranged key ending so names its centre itself (bench_cold_start's means)


def _ranged_header(column: str) -> str:
    """The header of a column with a range: the key names its centre (``"... mean"``), else it is a median."""
    return f"{column} (min-max)" if column.endswith(CENTRES) else f"{column} (median, min-max)"


def markdown_table(rows: Sequence[dict]) -> str:
    """A Markdown table of ``rows``: keys in order of first appearance, a key ``k`` with ``k_min`` and ``k_max``
    beside it shown as ``centre (min-max)`` in one column (the median, unless the key names its centre: ``"k
    mean"``), ``peak_rss_mb`` right after the first ``*_per_s``."""
    columns = _columns(rows)
    header = [_ranged_header(c) if any(f"{c}_min" in r and f"{c}_max" in r for r in rows) else c
              for c in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for c in columns:
            cell = _cell(row.get(c))
            if f"{c}_min" in row and f"{c}_max" in row:
                cell += f" ({_cell(row[f'{c}_min'])}-{_cell(row[f'{c}_max'])})"
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _load(load: Optional[Sequence[float]]) -> str:
    return ", ".join(f"{x:g}" for x in load) if load else "not recorded"


def render(data: dict) -> str:
    """The text of RESULTS.md for ``data`` (the content of ``results.json``)."""
    lines = ["# Benchmark results", "",
             f"The current figures, generated by `{COMMAND}` from `benchmarks/results.json`: per benchmark, the "
             "latest run of each command, newest first, with its commit, date and the machine's load average (1, 5 "
             "and 15 minutes) when it started. Medians of repeated runs with min-max where a benchmark repeats; "
             "ratios are against the reference measured in the same run. Each module's docstring says what it "
             "measures and how. What was measured when, and why: [JOURNAL.md](JOURNAL.md).", ""]
    if data.get("smoke"):
        lines += [f"The `{RUN_ALL}` rows are a smoke run (tiny sizes: not representative).", ""]
    machine = data.get("machine", {})
    if machine:
        lines += [f"## Machine of the last `{RUN_ALL}`", "", "| fact | value |", "|---|---|"]
        lines += [f"| {key} | {', '.join(map(str, value)) if isinstance(value, list) else value} |"
                  for key, value in machine.items()]
        lines.append("")
    for benchmark, found in latest(runs(data)).items():
        lines += [f"## {benchmark}", ""]
        description = _description(benchmark, data)
        if description:
            lines += [description, ""]
        for run in found:
            lines += [f"`{run.command}`: {run.date}, commit {run.commit or 'not recorded'}, load average "
                      f"{_load(run.load)}.", ""]
            if run.note:
                lines += [run.note, ""]
            if run.error:
                lines += ["**Failed:**", "", "```", run.error.rstrip(), "```", ""]
            else:
                lines += [_table(run.rows) if run.rows else "No rows.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def write(results_json: Path = RESULTS_JSON, page: Path = PAGE) -> Path:
    """Rewrites ``page`` from ``results_json``; returns it."""
    write_text(page, render(read_json(results_json)))
    return page


def is_current(results_json: Path = RESULTS_JSON, page: Path = PAGE) -> bool:
    """Whether ``page`` is what :func:`write` would write."""
    return page.is_file() and page.read_text() == render(read_json(results_json))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite benchmarks/RESULTS.md")
    action.add_argument("--check", action="store_true", help="exit 1 if benchmarks/RESULTS.md is stale")
    args = parser.parse_args(argv)
    if args.write:
        print(write())
        return 0
    if is_current():
        return 0
    print(f"{PAGE} is stale: run {COMMAND}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
