"""The quality gate: a run is published only if it is good enough and no worse than what is live.

Three checks, and a fourth on request, all on the evaluation's flat metrics (``"recall@20"``, ...):

* floors: ``metrics[name] >= floor`` for every configured floor;
* lift over most-popular: on the first compared metric, ``new >= (1 + min_lift) * popular``, where ``popular`` is
  the most-popular baseline of the same evaluation (same users, same protocol). An untrained or collapsed model
  scores at or below popularity (and so may a trained one on data with no signal beyond popularity), while any absolute floor is either too low for one dataset or too high for another;
  the baseline moves with the data. ``min_lift`` :data:`OFF` (-1) turns the check off; a missing baseline refuses;
* regression: for each compared metric, ``new >= (1 - max_regression) * published``, where ``published`` is the
  metric of the published run of the same lineage (``identity.lineage_of``: the same data source; skipped when the
  lineage has published nothing yet), never of a run trained and evaluated on other data;
* best baseline (``gate.beat_best_baseline``, off by default): on the first compared metric, ``new >= best``, where
  ``best`` is the highest baseline of the same evaluation (the tuned item-kNN, RP3beta, EASE^R, ...). Off, a model
  that trails it is still published (the run's stdout says it trails, ``evaluation.summary``);

and one that no metric can pass: a run that may not be published whatever it measures (``unpublishable``, e.g. a
tuning run scored on its validation data, ``identity.validation_scored``).

Every check made is one line of ``GateDecision.checked``, marked with its outcome (:func:`mark`), which a run prints
under ``gate passed:`` or ``gate refused:``, so a refusal shows which check failed::

    gate refused:
      [FAIL] recall@20 0.2693 vs floor 0.9900
      [pass] recall@20 0.2693 vs 1.05 x most-popular 0.0893
      [skip] no published run of this lineage to compare with
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Mapping, Optional, Sequence

from retrieval.errors import InputError

POPULAR = "most_popular"
OFF = -1.0  # min_lift_over_popular at or below this: no comparison with most-popular
PASS, FAIL, SKIP = "pass", "FAIL", "skip"  # a check's outcome, as its line in GateDecision.checked starts


def mark(outcome: str, compared: str) -> str:
    """A line of ``GateDecision.checked``: the check's outcome (:data:`PASS`, :data:`FAIL` or :data:`SKIP`, when
    there was nothing to compare with), then what it compared."""
    return f"[{outcome}] {compared}"


@dataclasses.dataclass
class GateDecision:
    """Whether the run passed, why not (``reasons``) and every comparison the gate made (``checked``, one
    :func:`mark`-ed line per check: what a run prints, so a refusal, or a pass, says what was compared with what and
    which check failed)."""

    passed: bool
    reasons: List[str]
    checked: List[str] = dataclasses.field(default_factory=list)

    def as_dict(self) -> Dict[str, object]:
        return {"passed": self.passed, "reasons": self.reasons, "checked": self.checked}


def parse_floors(text: str) -> Dict[str, float]:
    """``gate.floors``, ``"recall@20=0.05,ndcg@20=0.02"``, as ``{metric: floor}``."""
    floors = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        try:
            floors[name.strip()] = float(value)
        except ValueError:
            raise InputError(f"gate floor {part!r} must be metric=number", field="gate.floors") from None
    return floors


def popular_metrics(evaluation: Mapping[str, object]) -> Dict[str, float]:
    """The most-popular baseline's flat metrics in a full evaluation (``baseline/most_popular/recall@20`` ->
    ``recall@20``); empty when the evaluation did not compute it."""
    prefix = f"baseline/{POPULAR}/"
    return {key[len(prefix):]: value for key, value in evaluation.items()
            if key.startswith(prefix) and isinstance(value, (int, float))}


def baseline_metrics(evaluation: Mapping[str, object]) -> Dict[str, Dict[str, float]]:
    """Every evaluated baseline's flat metrics in a full evaluation, by name (``baseline/rp3beta/recall@20`` ->
    ``{"rp3beta": {"recall@20": ...}}``; the baselines of ``protocol/baselines``)."""
    out: Dict[str, Dict[str, float]] = {}
    for name in evaluation.get("protocol/baselines", []) or []:
        prefix = f"baseline/{name}/"
        values = {key[len(prefix):]: value for key, value in evaluation.items()
                  if key.startswith(prefix) and isinstance(value, (int, float)) and not isinstance(value, bool)}
        if values:
            out[name] = values
    return out


def behind_best_baseline(metrics: Mapping[str, float], baselines: Mapping[str, Mapping[str, float]],
                         compare: Sequence[str]) -> tuple[Optional[str], Optional[str]]:
    """(why ``metrics`` are below the best of ``baselines`` on ``compare[0]``, or None; what was compared). Equal
    (up to float rounding) passes."""
    if not compare:
        return "no metric in gate.compare to compare with the best baseline", None
    name = compare[0]
    scored = {other: values[name] for other, values in baselines.items() if name in values}
    if not scored:
        return f"{name} cannot be compared with the best baseline: no baseline in the evaluation (eval.baselines)", None
    best = max(scored, key=scored.get)
    value, bound = metrics.get(name), scored[best]
    checked = f"{name} {_value(value)} vs best baseline {best} {bound:.4f}"
    if value is None:
        return f"{name} cannot be compared with the best baseline: the model's value missing", checked
    if value < bound and not math.isclose(value, bound, rel_tol=1e-9):
        return (f"{name}={value:.4f} trails the best baseline {best} ({bound:.4f}; gate.beat_best_baseline)",
                checked)
    return None, checked


def lift_over_popular(metrics: Mapping[str, float], popular: Mapping[str, float], compare: Sequence[str],
                      min_lift: float) -> Optional[str]:
    """Why ``metrics`` do not beat most-popular by ``min_lift`` (relative) on ``compare[0]``; None when they do or
    the check is off. Exactly at the margin passes (up to float rounding of the decimal settings)."""
    if min_lift <= OFF:
        return None
    if not compare:
        return "no metric in gate.compare to compare with the most-popular baseline"
    name = compare[0]
    value, base = metrics.get(name), popular.get(name)
    if value is None or base is None:
        missing = "the model's value" if value is None else "the most-popular baseline (eval.baselines)"
        return f"{name} cannot be compared with most-popular: {missing} missing from the evaluation"
    bound = (1.0 + min_lift) * base
    if value < bound and not math.isclose(value, bound, rel_tol=1e-9):
        return (f"{name}={value:.4f} is not {min_lift:.0%} above the most-popular baseline's {base:.4f} (bound "
                f"{bound:.4f}, gate.min_lift_over_popular): a model must beat popularity to be published")
    return None


def check(metrics: Mapping[str, float], floors: Mapping[str, float], published: Optional[Mapping[str, float]],
          compare: Sequence[str], max_regression: float, min_lift_over_popular: float = OFF,
          popular: Optional[Mapping[str, float]] = None, unpublishable: Optional[str] = None,
          baselines: Optional[Mapping[str, Mapping[str, float]]] = None) -> GateDecision:
    """Returns whether ``metrics`` pass the floors, the lift over ``popular`` (the most-popular baseline's metrics,
    see :func:`popular_metrics`) and the regression check against ``published``; ``unpublishable``: why the run may
    not be published at all (refused first, with that reason); ``baselines``: every baseline's metrics
    (:func:`baseline_metrics`) when the model must reach the best of them (``gate.beat_best_baseline``; None: no
    such check)."""
    reasons = [unpublishable] if unpublishable else []
    checked = [mark(FAIL, f"not publishable: {unpublishable}")] if unpublishable else []
    for name, floor in floors.items():
        value = metrics.get(name)
        failed = value is None or value < floor
        if value is None:
            reasons.append(f"{name} missing from the evaluation (gate floor {floor})")
        elif value < floor:
            reasons.append(f"{name}={value:.4f} below floor {floor:.4f}")
        checked.append(mark(FAIL if failed else PASS, f"{name} {_value(value)} vs floor {floor:.4f}"))
    lift = lift_over_popular(metrics, popular or {}, compare, min_lift_over_popular)
    if lift is not None:
        reasons.append(lift)
    if min_lift_over_popular > OFF:
        compared = lift
        if compare:
            name = compare[0]
            compared = (f"{name} {_value(metrics.get(name))} vs {1 + min_lift_over_popular:.2f} x most-popular "
                        f"{_value((popular or {}).get(name))}")
        checked.append(mark(FAIL if lift else PASS, compared))
    if baselines is not None:
        reason, compared = behind_best_baseline(metrics, baselines, compare)
        reasons += [reason] if reason else []
        checked.append(mark(FAIL if reason else PASS, compared or reason))
    if published:
        for name in compare:
            old, new = published.get(name), metrics.get(name)
            if old is None or new is None:
                continue
            bound = (1.0 - max_regression) * old
            if new < bound:
                reasons.append(f"{name}={new:.4f} regressed more than {max_regression:.0%} against the published "
                               f"{old:.4f} (bound {bound:.4f})")
            checked.append(mark(FAIL if new < bound else PASS,
                                f"{name} {new:.4f} vs published {old:.4f} less {max_regression:.0%}"))
    else:
        checked.append(mark(SKIP, "no published run of this lineage to compare with"))
    return GateDecision(passed=not reasons, reasons=reasons, checked=checked)


def _value(value: Optional[float]) -> str:
    return "missing" if value is None else f"{value:.4f}"
