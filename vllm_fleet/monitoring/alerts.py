"""Alerting rules: the fleet-wide ones (over the recorded series) and each scope's, from its profile's SLOs.

Each alert carries ``summary``, a ``description`` with the numbers (``{{ $value }}`` and, where it helps, the
figure behind it read with a template ``query``) and ``runbook_url``: its section of docs/monitoring.md, whose
heading is the alert's name (GitHub's anchor: the name in lower case).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_fleet.monitoring import series
from vllm_fleet.monitoring.buckets import SloBucket, le_matcher, slo_bucket
from vllm_fleet.monitoring.drift import desired_labels
from vllm_fleet.monitoring.recording import number
from vllm_fleet.monitoring.scopes import Scope
from vllm_fleet.monitoring.signals import ABORT_REASON, ERROR_REASON, FINISHED_REASON_LABEL, ReleaseMetrics, Signal

Rule = dict[str, Any]
W = series.WINDOW
RUNBOOK = "docs/monitoring.md"

NODE_DOWN = "VllmNodeDown"
KV_CACHE_FULL = "VllmKVCacheNearlyFull"
PREEMPTIONS = "VllmPreemptions"
TTFT_SLO = "VllmTTFTAboveSLO"
ITL_SLO = "VllmITLAboveSLO"
SPEC_ACCEPTANCE = "VllmSpecAcceptanceLow"
REQUEST_ERRORS = "VllmRequestErrors"
REQUESTS_ABORTED = "VllmRequestsAborted"
CONFIG_DRIFT = "VllmConfigDrift"
ENGINE_WEDGED = "VllmEngineWedged"
WATCHDOG_RESTART = "VllmWatchdogRestart"
NODE_CORDONED = "VllmNodeCordoned"
SENTINEL_DOWN = "VllmSentinelDown"
GPU_XID = "VllmGpuXid"
GPU_ECC = "VllmGpuEccUncorrected"
GPU_REMAP_FAILURE = "VllmGpuRowRemapFailure"
GPU_REMAP_PENDING = "VllmGpuRowRemapPending"
ALERTS = (
    NODE_DOWN,
    KV_CACHE_FULL,
    PREEMPTIONS,
    TTFT_SLO,
    ITL_SLO,
    SPEC_ACCEPTANCE,
    REQUEST_ERRORS,
    REQUESTS_ABORTED,
    CONFIG_DRIFT,
    ENGINE_WEDGED,
    WATCHDOG_RESTART,
    NODE_CORDONED,
    SENTINEL_DOWN,
    GPU_XID,
    GPU_ECC,
    GPU_REMAP_FAILURE,
    GPU_REMAP_PENDING,
)

KV_CACHE_FULL_RATIO = 0.95
"""KV-cache usage share that, held for ``for``, means the node is at its capacity (the profile has no field)."""
ABORTED_SHARE = 0.1
"""Share of finished requests that were aborted (the profile has no field)."""
SLO_QUANTILE = 0.95


@dataclass(frozen=True)
class Note:
    """Something the generated rules cannot do exactly as the profile asks, said once per scope."""

    scope: str
    message: str


def _g(value: float) -> str:
    return f"{value:g}"


def _alert(
    name: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    description: str,
    runbook_base: str,
    scope: Scope | None = None,
    **extra: str,
) -> Rule:
    rule: Rule = {"alert": name, "expr": expr}
    if for_ != "0m":
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    if scope is not None:  # one rule per scope and alert: the label tells them apart (and says whose SLO it is)
        rule["labels"]["scope"] = scope.id
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": f"{runbook_base}#{name.lower()}",
        **extra,
    }
    return rule


def _value_of(name: str) -> str:
    """A template reading the node's current value of the recorded series ``name`` (as a duration)."""
    return (
        f'{{{{ with printf "{name}{{host=%q}}" $labels.host | query }}}}'
        "{{ . | first | value | humanizeDuration }}{{ else }}(no data){{ end }}"
    )


XID_WINDOW = "10m"
"""An Xid event alerts for this long after the sentinel counted it (its counter counts since boot)."""
WEDGED_FOR = "2m"
"""How long a node's sentinel must hold the engine wedged before the alert fires (the router took the node out
within seconds; the alert is for the person who must look)."""


