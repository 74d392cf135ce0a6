"""Recording rules of one vLLM release: its own family names (from the metric table) → the fleet's series.

Only these rules spell vLLM names; everything else reads the ``vllm_fleet:*`` series they write (``series.py``).
Every rule selects ``{job="vllm", vllm_version="<release>"}``, so each release's file touches its own nodes only.
Rates are summed per node (``sum by (host, …, instance)``: engines and models added up); the KV-cache usage is a
share, so it is the highest engine's (``max``), never a sum.
"""

from __future__ import annotations

from typing import Any

from vllm_fleet.monitoring import series
from vllm_fleet.monitoring.scopes import Scope, release_selector
from vllm_fleet.monitoring.signals import (
    FINISHED_REASON_LABEL,
    LATENCY_SIGNALS,
    SPECULATIVE_SIGNALS,
    ReleaseMetrics,
)

Rule = dict[str, Any]
W = series.WINDOW


def _record(name: str, expr: str, labels: dict[str, str] | None = None) -> Rule:
    rule: Rule = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


def recording_rules(metrics: ReleaseMetrics, speculative: bool) -> list[Rule]:
    """Every recording rule for nodes on ``metrics.version``; spec-decode ones only when some node speculates."""
    v = metrics.version
    sel = release_selector(v)
    mine = f'{{vllm_version="{v}"}}'
    by, by_le = series.keep(), series.keep("le")
    rules: list[Rule] = []
    for signal in LATENCY_SIGNALS:
        if not metrics.has(signal):
            continue
        rules += [
            _record(series.bucket_rate(signal), f"sum by ({by_le}) (rate({metrics.bucket(signal)}{sel}[{W}]))"),
            _record(series.count_rate(signal), f"sum by ({by}) (rate({metrics.sample(signal)}{sel}[{W}]))"),
            _record(series.quantile(signal, 50), f"histogram_quantile(0.5, {series.bucket_rate(signal)}{mine})"),
            _record(series.quantile(signal, 95), f"histogram_quantile(0.95, {series.bucket_rate(signal)}{mine})"),
        ]
    for name, signal in (
        (series.GENERATION_TOKENS_RATE, "generation_tokens"),
        (series.PROMPT_TOKENS_RATE, "prompt_tokens"),
    ):
        rules.append(_record(name, f"sum by ({by}) (rate({metrics.sample(signal)}{sel}[{W}]))"))
    rules += [
        _record(series.KV_CACHE_USAGE, f"max by ({by}) ({metrics.sample('kv_cache_usage')}{sel})"),
        _record(series.PREEMPTIONS_INCREASE, f"sum by ({by}) (increase({metrics.sample('preemptions')}{sel}[{W}]))"),
        _record(series.RUNNING, f"sum by ({by}) ({metrics.sample('running')}{sel})"),
        _record(series.WAITING, f"sum by ({by}) ({metrics.sample('waiting')}{sel})"),
        _record(
            series.PREFIX_CACHE_HIT_RATIO,
            f"sum by ({by}) (rate({metrics.sample('prefix_cache_hits')}{sel}[{W}]))"
            f" / sum by ({by}) (rate({metrics.sample('prefix_cache_queries')}{sel}[{W}]))",
        ),
    ]
    success = metrics.get("request_success")
    if success is not None and FINISHED_REASON_LABEL in success.labels:
        by_reason = series.keep(FINISHED_REASON_LABEL)
        rules.append(
            _record(
                series.REQUESTS_FINISHED_RATE,
                f"sum by ({by_reason}) (rate({metrics.sample('request_success')}{sel}[{W}]))",
            )
        )
    if speculative and all(metrics.has(s) for s in SPECULATIVE_SIGNALS - {"spec_drafts"}):
        accepted = f"sum by ({by}) (rate({metrics.sample('spec_accepted_tokens')}{sel}[{W}]))"
        drafted = f"sum by ({by}) (rate({metrics.sample('spec_draft_tokens')}{sel}[{W}]))"
        rules.append(_record(series.SPEC_ACCEPTANCE_RATIO, f"{accepted} / {drafted}"))
        if metrics.has("spec_drafts"):
            drafts = f"sum by ({by}) (rate({metrics.sample('spec_drafts')}{sel}[{W}]))"
            rules.append(_record(series.SPEC_TOKENS_PER_DRAFT, f"{accepted} / {drafts}"))
    return rules


def _scope_labels(scope: Scope) -> list[dict[str, str]]:
    """One label set per series of a scope's thresholds: per host when selected by host, else per profile."""
    base = {"vllm_version": scope.vllm_version, "profile": scope.profile.name}
    return [{**base, "host": h} for h in scope.hosts] if scope.by_host else [base]


def threshold_rules(scope: Scope, thresholds: dict[str, float]) -> list[Rule]:
    """The scope's thresholds as constant series (``vector(x)`` with its labels): the lines dashboards draw."""
    return [
        _record(name, f"vector({number(value)})", labels)
        for name, value in thresholds.items()
        for labels in _scope_labels(scope)
    ]


def number(value: float) -> str:
    """A PromQL number literal that reads back as ``value`` exactly (``0.5``, ``2``)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
