"""Canary analysis: is the canary, on its new config, worse than the hosts still on the old one, over the same window
of real traffic?

After its smoke test the canary goes back into the router and serves its share of the traffic for a window; its
``/metrics`` and every baseline host's are read at the window's start and end (bounded reads), and each host's
window is the difference: its TTFT and ITL histograms and its finished requests by reason. The canary is compared
with the baseline hosts pooled.

**The noise rule** (docs/rollouts.md#canary-analysis). A regression needs both a size a user cares about and
evidence it is not chance:

* *effect size*: the canary's TTFT p95 above the baseline's by more than ``max_ttft_increase`` (a share: 0.5 is
  +50 %), or its mean ITL above the baseline's by more than ``max_itl_increase``, or its error share above the
  baseline's by more than ``max_error_rate_increase``;
* *a one-sided test at* ``alpha``: for the latencies, the Mann–Whitney U test of the canary's observations against
  the baseline's (on the histograms' buckets: ranks by bucket, ties by mid-rank, the normal approximation with the
  tie correction), which asks whether a canary observation tends to be slower than a baseline one; for errors, the
  two-proportion z-test.

Both sides need ``min_requests`` finished requests in the window; fewer is *inconclusive* (promoted, and said
so). The test alone would flag a tiny, real shift on a busy fleet; the effect size alone would flag chance on a
quiet one: a rollback needs both.

Two things the per-request test cannot see, handled by time: the canary's first requests after its restart meet
cold caches (the window starts after ``warmup_s`` of serving), and a host can be slow for a spell of its own (a
noisy neighbour, a busy core): the requests of one window are not independent evidence against the config, so a
rollback needs the same figure's regression in each of ``windows`` consecutive windows, and the first window
without it promotes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from vllm_fleet.fleet.spec import AnalysisSpec
from vllm_fleet.probes.smoke_checks import Scrape, histogram_quantile
from vllm_fleet.vllm import metrics_table

Decision = Literal["promote", "rollback", "inconclusive"]
REQUEST_SUCCESS = "vllm:request_success"
ERROR_REASON = "error"


_SPEC = AnalysisSpec()


@dataclass(frozen=True)
class Thresholds:
    """What the stack's ``rollout.analysis`` tunes (its defaults: the spec's, ``fleet.spec.AnalysisSpec``)."""

    window_s: float = _SPEC.window_s
    max_ttft_increase: float = _SPEC.max_ttft_increase
    max_itl_increase: float = _SPEC.max_itl_increase
    max_error_rate_increase: float = _SPEC.max_error_rate_increase
    min_requests: int = _SPEC.min_requests
    alpha: float = _SPEC.alpha
    warmup_s: float = 0.0
    """The spec's default is for a canary just restarted; the command and the stack pass it (a bare analysis of
    hosts already serving needs none)."""
    windows: int = 1


Buckets = list[tuple[float, float]]
"""(upper bound, observations in this bucket alone), increasing bounds, the last +Inf."""


@dataclass(frozen=True)
class Window:
    """One host over the window."""

    host: str
    ttft: Buckets
    itl: Buckets
    ttft_sum: float
    itl_sum: float
    finished: float
    errors: float

    @property
    def ttft_count(self) -> float:
        return sum(c for _, c in self.ttft)

    @property
    def itl_count(self) -> float:
        return sum(c for _, c in self.itl)

    def ttft_p95(self) -> float | None:
        return histogram_quantile(0.95, _cumulative(self.ttft))

    def itl_mean(self) -> float | None:
        return self.itl_sum / self.itl_count if self.itl_count else None

    def error_rate(self) -> float | None:
        return self.errors / self.finished if self.finished else None


@dataclass
class Verdict:
    decision: Decision
    reasons: list[str] = field(default_factory=list)
    figures: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """``canary`` and ``baseline``: requests, ttft_p95_s, itl_mean_s, error_rate; ``p``: the tests' p-values."""
    earlier: list[dict[str, object]] = field(default_factory=list)
    """The windows before the last one (each said roll back): their decision, reasons and figures."""
    regressed: list[str] = field(default_factory=list)
    """Which figures regressed (``ttft``, ``itl``, ``errors``): a rollback's, in every window."""

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"decision": self.decision, "reasons": self.reasons, "figures": self.figures}
        return {**data, "earlier": self.earlier} if self.earlier else data


def _cumulative(buckets: Buckets) -> Buckets:
    out, acc = [], 0.0
    for bound, count in buckets:
        acc += count
        out.append((bound, acc))
    return out


def _family(version: str, concern: str) -> str:
    spec = metrics_table.family_for(version, concern)
    if spec is None:
        raise ValueError(f"vLLM {version} has no {concern} histogram")
    return spec.name


