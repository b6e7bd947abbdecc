"""Output of an evaluation: ``metrics.json`` (flat keys), ``report.md`` (tables), ``recall_at_k.png`` and, beside
it, ``training_curves.png``.

Everything is rendered from the flat metrics dict that ``evaluator.evaluate`` / ``runs.evaluate_run`` return (the
systems and cut-offs are read from its ``protocol/*`` keys), and written atomically through ``retrieval.artifacts``,
so a reader sees the previous report or the new one, never a mix. The training curves come from the train stage's
summary (``stages/train.json``: the per-epoch history of the tuning phase, with its validation metric, and of the
refit), when the run directory holds one that recorded them. The plots use matplotlib's object API on the Agg canvas
(no pyplot global state, no display needed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Optional, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from retrieval import artifacts

ALL_METRICS = ("recall", "ndcg", "hit", "precision", "mrr", "map", "coverage", "avg_popularity", "tail_share")
TRAINING_PLOT = "training_curves.png"  # in the run directory, beside RunPaths.plot
ITEM_ITEM = ("item_knn", "rp3beta", "ease")  # baselines whose lead the teacher (train.teacher_items) distils


def _systems(metrics: Mapping) -> list[tuple[str, str]]:
    """(display name, key prefix) of every evaluated system, the model first."""
    return ([("model", "")] + [(name, f"baseline/{name}/") for name in metrics.get("protocol/baselines", [])]
            + [(name, f"{name}/") for name in metrics.get("protocol/others", [])])


def _number(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.4f}" if abs(value) < 100 else f"{value:.1f}"


def _with_ci(metrics: Mapping, key: str) -> str:
    low, high = metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high")
    text = _number(metrics.get(key))
    return f"{text} [{_number(low)}, {_number(high)}]" if low is not None else text


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _headline(metrics: Mapping, group: str) -> list[str]:
    ks = metrics["protocol/ks"]
    header = ["system"] + [f"{m}@{k}" for m in ("recall", "ndcg") for k in ks]
    rows = [[name] + [_with_ci(metrics, f"{prefix}{group}{m}@{k}") for m in ("recall", "ndcg") for k in ks]
            for name, prefix in _systems(metrics) if f"{prefix}{group}recall@{ks[0]}" in metrics]
    return _table(header, rows)


def headline_k(ks: Sequence[int]) -> int:
    """The headline's cut-off: the second of the sorted cut-offs when there are several, else the only one (20 for
    the default 10, 20, 50, 100); also the cut-off the baselines are tuned at (``baseline_tuning``)."""
    ks = sorted({int(k) for k in ks})
    return ks[min(1, len(ks) - 1)]


def _seconds(value) -> str:
    return "–" if value is None else f"{value:.1f}"


def _baselines(metrics: Mapping) -> list[str]:
    """The baselines' section: where they were tuned, each one's parameters, validation metric, points tried and
    times (``baseline_tuning``, ``evaluator``), the notes of the tuning, and the best baseline against the model."""
    names = [name for name in metrics.get("protocol/baselines", []) if f"baseline/{name}/fit_seconds" in metrics]
    if not names:
        return []
    validation = sorted({key.rsplit("/", 1)[1] for key in metrics if key.startswith("baseline/")
                         and key.rsplit("/", 2)[1] == "validation"})
    metric = validation[0] if validation else "recall"
    rows, notes = [], []
    for name in names:
        prefix = f"baseline/{name}/"
        params = " ".join(f"{key[len(prefix) + 7:]}={value:g}" for key, value in metrics.items()
                          if key.startswith(prefix + "params/"))
        tried = (f"{metrics[prefix + 'tuning/tried']} of {metrics[prefix + 'tuning/grid']}"
                 if prefix + "tuning/grid" in metrics else "–")
        rows.append([name, params or "–", _number(metrics.get(f"{prefix}validation/{metric}")), tried,
                     _seconds(metrics.get(prefix + "tuning_seconds")), _seconds(metrics.get(prefix + "fit_seconds"))])
        notes += [f"- {name}: {metrics[prefix + key]}" for key in ("tuning/note", "note") if metrics.get(prefix + key)]
    lines = ["", "## Baselines", "",
             f"**Tuning:** {metrics.get('protocol/baseline_tuning', 'none (no tunable baseline)')}.", ""]
    lines += _table(["baseline", "parameters", f"validation {metric}", "points tried", "tuning (s)", "fit (s)"], rows)
    lines += [""] + notes if notes else []
    k = headline_k(metrics["protocol/ks"])
    scored = {name: metrics[f"baseline/{name}/recall@{k}"] for name in names
              if f"baseline/{name}/recall@{k}" in metrics}
    if scored and f"recall@{k}" in metrics:
        best = max(scored, key=scored.get)
        model = metrics[f"recall@{k}"]
        lines += ["", f"Best baseline on recall@{k}: {best} ({_number(scored[best])}); the model: {_number(model)} "
                  f"({'trails it' if model < scored[best] else 'at or above it'})."]
        if model < scored[best] and best in ITEM_ITEM:
            lines += ["", "Where an item-item baseline leads on set data, `--config.train.teacher_items=10 "
                      "--config.train.teacher_weighting=score` distils the run's tuned RP3beta into the towers "
                      "(docs/objectives.md, \"Which objective, for which data\")."]
    return lines


def _towers_chosen(tuned: Mapping) -> list[str]:
    """What the tuning tried on the automatic holdout besides the configured towers (the teacher,
    ``train.variants``), what it kept (``retrieval.jobs.tuning.tune``) and whether the refit followed; nothing when it
    tried nothing and the refit was not skipped."""
    trials = [f"with the {trial['teacher']} teacher{' and variant ' + trial['variant'] if trial.get('variant') else ''} "
              f"{_number(trial['with'])} against {_number(trial['without'])} without "
              f"({'kept' if trial['kept'] else 'not kept'})" for trial in [tuned.get("teacher_trial")] if trial]
    trials += [f"without a variant {_number(tuned['without_variant'])}"] if tuned.get("variant_trials") else []
    trials += [f"variant {trial['variant']} {_number(trial['metric'])} ({'kept' if trial['kept'] else 'not kept'})"
               if trial["tried"] else f"variant {trial['variant']} not tried ({trial.get('reason', 'over budget')})"
               for trial in tuned.get("variant_trials", [])]
    skipped = tuned.get("refit_skipped")
    if not trials and not skipped:
        return []
    refit = (f"the refit was skipped ({skipped}): the tuned towers are the final model" if skipped
             else "the refit follows it")
    tried = f"Validation metric of each tuning: {'; '.join(trials)}. " if trials else ""
    return ["", "## Towers chosen on the holdout", "",
            f"{tried}Kept: {tuned.get('variant') or 'the configured towers'}"
            f"{' with the teacher' if tuned.get('teacher') else ''}, best epoch {tuned.get('best_epoch')} "
            f"({_number(tuned.get('best_metric'))}); {refit}."]


def _cold_items(metrics: Mapping) -> list[str]:
    """The cold catalogue items' section (``evaluation.cold_items``), when the catalogue has any."""
    if not metrics.get("count/cold_items/items"):
        return []
    ks = metrics["protocol/ks"]
    lines = ["", "## Cold items (catalogue items without training interactions)", "",
             f"{metrics['count/cold_items/test_pairs']} test pairs with one of the {metrics['count/cold_items/items']} "
             f"cold items, {metrics['count/cold_items/eval_users']} users with a training history; not in the "
             "headline. Content baseline: TF-IDF item features, the user's mean profile, cosine.", ""]
    users = metrics.get("count/cold_items/eval_users")
    if not users:
        return lines + ["No such test pair."]
    least = metrics.get("protocol/cold_items/min_interval_users", 0)
    if users < least and metrics.get("protocol/bootstrap_resamples"):
        lines += [f"Too few pairs for intervals: {users} users with a cold test pair, fewer than the {least} a 95% "
                  "bootstrap interval needs to mean anything; the values below are means without intervals, too "
                  "few to compare the systems.", ""]
    rows = []
    for space, label in (("among_cold/", "among cold items"), ("", "in the whole catalogue")):
        for system, prefix in (("model", ""), ("content", "content/")):
            rows.append([label, system] + [_with_ci(metrics, f"cold_items/{space}{prefix}{m}@{k}")
                                           for m in ("recall", "ndcg") for k in ks])
        if f"cold_items/{space}paired/content/recall@{ks[0]}_diff" in metrics:
            rows.append([label, "model minus content"] + [
                _with_ci(metrics, f"cold_items/{space}paired/content/{m}@{k}_diff") for m in ("recall", "ndcg")
                for k in ks])
    return lines + _table(["ranked", "system"] + [f"{m}@{k}" for m in ("recall", "ndcg") for k in ks], rows)


