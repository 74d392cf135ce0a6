"""The lab's Prometheus (what `vllm-fleet up` leaves beside the nodes): Debian's server, configured by
playbooks/monitoring.yml with what `vllm-fleet monitoring` generates for the lab fleet, scrapes every lab node with
the node's labels; a node restarted on an edited config with a KV cache too small for its batch fires the
preemption alert and the config-drift alert, on that node only; `lab down` stops the server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.converge.rollout_helpers import _ssh, all_serving, config_of, main_pid, rollout, router, with_max_num_seqs
from tests.fixtures_lab import converge
from tests.monitoring_samples import wait_for
from vllm_fleet.audit.collect import collect
from vllm_fleet.audit.desired import targets
from vllm_fleet.audit.reconcile import judge
from vllm_fleet.deploy.ansible import PlaybookResult
from vllm_fleet.fleet.spec import plan_fleet
from vllm_fleet.lab import config
from vllm_fleet.lab.prometheus import prometheus_down, prometheus_up
from vllm_fleet.lab.stack import lab_fleet
from vllm_fleet.monitoring import series as mseries
from vllm_fleet.monitoring.alerts import (
    CONFIG_DRIFT,
    ENGINE_WEDGED,
    GPU_ECC,
    GPU_REMAP_FAILURE,
    GPU_XID,
    NODE_CORDONED,
    PREEMPTIONS,
)
from vllm_fleet.profiles.render import render
from vllm_fleet.rollout.load import LoadClient

pytestmark = pytest.mark.lab

MODEL = "tiny-llama-lab"
SMALL_KV = 2_621_440
"""2.5 MiB: 1,280 tokens of the tiny model's float32 KV (2 KiB a token), enough for one max_model_len (1,024)
sequence, far too few for 8 sequences of ~460 tokens: the scheduler must preempt."""
ORIGINAL = "/root/main.yaml.monitoring-test"


class Prom:
    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params: str) -> Any:
        body = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10).json()
        assert body.get("status") == "success", (path, params, body)
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name]


@pytest.fixture(scope="module")
def lab_prometheus(first_converge: PlaybookResult, site: Any) -> Iterator[tuple[Prom, Any]]:
    assert first_converge.ok
    all_serving(site)
    plan = plan_fleet(lab_fleet(site.state, site.model_dir))
    url = prometheus_up(site.state, plan)
    try:
        yield Prom(url), plan
    finally:
        prometheus_down(site.state.state_dir)


def test_the_lab_prometheus_scrapes_every_node_with_its_labels(lab_prometheus: tuple[Prom, Any], site: Any) -> None:
    prom, plan = lab_prometheus
    assert prom.url == config.lab_net().prometheus_url
    names = {h.name for h in site.state.hosts}
    wait_for(
        "every lab node scraped and up",
        lambda: (r := prom.query(f'up{{job="{mseries.JOB}"}} == 1')) and {s["metric"]["host"] for s in r} == names,
        90,
    )
    wait_for(  # and each node's sentinel, with the same labels
        "every lab node's sentinel scraped and up",
        lambda: (
            (r := prom.query(f'up{{job="{mseries.SENTINEL_JOB}"}} == 1')) and {s["metric"]["host"] for s in r} == names
        ),
        90,
    )
    active = prom.api("targets")["activeTargets"]
    targets = {t["labels"]["host"]: t["labels"] for t in active if t["labels"]["job"] == mseries.JOB}
    for node in plan.nodes:
        labels = targets[node.name]
        assert labels["config_hash"] == node.config_hash and labels["profile"] == node.profile == "cpu-lab"
        assert labels["vllm_version"] == node.vllm_version and labels["instance"] == node.endpoint.split("//")[1]
    # Load through the router until every node's tokens/s is recorded: then every recording rule the nodes' release
    # and profile got returns a series for every node (a stale vLLM name would return nothing).
    with LoadClient(site.router_url, MODEL, workers=3, max_tokens=16, pause=0.2) as load:
        wait_for(
            "tokens/s recorded for every node",
            lambda: {s["metric"]["host"] for s in prom.query(f"{mseries.GENERATION_TOKENS_RATE} > 0")} == names,
            120,
        )
    assert load.report.failed == [] and load.report.ok > 0, load.report
    generated = config.prometheus_dir(site.state.state_dir) / "etc" / "rules"
    records = sorted(
        {
            r["record"]
            for f in generated.glob("*.rules.yml")
            for g in yaml.safe_load(f.read_text())["groups"]
            for r in g["rules"]
            if "record" in r
        }
    )
    assert len(records) >= 20, records
    per_host = {name: sorted({s["metric"].get("host", "") for s in prom.query(name)}) for name in records}
    # A rule per node returns every node; one over the fleet (no host label) returns its series: never nothing.
    fleet_wide = {name for name, found in per_host.items() if found == [""]}
    assert {name: found for name, found in per_host.items() if name not in fleet_wide and found != sorted(names)} == {}
    # The generated rules are loaded and healthy, the drift alert quiet for the converged fleet.
    rules = rules_now(prom)
    assert len(rules) >= 30 and all(r["health"] in ("ok", "unknown") for r in rules), rules
    drift = wait_for(
        "the drift rule evaluated",
        lambda: [r for r in rules_now(prom) if r["name"] == CONFIG_DRIFT and r["health"] == "ok"],
        60,
    )
    assert drift[0]["state"] == "inactive", drift
    assert prom.alerts(CONFIG_DRIFT) == [] and prom.alerts(PREEMPTIONS) == []


def test_a_wedged_engine_leaves_the_router_alerts_and_comes_back(
    lab_prometheus: tuple[Prom, Any], site: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGSTOP of a real EngineCore under load through the router (vLLM's /health stays 200 all along): the node's
    sentinel answers /ready 503 and HAProxy takes it out within 15 s, Prometheus scrapes the wedge and
    VllmEngineWedged is pending; SIGCONT brings the node back by itself and the requests it held finish: none
    failed. (The watchdog's kill of a real unit is tests/unit/test_sentinel.py's; the watchdog on a lab node under
    `vllm bench serve` is bench/wedge.py.)"""
    prom, plan = lab_prometheus
    host = site.state.hosts[1]
    node = next(n for n in plan.nodes if n.name == host.name)
    h, r = _ssh(site, host), router(site)
    all_serving(site)
    engine = h.run("pgrep -u vllm -f EngineCore").stdout.split()
    assert len(engine) == 1, engine
    figures: dict[str, Any] = {}
    with LoadClient(site.router_url, MODEL, workers=4, pause=0.5, timeout=240) as load:
        wait_for("requests flowing", lambda: load.report.ok >= 6, 60)
        assert h.run(f"kill -STOP {engine[0]}").rc == 0
        stopped = time.monotonic()
        try:
            r.wait(host.name, lambda s: s.operational == "down", "out of rotation", 30)
            figures["left_rotation_s"] = round(time.monotonic() - stopped, 1)
            assert httpx.get(f"{node.endpoint}/health", timeout=5).status_code == 200  # vLLM itself says healthy
            ok = load.report.ok
            wait_for("the others serving", lambda: load.report.ok >= ok + 4, 60)
            wedged = f'vllm_fleet_engine_wedged{{job="{mseries.SENTINEL_JOB}",host="{host.name}"}} == 1'
            wait_for("the wedge scraped", lambda: prom.query(wedged), 45)
            pending = wait_for(
                "VllmEngineWedged pending",
                lambda: [a for a in prom.alerts(ENGINE_WEDGED) if a["labels"]["host"] == host.name],
                45,
            )
            figures["alert_pending_s"] = round(time.monotonic() - stopped, 1)
        finally:
            assert h.run(f"kill -CONT {engine[0]}").rc == 0
        resumed = time.monotonic()
        r.wait_serving(host.name, 30)
        figures["back_after_sigcont_s"] = round(time.monotonic() - resumed, 1)
        wait_for("the held requests answered", lambda: _in_flight(h) == 0, 60)
    figures["failed"] = len(load.report.failed)
    with capsys.disabled():
        print(f"\nwedge figures ({host.name}, {load.report.ok} requests ok): {json.dumps(figures)}")
    assert load.report.failed == [], load.report.failed
    assert figures["left_rotation_s"] <= 15, figures
    assert pending[0]["annotations"]["summary"] == f"vLLM engine on {host.name} is wedged", pending
    assert h.run("test -e /var/lib/vllm-sentinel/main/watchdog.jsonl").rc == 1  # stopped shorter than its time