def sentinel_alerts(runbook_base: str = RUNBOOK) -> list[Rule]:
    """Alerts on the nodes' sentinels (job ``vllm-sentinel``): the wedge, the watchdog, the cordon, the sentinel
    itself. The sentinel's figures are release-independent: it reads the engine's counters on the node."""
    job = f'job="{series.SENTINEL_JOB}"'
    return [
        _alert(
            ENGINE_WEDGED,
            f"vllm_fleet_engine_in_flight{{{job}}} > 0 and vllm_fleet_engine_wedged{{{job}}} == 1",
            WEDGED_FOR,
            "critical",
            "vLLM engine on {{ $labels.host }} is wedged",
            "{{ $value }} request(s) are in flight on {{ $labels.host }} and its engine has not moved (no token, "
            f"no step, no KV block) for {WEDGED_FOR} and more, while /health still answers 200. The router took the "
            "node out (its sentinel answers /ready 503); the requests in flight wait for the engine.",
            runbook_base,
        ),
        _alert(
            WATCHDOG_RESTART,
            f"increase(vllm_fleet_watchdog_restarts_total{{{job}}}[15m]) > 0",
            "0m",
            "warning",
            "The watchdog restarted vLLM on {{ $labels.host }}",
            "The sentinel of {{ $labels.host }} found its engine wedged past the watchdog time and killed vLLM for "
            "systemd to restart it ({{ $value | humanize }} time(s) in 15 minutes): the requests in flight were "
            "lost; the record is in /var/lib/vllm-sentinel/<instance>/watchdog.jsonl and the journal.",
            runbook_base,
        ),
        _alert(
            NODE_CORDONED,
            f"vllm_fleet_node_cordoned{{{job}}} == 1",
            "0m",
            "info",
            "{{ $labels.host }} is cordoned",
            "A person cordoned {{ $labels.host }} (its cordon file /etc/vllm/<instance>.cordon exists): its sentinel "
            "answers /ready 503, so it is out of the router until the file is removed (cordoned = {{ $value }}).",
            runbook_base,
        ),
        _alert(
            SENTINEL_DOWN,
            f"up{{{job}}} == 0",
            "2m",
            "critical",
            "The sentinel of {{ $labels.host }} does not answer",
            "Prometheus cannot scrape {{ $labels.instance }} for 2 minutes (up = {{ $value }}). The router's health "
            "check asks the sentinel, so the node is out of rotation although vLLM may serve: see `systemctl status "
            "vllm-sentinel-<instance>` on the node.",
            runbook_base,
        ),
        _alert(
            GPU_XID,
            f"vllm_fleet_gpu_xid_errors_total{{{job}}} - (vllm_fleet_gpu_xid_errors_total{{{job}}} offset {XID_WINDOW}"
            f" or vllm_fleet_gpu_xid_errors_total{{{job}}} * 0) > 0",
            "0m",
            "critical",
            "GPU Xid {{ $labels.xid }} on {{ $labels.host }}",
            f"{{{{ $value }}}} Xid {{{{ $labels.xid }}}} event(s) from the GPU at PCI {{{{ $labels.pci }}}} of "
            f"{{{{ $labels.host }}}} in the last {XID_WINDOW} (the driver's NVRM: Xid lines in the kernel log). "
            "Look the Xid up in NVIDIA's catalog; 48, 63, 64, 74, 79, 92, 94, 95, 119 and 120 mean a GPU or link "
            "fault: cordon the node.",
            runbook_base,
        ),
        _alert(
            GPU_ECC,
            f"vllm_fleet_gpu_ecc_uncorrected_volatile{{{job}}} > 0",
            "0m",
            "critical",
            "Uncorrected ECC errors on GPU {{ $labels.gpu }} of {{ $labels.host }}",
            "GPU {{ $labels.gpu }} ({{ $labels.pci_bus_id }}) of {{ $labels.host }} reports {{ $value }} uncorrected "
            "ECC error(s) since its driver loaded: the memory returned wrong data. Cordon the node; a GPU reset "
            "clears the volatile count, row remapping or service fixes the cause.",
            runbook_base,
        ),
        _alert(
            GPU_REMAP_FAILURE,
            f"vllm_fleet_gpu_row_remap_failure{{{job}}} == 1",
            "0m",
            "critical",
            "Row remapping failed on GPU {{ $labels.gpu }} of {{ $labels.host }}",
            "GPU {{ $labels.gpu }} ({{ $labels.pci_bus_id }}) of {{ $labels.host }} could not remap a failing memory "
            "row (remapped_rows.failure = {{ $value }}): it needs service. Cordon the node.",
            runbook_base,
        ),
        _alert(
            GPU_REMAP_PENDING,
            f"vllm_fleet_gpu_row_remap_pending{{{job}}} == 1",
            "0m",
            "warning",
            "GPU {{ $labels.gpu }} of {{ $labels.host }} needs a reset (row remap pending)",
            "GPU {{ $labels.gpu }} ({{ $labels.pci_bus_id }}) of {{ $labels.host }} has a row remap pending "
            "(remapped_rows.pending = {{ $value }}): it takes effect at the next GPU reset. Cordon the node, drain it "
            "and reset the GPU (or reboot).",
            runbook_base,
        ),
    ]


