"""Checks of a node's `/metrics` against its decode profile: pure functions over parsed scrapes.

Metric names come from the metric table keyed by vLLM version (vllm/metrics_table.py), never from memory; the
scrape is parsed with prometheus_client's own parser. Used by `vllm-fleet smoke` (live) and
`vllm-fleet metrics check` (saved scrapes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from vllm_fleet.planner import Plan
from vllm_fleet.profile import DecodeProfile
from vllm_fleet.vllm import memory_model, metrics_table

Status = Literal["pass", "fail", "skip", "warn"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


@dataclass
class Scrape:
    """Samples by exposed name: {sample_name: [(labels, value), …]}; family names kept too."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    families: set[str] = field(default_factory=set)

    def total(self, name: str, **match: str) -> float | None:
        rows = [v for labels, v in self.samples.get(name, []) if all(labels.get(k) == x for k, x in match.items())]
        return sum(rows) if rows else None

    def buckets(self, name: str) -> list[tuple[float, float]]:
        """(upper bound, cumulative count) of a histogram, summed over label sets (engines, models)."""
        acc: dict[float, float] = {}
        for labels, value in self.samples.get(f"{name}_bucket", []):
            le = float(labels["le"])
            acc[le] = acc.get(le, 0.0) + value
        return sorted(acc.items())


def parse_scrape(text: str) -> Scrape:
    scrape = Scrape()
    for family in text_string_to_metric_families(text):
        scrape.families.add(family.name)
        for sample in family.samples:
            scrape.samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return scrape


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus's histogram_quantile: linear interpolation inside the bucket that holds rank q·count."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


def _delta_buckets(after: Scrape, before: Scrape | None, name: str) -> list[tuple[float, float]]:
    old = dict(before.buckets(name)) if before else {}
    return [(le, count - old.get(le, 0.0)) for le, count in after.buckets(name)]


def _delta(after: Scrape, before: Scrape | None, name: str) -> float | None:
    now = after.total(name)
    if now is None:
        return None
    return now - ((before.total(name) or 0.0) if before else 0.0)


def _sample(version: str, concern: str) -> tuple[str, str] | None:
    """(family name, exposed sample name) for a concern on this vLLM version."""
    spec = metrics_table.family_for(version, concern)
    if spec is None:
        return None
    return spec.name, metrics_table.sample_name(spec)


def _fmt(value: float) -> str:
    return f"{value:g}"


def cache_config_expectations(profile: DecodeProfile, plan: Plan | None) -> dict[str, str]:
    """`vllm:cache_config_info` labels the profile fixes, as vLLM prints them."""
    expect: dict[str, str] = {"cache_dtype": profile.cache.kv_cache_dtype}
    if profile.cache.kv_cache_memory_bytes is None:
        if profile.cache.gpu_memory_utilization is not None:  # unset from 0.34: the release resolves it
            expect["gpu_memory_utilization"] = _fmt(profile.cache.gpu_memory_utilization)
    else:
        expect["kv_cache_memory_bytes"] = str(profile.cache.kv_cache_memory_bytes)
    if profile.cache.block_size is not None:
        expect["block_size"] = str(profile.cache.block_size)
    if profile.cache.enable_prefix_caching is not None:
        expect["enable_prefix_caching"] = str(profile.cache.enable_prefix_caching)
    return expect


def kv_capacity_check(plan: Plan, labels: dict[str, str]) -> Check | None:
    """The node's real KV capacity (``num_gpu_blocks`` × block size) against the plan. Where the profile fixes the KV
    size it must match (2 %: a gate). Otherwise every real deployment calibrates the planner: the check reports the
    planner's error for this node, a warning beyond the memory model's stated uncertainty (not a gate: the node
    serves; the plan's judgments of it are what is off). None where the node does not say its block count."""
    raw = labels.get("num_gpu_blocks")
    if not raw or raw == "None":
        return None
    try:
        blocks = int(float(raw))
    except (ValueError, OverflowError):
        return Check("kv_capacity", "fail", f"num_gpu_blocks {raw[:40]!r} is not a block count")
    if plan.kv_budget_fixed:
        ratio = blocks / plan.kv_capacity_blocks if plan.kv_capacity_blocks else math.inf
        detail = f"node {blocks} blocks, planner {plan.kv_capacity_blocks} (ratio {ratio:.4f}, tolerance 2 %)"
        return Check("kv_capacity", "pass" if abs(ratio - 1) <= 0.02 else "fail", detail)
    try:
        block = int(labels.get("block_size") or plan.block_size)
    except ValueError:
        block = plan.block_size
    real = blocks * block * (plan.kv_bytes_per_token + plan.draft_kv_bytes_per_token)
    if real <= 0:
        return Check("kv_capacity", "warn", f"node {blocks} blocks: no KV cache to compare with the planner's")
    off = plan.kv_budget_bytes - real
    within = abs(off) <= max(memory_model.UNCERTAINTY * real, memory_model.UNCERTAINTY_BYTES)
    detail = (
        f"node {blocks} blocks of {block} tokens = {real / 1024**3:.2f} GiB of KV per GPU, planner "
        f"{plan.kv_budget_bytes / 1024**3:.2f} GiB ({off / real:+.1%}; its stated uncertainty: "
        f"{memory_model.UNCERTAINTY:.0%} or {memory_model.UNCERTAINTY_BYTES / 1024**3:.2f} GiB)"
    )
    return Check("kv_capacity", "pass" if within else "warn", detail)