def render_markdown(metrics: Mapping, train_summary: Optional[Mapping] = None) -> str:
    """The Markdown report: protocol, headline table with intervals, the baselines' tuning, the towers the tuning
    chose (from the train stage's ``train_summary``), all metrics, paired tests, cold start, counts."""
    ks, systems = metrics["protocol/ks"], _systems(metrics)
    lines = [f"# Evaluation of run {metrics.get('run_id', '')}".rstrip(), "",
             f"**Protocol:** {metrics.get('protocol', 'not recorded')}. **Ranking:** {metrics['protocol/ranking']}; "
             f"training items excluded: {'yes' if metrics['protocol/exclude_train'] else 'no'}; score: "
             f"{metrics.get('protocol/metric', 'ip')}. Numbers are means over the {metrics['count/eval_users']} "
             f"test users with training history; brackets: 95% bootstrap interval over users "
             f"({metrics['protocol/bootstrap_resamples']} resamples, seed {metrics['protocol/seed']}). Test users "
             f"without training history ({metrics['count/cold_start_users']}) are reported separately.", "",
             "## Headline", ""] + _headline(metrics, "")
    lines += _baselines(metrics)
    lines += _towers_chosen((train_summary or {}).get("tuning") or {})
    lines += ["", "## All metrics", ""]
    rows = [[f"{m}@{k}"] + [_number(metrics.get(f"{prefix}{m}@{k}")) for _, prefix in systems]
            for m in ALL_METRICS for k in ks]
    lines += _table(["metric"] + [name for name, _ in systems], rows)
    lines += ["", f"Tail items: outside the most popular items holding {metrics['protocol/head_share']:.0%} of "
              f"training interactions ({metrics['count/tail_items']} of {metrics['count/items']} items).", ""]
    lines += [f"Baseline {name} skipped: {metrics.get(f'protocol/skipped/{name}', 'not computed for this evaluation')}."
              for name in metrics.get("protocol/skipped_baselines", [])]
    lines += [""] if metrics.get("protocol/skipped_baselines") else []
    paired = [[other, f"{m}@{k}", _with_ci(metrics, f"paired/{other}/{m}@{k}_diff"),
               _number(metrics.get(f"paired/{other}/{m}@{k}_p_value"))]
              for other, _ in systems[1:] for m in ("recall", "ndcg") for k in ks
              if f"paired/{other}/{m}@{k}_diff" in metrics]
    if paired:
        lines += ["## Paired comparison (model minus other, same users)", "",
                  "Per-user differences; 95% bootstrap interval; two-sided sign-flip permutation p-value.", ""]
        lines += _table(["other", "metric", "difference [95% CI]", "p-value"], paired)
        lines.append("")
    lines += ["## Cold-start users (no training history)", ""]
    lines += _headline(metrics, "cold_start/") if metrics["count/cold_start_users"] else ["None in the test set."]
    lines += _cold_items(metrics)
    if any(key.startswith("ann/") for key in metrics):
        lines += ["", "## Approximate search (FAISS index)", ""]
        lines += _table(["k", "recall (index)", "recall (exact)", "recall of index vs exact top-k"],
                        [[str(k), _number(metrics.get(f"ann/recall@{k}")), _number(metrics.get(f"recall@{k}")),
                          _number(metrics.get(f"ann/recall_vs_exact@{k}"))] for k in ks])
    lines += ["", "## Counts", ""]
    lines += _table(["count", "value"], [[key[len("count/"):], str(value)] for key, value in sorted(metrics.items())
                                         if key.startswith("count/")])
    return "\n".join(lines) + "\n"