def test_gpu_faults_alert_and_a_cordoned_node_leaves_the_router(lab_prometheus: tuple[Prom, Any], site: Any) -> None:
    """The stand-in nvidia-smi reports uncorrected ECC errors and a failed row remap, a real-format Xid line lands in
    the node's journal: the sentinel exports them, the generated GPU alerts fire for that node only. A person
    cordons it (playbooks/cordon.yml; a reason that looks like a template is written as text): the router takes it
    out within seconds (vLLM still serving), a rollout of a new config skips it, the audit shows the cordon and
    VllmNodeCordoned fires; uncordoned (playbooks/uncordon.yml), it is back."""
    prom, _ = lab_prometheus
    host = site.state.hosts[-1]
    h, r = _ssh(site, host), router(site)
    all_serving(site)
    conf = "/etc/vllm-fleet-standin/nvidia-smi.conf"
    xid = "NVRM: Xid (PCI:0000:01:00): 79, pid=4242, name=VLLM::EngineCore, GPU has fallen off the bus."
    play = (
        f"mkdir -p {conf.rsplit('/', 1)[0]} && touch {conf} && cp -p {conf} {conf}.test && "
        f"printf 'GPU_ECC_UNCORRECTED=3\\nGPU_REMAP_FAILURE=Yes\\n' >> {conf} && logger -t kernel '{xid}'"
    )
    assert h.run(play).rc == 0
    try:
        for alert in (GPU_ECC, GPU_REMAP_FAILURE, GPU_XID):
            try:
                fired = wait_for(
                    f"{alert} firing", lambda a=alert: [x for x in prom.alerts(a) if x["state"] == "firing"], 90
                )
            except pytest.fail.Exception:
                pytest.fail(f"{alert} not firing; the node's sentinel says {_state(h).get('gpu')}")
            assert {x["labels"]["host"] for x in fired} == {host.name}, fired
        xids = prom.query(f'vllm_fleet_gpu_xid_errors_total{{host="{host.name}"}}')
        assert [(x["metric"]["pci"], x["metric"]["xid"], x["value"][1]) for x in xids] == [("0000:01:00", "79", "1")]
    finally:
        assert h.run(f"mv {conf}.test {conf}").rc == 0
    reason = "GPU 0 row remap failure (ticket 4711) {{ lookup('pipe', 'id') }}"  # data, never a template
    assert converge(site, "cordon.yml", vllm_fleet_hosts=host.name, vllm_fleet_cordon_reason=reason).ok
    cordoned = time.monotonic()
    try:
        r.wait(host.name, lambda s: s.operational == "down", "out of rotation", 30)
        left = time.monotonic() - cordoned
        assert left <= 15, left
        assert h.file("/etc/vllm/main.cordon").content_string.splitlines()[0] == reason
        assert httpx.get(f"http://{host.ip}:{config.VLLM_PORT}/health", timeout=5).status_code == 200
        # A rollout of a new config skips it (its server keeps its PID and config); the audit shows the cordon.
        pid, before = main_pid(h), config_of(h)
        new = with_max_num_seqs(3)
        assert rollout(site, render(new).config, new, vllm_fleet_hosts=host.name).ok
        assert (main_pid(h), config_of(h)) == (pid, before)
        [target] = [
            t for t in targets(plan_fleet(lab_fleet(site.state, site.model_dir))) if t.desired.host == host.name
        ]
        [ev] = collect([target], private_key=Path(site.state.ssh_key).read_text())
        [finding] = [f for f in judge(target.desired, ev) if f.check == "VF-NODE-CORDON"]
        assert (finding.status, finding.actual) == ("failed", f"cordoned: {reason}"), finding
        fired = wait_for(
            "VllmNodeCordoned", lambda: [x for x in prom.alerts(NODE_CORDONED) if x["state"] == "firing"], 90
        )
        assert {x["labels"]["host"] for x in fired} == {host.name}, fired
    finally:
        assert converge(site, "uncordon.yml", vllm_fleet_hosts=host.name).ok
    assert h.run("test -e /etc/vllm/main.cordon").rc == 1
    r.wait_serving(host.name, 30)
    wait_for("the ECC alert resolved", lambda: prom.alerts(GPU_ECC) == [], 90)