def fleet_alerts(runbook_base: str = RUNBOOK) -> list[Rule]:
    """Alerts for every node whatever its release: on ``up`` and on the recorded series."""
    by = series.keep()
    finished = series.REQUESTS_FINISHED_RATE
    reason = FINISHED_REASON_LABEL
    return [
        _alert(
            NODE_DOWN,
            f'up{{job="{series.JOB}"}} == 0',
            "2m",
            "critical",
            "vLLM node {{ $labels.host }} is down",
            "Prometheus cannot scrape {{ $labels.instance }} (host {{ $labels.host }}, profile {{ $labels.profile }}, "
            "vLLM {{ $labels.vllm_version }}) for 2 minutes: up = {{ $value }}.",
            runbook_base,
        ),
        _alert(
            KV_CACHE_FULL,
            f"{series.KV_CACHE_USAGE} > {number(KV_CACHE_FULL_RATIO)}",
            "10m",
            "warning",
            "KV cache of {{ $labels.host }} is nearly full",
            "KV-cache usage of {{ $labels.host }} (its fullest engine) is {{ $value | humanizePercentage }}, above "
            f"{KV_CACHE_FULL_RATIO:.0%} for 10 minutes: new requests wait or running ones get preempted.",
            runbook_base,
        ),
        _alert(
            REQUEST_ERRORS,
            f'{finished}{{{reason}="{ERROR_REASON}"}} > 0',
            "0m",
            "critical",
            "vLLM on {{ $labels.host }} fails requests",
            f'{{{{ $value | printf "%.3g" }}}} requests/s on {{{{ $labels.host }}}} finished with reason '
            f'"{ERROR_REASON}" (an internal error, answered 500) over the last {W}.',
            runbook_base,
        ),
        _alert(
            REQUESTS_ABORTED,
            f'sum by ({by}) ({finished}{{{reason}="{ABORT_REASON}"}}) / sum by ({by}) ({finished})'
            f" > {number(ABORTED_SHARE)}",
            "10m",
            "warning",
            "Many requests to {{ $labels.host }} are aborted",
            f"{{{{ $value | humanizePercentage }}}} of the requests finished on {{{{ $labels.host }}}} over the "
            f'last {W} were aborted (reason "{ABORT_REASON}"), above {ABORTED_SHARE:.0%} for 10 minutes: clients '
            "give up or time out.",
            runbook_base,
        ),
    ]


def _latency_alert(scope: Scope, sb: SloBucket, alert: str, what: str, runbook_base: str) -> Rule:
    sel = scope.selector(job=False)
    sel_le = scope.selector(job=False, extra={"le": le_matcher(sb.bucket_s)})
    expr = (
        f"(1 - ({series.bucket_rate(sb.signal)}{sel_le} / ignoring (le) {series.count_rate(sb.signal)}{sel}))"
        f" > {number(round(1 - SLO_QUANTILE, 6))}"
    )
    extra = {"slo_bucket": sb.note} if sb.note else {}
    return _alert(
        alert,
        expr,
        "10m",
        "warning",
        f"{what} p95 of {{{{ $labels.host }}}} above its SLO ({_g(sb.slo_s)} s)",
        f"{{{{ $value | humanizePercentage }}}} of the {what} observations on {{{{ $labels.host }}}} over the last {W} "
        f"took longer than {_g(sb.bucket_s)} s (more than {1 - SLO_QUANTILE:.0%}): p95 is above the SLO of profile "
        f"{scope.profile.name} ({_g(sb.slo_s)} s; the histogram's p95 reads "
        f"{_value_of(series.quantile(sb.signal, 95))}).",
        runbook_base,
        scope,
        **extra,
    )


def itl_signal(scope: Scope, metrics: ReleaseMetrics) -> Signal:
    """The histogram the ITL SLO is judged on: with speculation one ITL observation covers every token accepted in
    a step, so the per-request time per output token (where the release has it) is the per-token figure."""
    return "tpot" if scope.speculative and metrics.has("tpot") else "itl"