def _histogram(before: Scrape, after: Scrape, family: str) -> tuple[Buckets, float]:
    """The window's own observations per bucket (not cumulative) and their sum; a counter reset (the process
    restarted in the window) counts from zero."""
    old = dict(before.buckets(family))
    now = after.buckets(family)
    restarted = any(count < old.get(bound, 0.0) for bound, count in now)
    cumulative = [(b, c if restarted else c - old.get(b, 0.0)) for b, c in now]
    per_bucket, prev = [], 0.0
    for bound, c in cumulative:
        per_bucket.append((bound, max(0.0, c - prev)))
        prev = c
    total_now = after.total(f"{family}_sum") or 0.0
    total = total_now if restarted else total_now - (before.total(f"{family}_sum") or 0.0)
    return per_bucket, max(0.0, total)


def window(host: str, before: Scrape, after: Scrape, version: str) -> Window:
    """``host``'s window from its scrapes at the start and the end (names from ``version``'s metric table)."""
    ttft, ttft_sum = _histogram(before, after, _family(version, "ttft"))
    itl, itl_sum = _histogram(before, after, _family(version, "itl"))
    name = metrics_table.sample_name(spec) if (spec := metrics_table.metric_spec(version, REQUEST_SUCCESS)) else ""

    def delta(**match: str) -> float:
        now, old = after.total(name, **match) or 0.0, before.total(name, **match) or 0.0
        return now if now < old else now - old

    return Window(host, ttft, itl, ttft_sum, itl_sum, delta(), delta(finished_reason=ERROR_REASON))


def pooled(windows: Sequence[Window], host: str = "baseline") -> Window:
    """Several hosts' windows as one (their histograms share vLLM's bucket bounds)."""

    def add(parts: list[Buckets]) -> Buckets:
        acc: dict[float, float] = {}
        for buckets in parts:
            for bound, count in buckets:
                acc[bound] = acc.get(bound, 0.0) + count
        return sorted(acc.items())

    return Window(
        host,
        add([w.ttft for w in windows]),
        add([w.itl for w in windows]),
        sum(w.ttft_sum for w in windows),
        sum(w.itl_sum for w in windows),
        sum(w.finished for w in windows),
        sum(w.errors for w in windows),
    )


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def mann_whitney_greater(canary: Buckets, baseline: Buckets) -> float:
    """One-sided p-value that a canary observation tends to be larger than a baseline one (Mann–Whitney U on
    bucketed data: every observation of a bucket ties with the others of that bucket; normal approximation with
    the tie correction). 1.0 when either side is empty or every observation ties."""
    bounds = sorted({b for b, _ in canary} | {b for b, _ in baseline})
    a, b = dict(canary), dict(baseline)
    n1, n2 = sum(a.values()), sum(b.values())
    if n1 <= 0 or n2 <= 0:
        return 1.0
    rank, r1, ties = 0.0, 0.0, 0.0
    for bound in bounds:
        t = a.get(bound, 0.0) + b.get(bound, 0.0)
        if t <= 0:
            continue
        mid = rank + (t + 1) / 2
        r1 += a.get(bound, 0.0) * mid
        ties += t**3 - t
        rank += t
    n = n1 + n2
    u1 = r1 - n1 * (n1 + 1) / 2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return 1.0
    z = (u1 - n1 * n2 / 2 - 0.5) / math.sqrt(var)  # continuity correction
    return _normal_sf(z)


def proportion_greater(x1: float, n1: float, x2: float, n2: float) -> float:
    """One-sided p-value that share x1/n1 exceeds x2/n2 (two-proportion z-test, pooled variance)."""
    if n1 <= 0 or n2 <= 0:
        return 1.0
    p = (x1 + x2) / (n1 + n2)
    var = p * (1 - p) * (1 / n1 + 1 / n2)
    if var <= 0:
        return 1.0
    return _normal_sf((x1 / n1 - x2 / n2) / math.sqrt(var))


def _pct(x: float) -> str:
    return f"{x:+.0%}"


def judge(canary: Window, baseline: Sequence[Window], t: Thresholds) -> Verdict:
    """Promote, roll back, or inconclusive (too few requests on a side), with the reasons and the figures."""
    base = pooled(baseline)
    figures: dict[str, dict[str, float | None]] = {
        side.host: {
            "requests": side.finished,
            "ttft_p95_s": side.ttft_p95(),
            "itl_mean_s": side.itl_mean(),
            "error_rate": side.error_rate(),
        }
        for side in (canary, base)
    }
    p = {
        "ttft": mann_whitney_greater(canary.ttft, base.ttft),
        "itl": mann_whitney_greater(canary.itl, base.itl),
        "errors": proportion_greater(canary.errors, canary.finished, base.errors, base.finished),
    }
    figures["p"] = dict(p)
    short = [w.host for w in (canary, base) if w.finished < t.min_requests]
    if not baseline or short:
        who = ", ".join(short) or "baseline (no host)"
        return Verdict(
            "inconclusive",
            [f"too few finished requests in the window on {who} (at least {t.min_requests} needed)"],
            figures,
        )
    reasons, regressed = [], []
    c_ttft, b_ttft = canary.ttft_p95(), base.ttft_p95()
    if c_ttft is not None and b_ttft and c_ttft / b_ttft - 1 > t.max_ttft_increase and p["ttft"] < t.alpha:
        regressed.append("ttft")
        reasons.append(
            f"TTFT p95 {c_ttft:.3g} s vs {b_ttft:.3g} s on the baseline ({_pct(c_ttft / b_ttft - 1)}, over the "
            f"{_pct(t.max_ttft_increase)} allowed; Mann-Whitney p = {p['ttft']:.2g} < {t.alpha:g})"
        )
    c_itl, b_itl = canary.itl_mean(), base.itl_mean()
    if c_itl is not None and b_itl and c_itl / b_itl - 1 > t.max_itl_increase and p["itl"] < t.alpha:
        regressed.append("itl")
        reasons.append(
            f"ITL mean {c_itl * 1000:.3g} ms vs {b_itl * 1000:.3g} ms on the baseline ({_pct(c_itl / b_itl - 1)}, "
            f"over the {_pct(t.max_itl_increase)} allowed; Mann-Whitney p = {p['itl']:.2g} < {t.alpha:g})"
        )
    c_err, b_err = canary.error_rate() or 0.0, base.error_rate() or 0.0
    if c_err - b_err > t.max_error_rate_increase and p["errors"] < t.alpha:
        regressed.append("errors")
        reasons.append(
            f"errors {c_err:.1%} of requests vs {b_err:.1%} on the baseline (over the "
            f"{t.max_error_rate_increase:.1%} allowed; z-test p = {p['errors']:.2g} < {t.alpha:g})"
        )
    return Verdict("rollback" if reasons else "promote", reasons, figures, regressed=regressed)


