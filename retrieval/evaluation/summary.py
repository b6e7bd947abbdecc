"""The evaluation as a run prints it on stdout: one headline table that fits a 120-column terminal, and one line
when the model trails the best baseline.

``report.md`` holds every metric at every cut-off; stdout gets three columns, the ones the README's table shows:
recall and NDCG at the gate's cut-off (the second of ``eval.ks`` when there are several, else the only one) and
recall at the largest cut-off, each with its 95% bootstrap interval, for the model and every baseline. Below the
table, when the model is below the best baseline (the best on the first column) on the first column or on NDCG,
one line of at most 120 columns says so with the paired difference and its interval, e.g. ``model trails rp3beta
(paired diff): recall@20 -0.0078 [-0.0101, -0.0055], NDCG@20 -0.0053 [-0.0065, -0.0040]`` (the two systems' values
are in the table above it; without a paired difference, ``recall@20 0.1695 vs 0.1773``); the gate refuses such a
model only with ``gate.beat_best_baseline``.
"""

from __future__ import annotations

from typing import Mapping, Optional

from retrieval.evaluation.report import _number, _systems, _table, _with_ci, headline_k

WIDTH = 120  # columns of the terminal the table must fit


def headline_columns(metrics: Mapping) -> list[str]:
    """The flat metric names of the table's columns (see the module docstring)."""
    ks = list(metrics["protocol/ks"])
    k = headline_k(ks)
    return list(dict.fromkeys([f"recall@{k}", f"ndcg@{k}", f"recall@{max(ks)}"]))


def best_baseline(metrics: Mapping, metric: str) -> Optional[str]:
    """The evaluated baseline with the highest ``metric`` (the first listed of equals; None: no baseline)."""
    values = {name: metrics.get(f"baseline/{name}/{metric}") for name in metrics.get("protocol/baselines", [])}
    values = {name: value for name, value in values.items() if value is not None}
    return max(values, key=values.get) if values else None


def trailing_line(metrics: Mapping) -> Optional[str]:
    """The line saying the model trails the best baseline (see the module docstring); None when it does not."""
    columns = headline_columns(metrics)
    best = best_baseline(metrics, columns[0])
    if best is None:
        return None
    parts, paired = [], False
    for metric in dict.fromkeys(columns[:2]):
        model, other = metrics.get(metric), metrics.get(f"baseline/{best}/{metric}")
        if model is None or other is None or model >= other:
            continue
        diff = f"paired/{best}/{metric}_diff"
        paired |= diff in metrics
        value = _with_ci(metrics, diff) if diff in metrics else f"{_number(model)} vs {_number(other)}"
        parts.append(f"{metric.replace('ndcg', 'NDCG')} {value}")
    return f"model trails {best}{' (paired diff)' if paired else ''}: " + ", ".join(parts) if parts else None


def headline_table(metrics: Mapping) -> str:
    """The Markdown headline table of an evaluation's flat metrics, and the line saying the model trails the best
    baseline when it does (see the module docstring)."""
    columns = headline_columns(metrics)
    rows = [[name] + [_with_ci(metrics, f"{prefix}{column}") for column in columns]
            for name, prefix in _systems(metrics) if f"{prefix}{columns[0]}" in metrics]
    table = "\n".join(_table(["system"] + [c.replace("ndcg", "NDCG") for c in columns], rows))
    trailing = trailing_line(metrics)
    return f"{table}\n\n{trailing}" if trailing else table