def scope_alerts(scope: Scope, metrics: ReleaseMetrics, runbook_base: str = RUNBOOK) -> tuple[list[Rule], list[Note]]:
    """The scope's alerts from its profile (SLOs, speculation, cache config) and what could not be made exact."""
    rules: list[Rule] = []
    notes: list[Note] = []
    slo = scope.profile.slo
    sel = scope.selector(job=False)
    latency: list[tuple[Signal, float | None, str, str]] = [
        ("ttft", slo.ttft_p95_s, TTFT_SLO, "TTFT"),
        (itl_signal(scope, metrics), slo.itl_p95_s, ITL_SLO, "ITL"),
    ]
    for signal, slo_s, alert, what in latency:
        if slo_s is None:
            continue
        sb = slo_bucket(scope.profile, metrics, signal, slo_s)
        if sb.note:
            notes.append(Note(scope.label, f"{alert}: {sb.note}"))
        rules.append(
            _latency_alert(scope, sb, alert, what if signal != "tpot" else "time per output token", runbook_base)
        )

    budget = slo.max_preemptions
    rules.append(
        _alert(
            PREEMPTIONS,
            f"{series.PREEMPTIONS_INCREASE}{sel} > {budget}",
            "0m",
            "warning",
            "vLLM on {{ $labels.host }} preempts requests",
            f"{{{{ $value | humanize }}}} preemptions on {{{{ $labels.host }}}} over the last {W} (profile "
            f"{scope.profile.name} tolerates {budget}): the KV cache is too small for the batch, requests are "
            "recomputed.",
            runbook_base,
            scope,
        )
    )

    if scope.speculative:
        floor = slo.min_spec_acceptance_rate
        if floor is None:
            notes.append(Note(scope.label, f"{SPEC_ACCEPTANCE}: the profile sets no min_spec_acceptance_rate"))
        elif not metrics.has("spec_accepted_tokens") or not metrics.has("spec_draft_tokens"):
            notes.append(Note(scope.label, f"{SPEC_ACCEPTANCE}: vLLM {metrics.version} has no V1 spec-decode counters"))
        else:
            rules.append(
                _alert(
                    SPEC_ACCEPTANCE,
                    f"{series.SPEC_ACCEPTANCE_RATIO}{sel} < {number(floor)}",
                    "15m",
                    "warning",
                    "Speculative decoding on {{ $labels.host }} accepts too few drafts",
                    f"{{{{ $value | humanizePercentage }}}} of the drafted tokens on {{{{ $labels.host }}}} were "
                    f"accepted over the last {W}, below profile {scope.profile.name}'s floor of {floor:.0%}: "
                    "speculation costs more than it gives.",
                    runbook_base,
                    scope,
                )
            )

    drift, unseen = _drift_alert(scope, metrics, runbook_base)
    rules.append(drift)
    if unseen:
        notes.append(Note(scope.label, f"{CONFIG_DRIFT}: vLLM {metrics.version} exposes no label {', '.join(unseen)}"))
    return rules, notes


def _drift_alert(scope: Scope, metrics: ReleaseMetrics, runbook_base: str) -> tuple[Rule, list[str]]:
    info = metrics.sample("cache_config_info")
    want, unseen = desired_labels(scope.profile, metrics)
    sel = scope.selector()
    sel_want = scope.selector(extra={k: f"={_quote(v)}" for k, v in want.items()})
    by = series.keep()
    expr = f"count by ({by}) ({info}{sel}) unless on ({by}) {info}{sel_want}"
    live = " ".join(
        f'{k}={{{{ with printf "{info}{{host=%q}}" $labels.host | query }}}}'
        f"{{{{ with first . }}}}{{{{ .Labels.{k} }}}}{{{{ end }}}}{{{{ end }}}}"
        for k in want
    )
    desired = " ".join(f"{k}={v}" for k, v in want.items())
    rule = _alert(
        CONFIG_DRIFT,
        expr,
        "5m",
        "warning",
        "vLLM on {{ $labels.host }} runs another cache config than its profile",
        f"The live {info} of {{{{ $labels.host }}}} ({{{{ $value }}}} engine(s)) differs from profile "
        f"{scope.profile.name}: desired {desired}; live {live}.",
        runbook_base,
        scope,
    )
    return rule, unseen


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
