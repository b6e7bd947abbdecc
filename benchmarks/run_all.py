"""Runs every benchmark of this folder and writes the raw rows as ``results.json`` (keeping its ``separate_runs``,
written by ``benchmarks.record``), then ``RESULTS.md`` beside it from that file (``benchmarks.results_page``).

A benchmark is a module ``benchmarks/bench_<name>.py`` exposing ``run(smoke: bool) -> list[dict]``. Each runs in
this process, one after the other; one that fails (import error, exception) gets its error in its section and the
others still run. Rows are rendered as they are, with two conventions: a key ``k`` with ``k_min`` and ``k_max``
beside it is shown as ``median (min-max)`` in one column, and ``peak_rss_mb`` is placed right after the first
throughput column (``*_per_s``): ``results_page.markdown_table``. Ratios are whatever each benchmark measured against its own reference in the same
run. ``--smoke`` runs the tiny sizes and, unless ``--output`` is given, writes to a fresh temporary folder, never
over the real results.

    python -m benchmarks.run_all [--smoke] [--only=data,training] [--output=benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable, Optional, Sequence

from absl import logging

from benchmarks import results_page
from benchmarks.results_page import HERE
from retrieval.artifacts import read_json, write_json

DEFAULT_OUTPUT = HERE / "RESULTS.md"
PACKAGES = ("tensorflow", "tf-keras", "tensorflow-recommenders", "faiss-cpu", "gensim", "numpy", "pandas")


def discover() -> list[str]:
    """Names of the benchmarks in this folder (``bench_<name>.py`` -> ``<name>``), sorted."""
    return sorted(path.stem[len("bench_"):] for path in HERE.glob("bench_*.py"))


def _first_line(path: str, prefix: str) -> Optional[str]:
    try:
        with open(path) as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(prefix)), None)
    except OSError:
        return None


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _git_commit() -> str:
    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=HERE, capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


def machine_facts() -> dict:
    """CPU, cores, memory, load, software versions, date and commit: what a reader needs to compare numbers."""
    mem_kb = _first_line("/proc/meminfo", "MemTotal")
    memory = (int(mem_kb.split()[0]) * 1024 if mem_kb else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": _first_line("/proc/cpuinfo", "model name") or platform.processor() or platform.machine(),
            "logical_cores": os.cpu_count(), "usable_cores": usable, "memory_gib": round(memory / 2**30, 1),
            "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()], "os": platform.platform(),
            "python": platform.python_version(), **{package: _version(package) for package in PACKAGES},
            "git_commit": _git_commit()}


def _load(name: str):
    """The module ``benchmarks.bench_<name>``."""
    return importlib.import_module(f"benchmarks.bench_{name}")


def run_benchmark(name: str, smoke: bool, load: Callable[[str], object] = _load) -> dict:
    """Loads the benchmark and calls its ``run(smoke)``; the result holds the module's first docstring line, the rows
    (or the error, when loading or running raised) and the wall time."""
    logging.info("benchmark %s: running%s", name, " (smoke)" if smoke else "")
    start = time.perf_counter()
    result = {"name": name, "description": "", "rows": [], "error": None}
    try:
        module = load(name)
        result["description"] = (module.__doc__ or "").strip().split("\n")[0]
        result["rows"] = [dict(row) for row in module.run(smoke)]
    except Exception:  # a failing benchmark is reported in its section, the others still run
        result["error"] = traceback.format_exc(limit=-8)
        logging.error("benchmark %s failed:\n%s", name, result["error"])
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def run_all(names: Sequence[str], smoke: bool, output: Path) -> Path:
    """Runs the named benchmarks and writes ``output`` (RESULTS.md) and ``results.json`` beside it."""
    facts = machine_facts()
    results = [run_benchmark(name, smoke) for name in names]
    facts["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results_json = output.parent / "results.json"
    kept = {key: value for key, value in (read_json(results_json) if results_json.is_file() else {}).items()
            if key == "separate_runs"}  # rows of benchmark commands run on their own (benchmarks.record)
    write_json(results_json, {"machine": facts, "smoke": smoke, "benchmarks": results, **kept})
    return results_page.write(results_json, output)


def main(argv: Optional[Sequence[str]] = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; writes to a temporary folder by default")
    parser.add_argument("--only", default="", help="comma-separated benchmark names (data, training, ...)")
    parser.add_argument("--output", type=Path, default=None, help=f"RESULTS.md path (default {DEFAULT_OUTPUT})")
    args = parser.parse_args(argv)
    available = discover()
    names = [n.strip().removeprefix("bench_") for n in args.only.split(",") if n.strip()] or available
    unknown = sorted(set(names) - set(available))
    if unknown:
        parser.error(f"unknown benchmarks {unknown}; available: {available}")
    output = args.output
    if output is None:
        output = Path(tempfile.mkdtemp(prefix="bench-smoke-")) / "RESULTS.md" if args.smoke else DEFAULT_OUTPUT
    logging.set_verbosity(logging.INFO)
    return run_all(names, args.smoke, output)


if __name__ == "__main__":
    print(main(sys.argv[1:]))