def plot_recall(metrics: Mapping, path: Path) -> None:
    """recall@k against k for every system (shaded: 95% bootstrap interval), written atomically as PNG."""
    ks = metrics["protocol/ks"]
    figure = Figure(figsize=(6, 4), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    for name, prefix in _systems(metrics):
        if f"{prefix}recall@{ks[0]}" not in metrics:
            continue
        (line,) = axes.plot(ks, [metrics[f"{prefix}recall@{k}"] for k in ks], marker="o", label=name)
        if f"{prefix}recall@{ks[0]}_ci_low" in metrics:
            axes.fill_between(ks, [metrics[f"{prefix}recall@{k}_ci_low"] for k in ks],
                              [metrics[f"{prefix}recall@{k}_ci_high"] for k in ks], color=line.get_color(), alpha=0.2)
    axes.set_xlabel("k")
    axes.set_ylabel("recall@k")
    axes.set_title(f"recall@k, {metrics['count/eval_users']} users, full corpus", fontsize=10)
    axes.grid(alpha=0.3)
    if axes.lines:
        axes.legend()
    figure.tight_layout()
    with artifacts.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")


def training_histories(train_summary: Mapping) -> dict[str, dict[str, list]]:
    """The per-epoch histories of a train stage's summary by phase: ``tuning`` (on the holdout, with its
    validation metric) and ``refit`` (on all training data) when the run was tuned and refit, else ``training``;
    empty when the summary recorded none (a run trained without a holdout)."""
    tuning = (train_summary.get("tuning") or {}).get("history") or {}
    final = train_summary.get("history") or {}
    phases = {"tuning": tuning, "refit": final} if tuning and train_summary.get("refit") else {"training": final
                                                                                              or tuning}
    return {phase: history for phase, history in phases.items() if history.get("loss")}


def plot_training(train_summary: Mapping, path: Path) -> bool:
    """Loss and the validation metric by epoch for each phase of :func:`training_histories` (the best epoch
    marked), written atomically as PNG; False (nothing written) when the summary recorded no history."""
    histories = training_histories(train_summary)
    if not histories:
        return False
    validation = sorted({name for history in histories.values() for name in history if name.startswith("val_")})
    figure = Figure(figsize=(10 if validation else 6, 4), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 2 if validation else 1, squeeze=False)[0]
    for phase, history in histories.items():
        epochs = range(1, len(history["loss"]) + 1)
        axes[0].plot(epochs, history["loss"], marker="o", label=phase)
        for name in validation:
            if history.get(name):
                axes[1].plot(range(1, len(history[name]) + 1), history[name], marker="o", label=f"{phase} {name}")
    best = train_summary.get("best_epoch")
    labels = ["training loss"] + ([validation[0] if len(validation) == 1 else "validation metric"] if validation else [])
    for ax, label in zip(axes, labels, strict=True):
        if best:
            ax.axvline(best, color="grey", linestyle="--", linewidth=1, label=f"best epoch {best}")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle("training curves (stages/train.json)", fontsize=10)
    figure.tight_layout()
    with artifacts.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
    return True


def write(run_dir, metrics: Mapping) -> None:
    """Writes ``metrics.json``, ``report.md`` and ``recall_at_k.png`` into ``run_dir`` (``RunPaths`` names), and
    :data:`TRAINING_PLOT` when ``run_dir`` is a run whose train stage recorded its curves."""
    paths = artifacts.RunPaths(run_dir)
    train_stage = paths.stages / "train.json"
    train_summary = artifacts.read_json(train_stage)["summary"] if train_stage.is_file() else None
    artifacts.write_json(paths.metrics, dict(metrics))
    artifacts.write_text(paths.report, render_markdown(metrics, train_summary))
    plot_recall(metrics, paths.plot)
    if train_summary is not None:
        plot_training(train_summary, paths.root / TRAINING_PLOT)