def _state(h: Any) -> dict[str, Any]:
    """The node's sentinel's /state."""
    read = (
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9180/state', timeout=5).read().decode())"
    )
    state: dict[str, Any] = json.loads(h.run(f'python3 -c "{read}"').stdout or "{}")
    return state


def _in_flight(h: Any) -> int:
    """The node's sentinel's in-flight count (vLLM's /load)."""
    return int(_state(h).get("in_flight") or 0)


def rules_now(prom: Prom) -> list[dict[str, Any]]:
    return [r for g in prom.api("rules")["groups"] for r in g["rules"]]


def _load(url: str, n: int = 8, max_tokens: int = 400) -> list[int]:
    """``n`` long completions at once straight to one node; the status codes."""

    def one(i: int) -> int:
        prompt = f"Request {i} to the fleet: " + "the servers hum along in the night " * 6
        body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
        return httpx.post(f"{url}/v1/completions", json=body, timeout=300).status_code

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def test_an_edited_node_with_a_small_kv_cache_fires_preemption_and_drift(
    lab_prometheus: tuple[Prom, Any], site: Any
) -> None:
    prom, plan = lab_prometheus
    host = site.state.hosts[0]
    node = next(n for n in plan.nodes if n.name == host.name)
    h = _ssh(site, host)
    edit = (
        f"cp -p /etc/vllm/main.yaml {ORIGINAL} && "
        f"sed -i 's/^kv-cache-memory-bytes: .*$/kv-cache-memory-bytes: {SMALL_KV}/' /etc/vllm/main.yaml && "
        "grep -q '^kv-cache-memory-bytes: 2621440$' /etc/vllm/main.yaml && systemctl restart vllm-main"
    )
    assert h.run(edit).rc == 0
    try:
        wait_for(
            "the edited node healthy", lambda: httpx.get(f"{node.endpoint}/health", timeout=5).status_code == 200, 240
        )
        assert _load(node.endpoint) == [200] * 8
        live = f'vllm:num_preemptions_total{{host="{host.name}"}}'
        assert wait_for(
            "the preemptions scraped", lambda: [s for s in prom.query(live) if float(s["value"][1]) > 0], 60
        )
        fired = wait_for(
            "the preemption alert firing",
            lambda: [a for a in prom.alerts(PREEMPTIONS) if a["state"] == "firing"],
            90,
        )
        assert {a["labels"]["host"] for a in fired} == {host.name}, fired
        drift = wait_for(
            "the config-drift alert pending",
            lambda: [a for a in prom.alerts(CONFIG_DRIFT) if a["state"] in ("pending", "firing")],
            90,
        )
        assert {a["labels"]["host"] for a in drift} == {host.name}, drift
        assert f"kv_cache_memory_bytes={SMALL_KV}" in drift[0]["annotations"]["description"], drift[0]
    finally:
        assert h.run(f"cp -p {ORIGINAL} /etc/vllm/main.yaml && rm {ORIGINAL} && systemctl restart vllm-main").rc == 0
        wait_for(
            "the node back on its config",
            lambda: httpx.get(f"{node.endpoint}/health", timeout=5).status_code == 200,
            240,
        )
    wait_for("the drift alert gone", lambda: prom.alerts(CONFIG_DRIFT) == [], 90)


def test_lab_down_stops_the_lab_prometheus(lab_prometheus: tuple[Prom, Any], site: Any) -> None:
    prom, _ = lab_prometheus
    assert httpx.get(f"{prom.url}/-/ready", timeout=5).status_code == 200
    assert prometheus_down(site.state.state_dir)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{prom.url}/-/ready", timeout=2)
    assert not prometheus_down(site.state.state_dir)  # idempotent
