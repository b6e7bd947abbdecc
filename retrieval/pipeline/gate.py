"""The quality gate: a run is published only if it is good enough and no worse than what is live.

Two checks, both on the evaluation's flat metrics (``"recall@20"``, ...):

* floors: ``metrics[name] >= floor`` for every configured floor;
* regression: for each compared metric, ``new >= (1 - max_regression) * published``, where ``published`` is the
  metric of the run that ``latest`` points to (skipped when nothing is published yet).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence


@dataclasses.dataclass
class GateDecision:
    passed: bool
    reasons: List[str]

    def as_dict(self) -> Dict[str, object]:
        return {"passed": self.passed, "reasons": self.reasons}


def check(metrics: Mapping[str, float], floors: Mapping[str, float], published: Optional[Mapping[str, float]],
          compare: Sequence[str], max_regression: float) -> GateDecision:
    """Returns whether ``metrics`` pass the floors and the regression check against ``published``."""
    reasons = []
    for name, floor in floors.items():
        value = metrics.get(name)
        if value is None:
            reasons.append(f"{name} missing from the evaluation (gate floor {floor})")
        elif value < floor:
            reasons.append(f"{name}={value:.4f} below floor {floor:.4f}")
    if published:
        for name in compare:
            old, new = published.get(name), metrics.get(name)
            if old is None or new is None:
                continue
            bound = (1.0 - max_regression) * old
            if new < bound:
                reasons.append(f"{name}={new:.4f} regressed more than {max_regression:.0%} against the published "
                               f"{old:.4f} (bound {bound:.4f})")
    return GateDecision(passed=not reasons, reasons=reasons)
