"""The tuner's noise rule: when is a candidate better than the incumbent, and when is it clearly worse after its
first repeat? The canary analysis's rule (``rollout.canary``), applied to throughput at the SLO: a decision needs
both an effect a user cares about and evidence it is not chance.

* *better*: meets the SLOs where the incumbent does not; or both meet them and the candidate's throughput at the
  SLO is above the incumbent's by more than ``min_gain`` **and** the one-sided Mann–Whitney test of the
  candidate's per-request rates against the incumbent's (the canary's ``mann_whitney_greater``) gives p < alpha;
  with neither meeting the SLOs, the one nearer to them by more than ``min_gain``.
* *clearly worse* (early stop, the other repeats skipped): throughput below the incumbent's by more than
  ``min_gain`` with the test the other way round at alpha; or the incumbent meets the SLOs and the candidate misses
  them at every level by more than ``min_gain`` of a limit.

``alpha`` is the stack's ``rollout.analysis.alpha`` (fleet.spec.AnalysisSpec): one significance for both.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from vllm_fleet.fleet.spec import AnalysisSpec
from vllm_fleet.rollout.canary import Buckets, mann_whitney_greater
from vllm_fleet.tune.trials import Level, Trial
from vllm_fleet.tune.workload import SLO


@dataclass(frozen=True)
class NoiseRule:
    min_gain: float = 0.05
    alpha: float = AnalysisSpec().alpha


def _samples(level: Level) -> Buckets:
    counts = Counter(float(f"{r:.6g}") for r in level.rates)
    return sorted(counts.items())


def p_greater(a: Level, b: Level) -> float:
    """One-sided p that a request of ``a`` tends to give more throughput than one of ``b``."""
    return mann_whitney_greater(_samples(a), _samples(b))


def better(candidate: Trial, incumbent: Trial | None, slo: SLO, rule: NoiseRule) -> tuple[bool, str]:
    """(is the candidate better, the figures that said so)."""
    if not candidate.measured:
        return False, candidate.reason or candidate.status
    if incumbent is None or not incumbent.measured:
        return True, "the first candidate measured"
    c, i = candidate.best_level(slo), incumbent.best_level(slo)
    if c is not None and i is None:
        return True, f"meets the SLOs ({c.throughput:.1f} tok/s at concurrency {c.concurrency}); the incumbent does not"
    if c is None and i is None:
        cv, iv = candidate.violation(slo), incumbent.violation(slo)
        ok = cv < iv * (1 - rule.min_gain)
        return ok, f"neither meets the SLOs; worst measured/limit {cv:.3g} vs {iv:.3g}"
    if c is None or i is None:
        return False, f"misses the SLOs ({candidate.why_infeasible(slo)})"
    gain = c.throughput / i.throughput - 1 if i.throughput else float("inf")
    p = p_greater(c, i)
    said = (
        f"{c.throughput:.1f} vs {i.throughput:.1f} tok/s at the SLO ({gain:+.1%}, needs > +{rule.min_gain:.0%}); "
        f"Mann-Whitney p = {p:.2g} (needs < {rule.alpha:g})"
    )
    return gain > rule.min_gain and p < rule.alpha, said


def clearly_worse(candidate: Trial, incumbent: Trial | None, slo: SLO, rule: NoiseRule) -> str | None:
    """Why measuring more repeats of the candidate is pointless, or None."""
    if incumbent is None or not incumbent.measured or not candidate.levels:
        return None
    i = incumbent.best_level(slo)
    if i is None:
        return None
    c = candidate.best_level(slo)
    if c is None:
        v = candidate.violation(slo)
        if v > 1 + rule.min_gain:
            return f"misses the SLOs at every level ({candidate.why_infeasible(slo)}); the incumbent meets them"
        return None
    gain = c.throughput / i.throughput - 1 if i.throughput else 0.0
    p = p_greater(i, c)
    if gain < -rule.min_gain and p < rule.alpha:
        return (
            f"{c.throughput:.1f} vs {i.throughput:.1f} tok/s ({gain:+.1%}); Mann-Whitney p = {p:.2g} < {rule.alpha:g}"
        )
    return None