def _scrape(url: str) -> Scrape:
    """The node's /metrics, read within the bounds of every node read, parsed as data."""
    from vllm_fleet.probes.smoke_checks import parse_scrape
    from vllm_fleet.trust.node_reads import get_one

    return parse_scrape(get_one(url, "/metrics").text)


def analyse(
    canary: str,
    baseline: Sequence[str],
    version: str,
    t: Thresholds,
    baseline_version: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Verdict:
    """After ``t.warmup_s``, judge the canary over windows of ``t.window_s`` (``confirmed``: up to ``t.windows``).

    A canary that cannot be read is a rollback (it cannot be judged healthy); a baseline host that cannot be read
    is left out (said in the reasons); with none left the verdict is inconclusive."""
    if t.warmup_s > 0:
        sleep(t.warmup_s)
    return confirmed(lambda: _one_window(canary, baseline, version, t, baseline_version, sleep), t.windows)


UNREADABLE = "unreadable"
"""A canary whose /metrics cannot be read: rolled back at once (nothing to confirm: it cannot be judged healthy)."""


def confirmed(watch: Callable[[], Verdict], windows: int) -> Verdict:
    """``watch()`` up to ``windows`` times: a rollback stands only when one and the same figure (TTFT, ITL or
    errors) regressed in every window; the first window where it did not decides (promote, or inconclusive), naming
    the windows before it."""
    seen: list[Verdict] = []
    holding: set[str] = set()
    for _ in range(max(1, windows)):
        v = watch()
        if UNREADABLE in v.regressed:
            return v
        holding = set(v.regressed) if not seen else holding & set(v.regressed)
        if v.decision == "rollback" and not holding:  # another figure this time: a spell, not one regression
            v = Verdict("promote", [], v.figures, regressed=v.regressed)
        seen.append(v)
        if v.decision != "rollback":
            break
    last = seen[-1]
    if len(seen) == 1:
        return last
    earlier = [v.as_dict() for v in seen[:-1]]
    n = len(seen)
    if last.decision == "rollback":
        last.regressed = sorted(holding)
        note = f"the regression held in each of {n} consecutive windows"
    else:
        note = (
            f"{n - 1} window(s) before showed a regression ({seen[0].reasons[0] if seen[0].reasons else '?'}); "
            f"window {n} did not show it again: a passing spell, not the config"
        )
    return Verdict(last.decision, [*last.reasons, note], last.figures, earlier, last.regressed)


def _one_window(
    canary: str,
    baseline: Sequence[str],
    version: str,
    t: Thresholds,
    baseline_version: str | None,
    sleep: Callable[[float], None],
) -> Verdict:
    """Read the canary's and the baseline hosts' /metrics, wait ``t.window_s``, read them again, judge."""
    from vllm_fleet.trust.node_reads import NodeReadError

    notes: list[str] = []
    start: dict[str, Scrape] = {}
    for url in [canary, *baseline]:
        try:
            start[url] = _scrape(url)
        except NodeReadError as e:
            if url == canary:
                return Verdict("rollback", [f"the canary's /metrics cannot be read: {e}"], regressed=[UNREADABLE])
            notes.append(f"baseline {url} left out: {e}")
    sleep(t.window_s)
    windows: dict[str, Window] = {}
    for url, before in start.items():
        try:
            after = _scrape(url)
        except NodeReadError as e:
            if url == canary:
                return Verdict("rollback", [f"the canary's /metrics cannot be read: {e}"], regressed=[UNREADABLE])
            notes.append(f"baseline {url} left out: {e}")
            continue
        windows[url] = window(url, before, after, version if url == canary else baseline_version or version)
    verdict = judge(windows[canary], [w for u, w in windows.items() if u != canary], t)
    verdict.reasons += notes
    return verdict
