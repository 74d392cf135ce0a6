"""Grafana dashboards (JSON), built with grafana-foundation-sdk: the fleet overview and one node in detail.

Every panel reads the recorded ``vllm_fleet:*`` series (``series.py``), which the per-release recording rules
fill from each release's own family names (the metric table), so one dashboard serves a fleet of several vLLM
releases and no panel spells a vLLM name. Both are templated on ``profile`` and ``host`` (label values of
``up{job="vllm"}``) and on the Prometheus data source. SLO lines are the threshold series of the rule files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as gm

from vllm_fleet.monitoring import series
from vllm_fleet.monitoring.alerts import ALERTS
from vllm_fleet.monitoring.scopes import Scope
from vllm_fleet.monitoring.signals import FINISHED_REASON_LABEL, Signal

DS = gm.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = '{profile=~"$profile", host=~"$host"}'
SLO_SEL = '{profile=~"$profile", host=~"$host|"}'
"""Threshold series carry ``host`` only where a profile's hosts differ (per-host overrides): ``host=~"$host|"``
also matches the series without the label."""
UP = f'up{{job="{series.JOB}", profile=~"$profile", host=~"$host"}}'


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    json: str


def _variables(board: gd.Dashboard, multi: bool) -> gd.Dashboard:
    board.with_variable(gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    for name, query in (
        ("profile", f'label_values(up{{job="{series.JOB}"}}, profile)'),
        ("host", f'label_values(up{{job="{series.JOB}", profile=~"$profile"}}, host)'),
    ):
        var = (
            gd.QueryVariable(name)
            .label(name)
            .datasource(DS)
            .query(query)
            .refresh(gm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(gm.VariableSort.ALPHABETICAL_ASC)
            .multi(multi)
            .include_all(multi)
        )
        board.with_variable(var)
    return board


def _ts(title: str, unit: str, targets: list[tuple[str, str]], description: str = "") -> timeseries.Panel:
    panel = timeseries.Panel().title(title).datasource(DS).unit(unit).span(12).height(8)
    if description:
        panel.description(description)
    for i, (expr, legend) in enumerate(targets):
        panel.with_target(prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + i)))
    return panel


def _stat(title: str, expr: str, unit: str = "none") -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .datasource(DS)
        .unit(unit)
        .span(6)
        .height(4)
        .with_target(prometheus.Dataquery().expr(expr).instant().ref_id("A"))
    )


def _latency(signal: Signal, what: str, description: str = "") -> timeseries.Panel:
    return _ts(
        f"{what} p50 / p95 against the SLO",
        "s",
        [
            (f"{series.quantile(signal, 50)}{SEL}", "{{host}} p50"),
            (f"{series.quantile(signal, 95)}{SEL}", "{{host}} p95"),
            (f"{series.slo(signal)}{SLO_SEL}", "SLO p95 ({{profile}})"),
            (f"{series.slo_bucket(signal)}{SLO_SEL}", "SLO bucket the alert uses ({{profile}})"),
        ],
        description,
    )


def _json(board: gd.Dashboard) -> str:
    return json.dumps(board.build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def overview(scopes: list[Scope]) -> Dashboard:
    """The whole fleet: nodes up, firing alerts, and the main figures per host."""
    uid, title = "vllm-fleet-overview", "vLLM fleet: overview"
    board = gd.Dashboard(title).uid(uid).tags(["vllm", "vllm-fleet"]).refresh("30s").time("now-6h", "now")
    _variables(board, multi=True)
    board.with_row(gd.Row("Fleet"))
    board.with_panel(_stat("Nodes up", f"count({UP} == 1) or vector(0)"))
    board.with_panel(_stat("Nodes down", f"count({UP} == 0) or vector(0)"))
    names = "|".join(ALERTS)
    board.with_panel(
        _stat("vLLM alerts firing", f'count(ALERTS{{alertstate="firing", alertname=~"{names}"}}) or vector(0)')
    )
    board.with_panel(_stat("Generated tokens/s (fleet)", f"sum({series.GENERATION_TOKENS_RATE}{SEL})", "short"))
    board.with_row(gd.Row("Per host"))
    board.with_panel(_ts("Generated tokens/s", "short", [(f"{series.GENERATION_TOKENS_RATE}{SEL}", "{{host}}")]))
    board.with_panel(_ts("TTFT p95", "s", [(f"{series.quantile('ttft', 95)}{SEL}", "{{host}}")]))
    board.with_panel(_ts("ITL p95", "s", [(f"{series.quantile('itl', 95)}{SEL}", "{{host}}")]))
    board.with_panel(
        _ts(
            "KV-cache usage (fullest engine)",
            "percentunit",
            [(f"{series.KV_CACHE_USAGE}{SEL}", "{{host}}")],
            "A share per node, never summed across nodes.",
        )
    )
    board.with_panel(
        _ts(f"Preemptions per {series.WINDOW}", "short", [(f"{series.PREEMPTIONS_INCREASE}{SEL}", "{{host}}")])
    )
    board.with_panel(_ts("Requests waiting", "short", [(f"{series.WAITING}{SEL}", "{{host}}")]))
    board.with_panel(
        _ts(
            "Finished requests/s by reason",
            "reqps",
            [
                (
                    f"sum by ({FINISHED_REASON_LABEL}) ({series.REQUESTS_FINISHED_RATE}{SEL})",
                    f"{{{{{FINISHED_REASON_LABEL}}}}}",
                )
            ],
        )
    )
    if any(s.speculative for s in scopes):
        board.with_panel(
            _ts("Spec-decode acceptance", "percentunit", [(f"{series.SPEC_ACCEPTANCE_RATIO}{SEL}", "{{host}}")])
        )
    return Dashboard(uid, title, _json(board))


def node(scopes: list[Scope]) -> Dashboard:
    """One node (``host``) in detail: latency against its SLO, throughput, queue, KV cache, speculation."""
    uid, title = "vllm-fleet-node", "vLLM fleet: node"
    board = gd.Dashboard(title).uid(uid).tags(["vllm", "vllm-fleet"]).refresh("30s").time("now-3h", "now")
    _variables(board, multi=False)
    speculative = any(s.speculative for s in scopes)
    board.with_row(gd.Row("Latency"))
    board.with_panel(_latency("ttft", "TTFT"))
    board.with_panel(
        _latency(
            "itl",
            "ITL",
            "One observation per engine step: with speculation a step emits every accepted token, so ITL overstates "
            "the time per token; see time per output token."
            if speculative
            else "",
        )
    )
    if speculative:
        board.with_panel(
            _latency(
                "tpot",
                "Time per output token (per request)",
                "Per request: decode time / (output tokens - 1). With speculation on, the ITL SLO is judged on this "
                "histogram (docs/monitoring.md#vllmitlaboveslo).",
            )
        )
    board.with_panel(
        _ts(
            "End-to-end and queue time p95",
            "s",
            [
                (f"{series.quantile('e2e_latency', 95)}{SEL}", "e2e p95"),
                (f"{series.quantile('queue_time', 95)}{SEL}", "queue p95"),
            ],
        )
    )
    board.with_row(gd.Row("Throughput and requests"))
    board.with_panel(
        _ts(
            "Tokens/s",
            "short",
            [(f"{series.GENERATION_TOKENS_RATE}{SEL}", "generated"), (f"{series.PROMPT_TOKENS_RATE}{SEL}", "prompt")],
        )
    )
    board.with_panel(
        _ts(
            "Requests running / waiting",
            "short",
            [(f"{series.RUNNING}{SEL}", "running"), (f"{series.WAITING}{SEL}", "waiting")],
        )
    )
    board.with_panel(
        _ts(
            "Finished requests/s by reason",
            "reqps",
            [(f"{series.REQUESTS_FINISHED_RATE}{SEL}", f"{{{{{FINISHED_REASON_LABEL}}}}}")],
        )
    )
    board.with_row(gd.Row("KV cache"))
    board.with_panel(
        _ts(
            "KV-cache usage (fullest engine)",
            "percentunit",
            [
                (f"{series.KV_CACHE_USAGE}{SEL}", "usage"),
                (f"{series.PREFIX_CACHE_HIT_RATIO}{SEL}", "prefix-cache hits"),
            ],
        )
    )
    board.with_panel(
        _ts(
            f"Preemptions per {series.WINDOW}",
            "short",
            [(f"{series.PREEMPTIONS_INCREASE}{SEL}", "preemptions"), (f"{series.SLO_PREEMPTIONS}{SLO_SEL}", "budget")],
        )
    )
    if speculative:
        board.with_row(gd.Row("Speculative decoding"))
        board.with_panel(
            _ts(
                "Draft acceptance",
                "percentunit",
                [
                    (f"{series.SPEC_ACCEPTANCE_RATIO}{SEL}", "accepted / drafted"),
                    (f"{series.SLO_SPEC_ACCEPTANCE}{SLO_SEL}", "floor"),
                ],
            )
        )
        board.with_panel(
            _ts("Accepted tokens per draft", "short", [(f"{series.SPEC_TOKENS_PER_DRAFT}{SEL}", "accepted per step")])
        )
    return Dashboard(uid, title, _json(board))


def dashboards(scopes: list[Scope]) -> list[Dashboard]:
    return [overview(scopes), node(scopes)]
