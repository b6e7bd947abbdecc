"""The evaluation as a run prints it on stdout: one headline table that fits a 120-column terminal.

``report.md`` holds every metric at every cut-off; stdout gets three columns, the ones the README's table shows:
recall and NDCG at the gate's cut-off (the second of ``eval.ks`` when there are several, else the only one) and
recall at the largest cut-off, each with its 95% bootstrap interval, for the model and every baseline.
"""

from __future__ import annotations

from typing import Mapping

from retrieval.evaluation.report import _systems, _table, _with_ci

WIDTH = 120  # columns of the terminal the table must fit


def headline_columns(metrics: Mapping) -> list[str]:
    """The flat metric names of the table's columns (see the module docstring)."""
    ks = list(metrics["protocol/ks"])
    k = ks[min(1, len(ks) - 1)]
    return list(dict.fromkeys([f"recall@{k}", f"ndcg@{k}", f"recall@{max(ks)}"]))


def headline_table(metrics: Mapping) -> str:
    """The Markdown headline table of an evaluation's flat metrics (see the module docstring)."""
    columns = headline_columns(metrics)
    rows = [[name] + [_with_ci(metrics, f"{prefix}{column}") for column in columns]
            for name, prefix in _systems(metrics) if f"{prefix}{columns[0]}" in metrics]
    return "\n".join(_table(["system"] + [c.replace("ndcg", "NDCG") for c in columns], rows))