def _same(label: str, want: str, got: str) -> bool:
    try:
        return math.isclose(float(want), float(got), rel_tol=1e-9)
    except ValueError:
        return want == got


def check_metrics(
    profile: DecodeProfile,
    after: Scrape,
    before: Scrape | None = None,
    plan: Plan | None = None,
    version: str | None = None,
) -> list[Check]:
    """Every check a rollout is gated on, from a before/after pair (the probe's window), or from one scrape:
    then every counter and histogram counts from the process start, and the figures are since-start ones."""
    v = version or profile.vllm_version
    out: list[Check] = []
    speculative = profile.speculative is not None

    required = metrics_table.required_for(v, speculative=speculative)
    missing = sorted(f for f in required if f not in after.families)
    out.append(
        Check(
            "families",
            "fail" if missing else "pass",
            f"missing: {', '.join(missing)}" if missing else f"{len(required)} families required by vLLM {v} present",
        )
    )

    info = _sample(v, "cache_config_info")
    rows = after.samples.get(info[1], []) if info else []
    if not rows:
        out.append(Check("cache_config", "fail", "vllm:cache_config_info not exposed"))
    else:
        labels = rows[0][0]
        expected = cache_config_expectations(profile, plan)
        wrong = [
            f"{k}: profile {want!r}, node {labels.get(k)!r}"
            for k, want in expected.items()
            if k in labels and not _same(k, want, labels[k])
        ]
        unseen = sorted(k for k in expected if k not in labels)
        checked = len(expected) - len(unseen)
        if wrong or checked:
            detail = "; ".join(wrong) or f"{checked} label(s) match the profile"
            out.append(Check("cache_config", "fail" if wrong else "pass", detail))
        if unseen:
            # Not exposed by this release: nothing to compare, so not a pass.
            out.append(Check("cache_config_unverifiable", "skip", f"not verifiable, the node has no label {unseen}"))
        capacity = kv_capacity_check(plan, labels) if plan is not None else None
        if capacity is not None:
            out.append(capacity)

    gen = _sample(v, "generation_tokens")
    moved = _delta(after, before, gen[1]) if gen else None
    if before is None:
        # One scrape: counters count from the process start, so what follows is since-start, not the probe's.
        out.append(Check("tokens", "skip", f"generation tokens since start: {_fmt(moved or 0)} (no probe window)"))
    else:
        ok = bool(moved and moved > 0)
        out.append(Check("tokens", "pass" if ok else "fail", f"generation tokens +{_fmt(moved or 0)}"))

    pre = _sample(v, "preemptions")
    preempted = _delta(after, before, pre[1]) if pre else None
    budget = profile.slo.max_preemptions
    if preempted is None:
        # A missing counter is not zero preemptions: the budget cannot be checked.
        counter = pre[1] if pre else f"the preemption counter of vLLM {v}"
        out.append(Check("preemptions", "fail", f"{counter} not exposed: cannot check the budget ({budget})"))
    else:
        ok = preempted <= budget
        out.append(Check("preemptions", "pass" if ok else "fail", f"{_fmt(preempted)} (budget {budget})"))

    if speculative:
        acc, draft = _sample(v, "spec_accepted_tokens"), _sample(v, "spec_draft_tokens")
        d_acc = _delta(after, before, acc[1]) if acc else None
        d_draft = _delta(after, before, draft[1]) if draft else None
        floor = profile.slo.min_spec_acceptance_rate or 0.0
        if not d_draft or d_acc is None:
            out.append(Check("spec_acceptance", "fail", "no draft tokens counted: is speculative decoding on?"))
        else:
            rate = d_acc / d_draft
            out.append(
                Check(
                    "spec_acceptance",
                    "pass" if rate >= floor else "fail",
                    f"{rate:.3f} = {_fmt(d_acc)} accepted / {_fmt(d_draft)} drafted (minimum {floor})",
                )
            )

    for concern, slo, label in (
        ("ttft", profile.slo.ttft_p95_s, "TTFT p95"),
        ("itl", profile.slo.itl_p95_s, "ITL p95"),
    ):
        fam = _sample(v, concern)
        p95 = histogram_quantile(0.95, _delta_buckets(after, before, fam[0])) if fam else None
        if p95 is None:
            out.append(Check(concern, "skip" if slo is None else "fail", f"{label}: no observations"))
        elif slo is None:
            out.append(Check(concern, "pass", f"{label} {p95 * 1000:.1f} ms (no SLO)"))
        else:
            out.append(
                Check(
                    concern, "pass" if p95 <= slo else "fail", f"{label} {p95 * 1000:.1f} ms (SLO {slo * 1000:.0f} ms)"
                )
            )
    return out
