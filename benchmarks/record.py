"""Recording the rows of a benchmark run outside ``run_all`` (e.g. ``bench_index`` at 10M items, ``bench_serving``
at 1M and 10M), so that every published figure is machine-readable.

``record`` appends one entry to ``results.json``'s ``separate_runs`` list (``run_all`` keeps that list when it
rewrites the file): the benchmark's name, the command, the date, where the figures come from (``source``), the
machine facts of ``run_all.machine_facts`` and the rows as the benchmark returned them, then rewrites ``RESULTS.md``
from the file (``benchmarks.results_page``: the latest run of each command). Rows measured before this existed are
backfilled with ``source`` naming where they were copied from; what a run shows and why goes to ``JOURNAL.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional, Sequence

from benchmarks import results_page
from benchmarks.run_all import DEFAULT_OUTPUT, machine_facts
from retrieval.artifacts import read_json, write_json

SEPARATE_RUNS = "separate_runs"


def add_record_flag(parser: argparse.ArgumentParser) -> None:
    """``--record/--no-record``; ``should_record`` resolves the default (record unless ``--smoke``)."""
    parser.add_argument("--record", action=argparse.BooleanOptionalAction, default=None,
                        help="append the rows to benchmarks/results.json and rewrite RESULTS.md (default: unless "
                             "--smoke)")


def should_record(args: argparse.Namespace) -> bool:
    return bool(args.record) if args.record is not None else not getattr(args, "smoke", False)


def separate_runs(results_json: Path) -> list[dict]:
    """The ``separate_runs`` entries of ``results_json`` (none if the file does not exist)."""
    return list(read_json(results_json).get(SEPARATE_RUNS, [])) if results_json.is_file() else []


def record(benchmark: str, rows: Sequence[dict], command: str, results_md: Path = DEFAULT_OUTPUT,
           source: str = "measured by the command", facts: Optional[dict] = None, note: str = "") -> dict:
    """Appends ``rows`` to ``results.json`` (beside ``results_md``) and rewrites ``results_md`` from it (module
    docstring); returns the entry."""
    facts = facts if facts is not None else machine_facts()
    entry = {"benchmark": benchmark, "command": command, "date": facts.get("date"), "source": source,
             "note": note, "machine": facts, "rows": [dict(row) for row in rows]}
    results_json = results_md.parent / "results.json"
    data = read_json(results_json) if results_json.is_file() else {}
    data[SEPARATE_RUNS] = separate_runs(results_json) + [entry]
    write_json(results_json, data)
    results_page.write(results_json, results_md)
    return entry
