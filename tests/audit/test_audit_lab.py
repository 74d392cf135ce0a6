"""`vllm-fleet audit` on the converged lab (real hosts, real vLLM): a converged fleet audits clean, each drift
injected by hand is found by its own finding and nothing else, an unreachable host is exit 2 with the other still
reported, and the audit changes nothing on a host."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.converge.rollout_helpers import snapshot, with_max_num_seqs
from tests.fixtures_lab import hosts_of
from vllm_fleet.audit import audit, judge_bundle
from vllm_fleet.audit.collect import Target
from vllm_fleet.audit.desired import targets
from vllm_fleet.deploy.ansible import PlaybookResult, run_playbook
from vllm_fleet.fleet.spec import plan_fleet
from vllm_fleet.lab import config as lab_config
from vllm_fleet.lab.ssh import ssh_argv
from vllm_fleet.lab.stack import lab_fleet, lab_role_vars
from vllm_fleet.profiles.render import render

pytestmark = pytest.mark.lab
UNIT = "vllm-main.service"
STATE = (
    f"systemctl show -p MainPID -p NRestarts -p ActiveState {UNIT}; sha256sum /etc/vllm/* "
    f"/etc/systemd/system/{UNIT}; ls -la --time-style=full-iso /etc/vllm /etc/systemd/system/{UNIT}"
)


def ssh(site: Any, ip: str, command: str) -> str:
    argv = ssh_argv(ip, Path(site.state.ssh_key), Path(site.state.known_hosts), command)
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout


def wait_healthy(ip: str, timeout: float = 180.0) -> None:
    """After a restart by hand: until /health answers (a stopped service is left stopped)."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://{ip}:8000/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(2)


@pytest.fixture(scope="module")
def lab_targets(site: Any, first_converge: PlaybookResult) -> list[Target]:
    return targets(plan_fleet(lab_fleet(site.state, site.model_dir)))


def run(site: Any, lab_targets: list[Target], out: Path) -> dict[str, str]:
    result = audit(lab_targets, out, private_key=Path(site.state.ssh_key).read_text())
    return {f.id: f.status for f in result.findings if f.status not in ("passed", "not-applicable")}


def failed_checks(findings: dict[str, str], host: str) -> set[str]:
    return {i.split("@")[0] for i, s in findings.items() if s == "failed" and i.endswith(f"@{host}")}


def test_a_converged_fleet_audits_clean_and_changes_nothing(
    site: Any, lab_targets: list[Target], tmp_path: Path
) -> None:
    before = {h.name: ssh(site, h.ip, STATE) for h in site.state.hosts}
    result = audit(lab_targets, tmp_path, private_key=Path(site.state.ssh_key).read_text())
    bad = [(f.id, f.expected, f.actual) for f in result.findings if f.status in ("failed", "error")]
    assert bad == [] and result.exit_code == 0
    assert {h.name: ssh(site, h.ip, STATE) for h in site.state.hosts} == before  # read-only
    # Reports read back by their own parsers; the verdict is reproducible from the evidence alone.
    doc = json.loads((tmp_path / "audit.json").read_text())
    assert doc["summary"]["result"] == "compliant" and len(doc["summary"]["hosts"]) == len(site.state.hosts)
    suites = ET.parse(tmp_path / "audit.junit.xml").getroot()
    assert {s.get("name") for s in suites} == {h.name for h in site.state.hosts}
    assert [f.to_dict() for f in judge_bundle(tmp_path / "evidence")] == [f.to_dict() for f in result.findings]
    print(f"audit of {len(lab_targets)} hosts: {result.wall_s:.2f} s")


def test_each_drift_is_found_and_nothing_else(site: Any, lab_targets: list[Target], tmp_path: Path) -> None:
    """Drifts injected by hand, one per host at a time (two rounds: those that restart nothing, then those that
    restart or stop the server): each host's failed checks are exactly its own drift's, a host with none has
    none, and every drift undone audits clean again."""
    first, second, third = (h.name for h in site.state.hosts)
    ip = {h.name: h.ip for h in site.state.hosts}
    site_packages = "$(/opt/vllm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
    version = f"{site_packages}/vllm*.dist-info/METADATA"
    dropin = "/etc/systemd/system/vllm-main.service.d"
    keep = "cp -p /etc/vllm/main.yaml /root/main.yaml.orig && "
    six = "sed -i 's/^max-num-seqs: 8$/max-num-seqs: 6/' /etc/vllm/main.yaml"
    rounds: list[dict[str, tuple[str, str, set[str], str]]] = [
        {
            first: (
                "config edited on disk, not restarted",
                keep + six,
                {"VF-CFG-DISK", "VF-PROC-STALE"},
                "cp -p /root/main.yaml.orig /etc/vllm/main.yaml",
            ),
            second: (
                "the installed vLLM changed by hand",
                f"sed -i 's/^Version: 0[.]32[.]0/Version: 0.32.1/' {version}",
                {"VF-VER-PKG"},
                f"sed -i 's/^Version: 0[.]32[.]1/Version: 0.32.0/' {version}",
            ),
            third: (
                "a drop-in added to the unit",
                f"mkdir -p {dropin} && printf '[Service]\\nEnvironment=AUDIT_PROBE=1\\n' > {dropin}/probe.conf"
                " && systemctl daemon-reload",
                {"VF-UNIT-DROPIN"},
                f"rm -r {dropin} && systemctl daemon-reload",
            ),
        },
        {
            first: (
                "a flag changed and restarted by hand",
                keep + six + " && systemctl restart vllm-main",
                {"VF-CFG-DISK", "VF-RUN-CONFIG:max-num-seqs"},
                "cp -p /root/main.yaml.orig /etc/vllm/main.yaml && systemctl restart vllm-main",
            ),
            second: ("the service stopped", "systemctl stop vllm-main", {"VF-SVC-ACTIVE"}, "systemctl start vllm-main"),
            third: ("nothing", "true", set(), "true"),
        },
    ]
    for i, drifts in enumerate(rounds):
        for host, (_what, inject, _expected, _undo) in drifts.items():
            ssh(site, ip[host], inject)
        for host, (_what, _inject, expected, _undo) in drifts.items():
            if "VF-SVC-ACTIVE" not in expected:
                wait_healthy(ip[host])
        try:
            findings = run(site, lab_targets, tmp_path / str(i))
            found = {host: failed_checks(findings, host) for host in drifts}
            assert found == {host: expected for host, (_w, _i, expected, _u) in drifts.items()}, (
                [what for what, *_ in drifts.values()],
                findings,
            )
        finally:
            for host, (_what, _inject, _expected, undo) in drifts.items():
                ssh(site, ip[host], undo)
            for host in drifts:
                wait_healthy(ip[host])
    assert run(site, lab_targets, tmp_path / "after") == {}  # every drift undone: clean again


MODEL_FILE = "/opt/vllm-fleet/models/tiny-llama-lab/model.safetensors"


def test_a_changed_model_file_is_found_by_the_audit_and_refused_by_the_next_rollout(
    site: Any, lab_targets: list[Target], tmp_path: Path
) -> None:
    """One flipped bit in the served weights of the canary: the audit finds that (VF-MODEL-FILES on that host, and
    nothing else), and a rollout of a new config stops at the canary before restarting it on those files, every
    host still serving what it served (same process, same config)."""
    canary = site.state.hosts[0]
    ssh(site, canary.ip, f"cp -p {MODEL_FILE} /root/model.orig")
    flip = f"p='{MODEL_FILE}'; b=bytearray(open(p,'rb').read()); b[4096] ^= 1; open(p,'r+b').write(b)"
    ssh(site, canary.ip, f'python3 -c "{flip}"')
    before = snapshot(site)
    failures: list[str] = []

    def failed_task(event: dict[str, Any]) -> bool:
        if event.get("event") == "runner_on_failed":
            failures.append(str((event.get("event_data") or {}).get("res", {}).get("msg", "")))
        return True

    try:
        result = audit(lab_targets, tmp_path / "tampered", private_key=Path(site.state.ssh_key).read_text())
        failed = {f.id: f.actual for f in result.findings if f.status == "failed"}
        assert list(failed) == [f"VF-MODEL-FILES@{canary.name}"], failed
        assert failed[f"VF-MODEL-FILES@{canary.name}"].startswith("model.safetensors: sha256 ")
        changed = with_max_num_seqs(6)
        lab_vars = {**lab_role_vars(site.state, site.model_dir), "vllm_fleet_profile": "cpu-lab"}
        key = Path(site.state.ssh_key).read_text()
        rolled = run_playbook(
            "rollout.yml",
            hosts_of(site),
            {
                **lab_vars,
                "vllm_config": render(changed).config,
                "vllm_fleet_profile_data": changed.model_dump(mode="json", exclude_none=True),
            },
            private_key=key,
            event_handler=failed_task,
        )
        assert not rolled.ok and rolled.count("failures", canary.name) == 1
        assert any("model.safetensors: sha256 " in m and "does not hold the files" in m for m in failures), failures
        assert snapshot(site) == before  # nothing restarted, no config or journal written: the rollout stopped
        # A full converge of that host (staging again from the controller) refuses the files too, before copying:
        # a change on a host is reported, not silently repaired.
        failures.clear()
        converged = run_playbook(
            "site.yml", hosts_of(site), {**lab_vars, "vllm_fleet_hosts": canary.name}, private_key=key,
            event_handler=failed_task,
        )  # fmt: skip
        assert not converged.ok and converged.count("failures", canary.name) == 1
        assert any("model.safetensors: sha256 " in m for m in failures), failures
        assert snapshot(site) == before
    finally:
        ssh(site, canary.ip, f"cp -p /root/model.orig {MODEL_FILE} && rm /root/model.orig")
    assert run(site, lab_targets, tmp_path / "restored") == {}


def test_an_unreachable_host_is_exit_2_and_the_others_are_reported(
    site: Any, lab_targets: list[Target], tmp_path: Path
) -> None:
    nowhere = lab_config.lab_net().host_ip(lab_config.MAX_HOSTS)  # in the lab subnet, no host there
    gone = replace(lab_targets[0], desired=replace(lab_targets[0].desired, address=nowhere))
    result = audit([gone, *lab_targets[1:]], tmp_path, private_key=Path(site.state.ssh_key).read_text())
    assert result.exit_code == 2
    assert [(f.check, f.status) for f in result.findings if f.host == gone.desired.host] == [("VF-REACH", "error")]
    other = lab_targets[1].desired.host
    assert {f.status for f in result.findings if f.host == other} <= {"passed", "not-applicable", "not-reviewed"}


def test_the_audit_playbook_gives_the_same_verdict_from_an_inventory(site: Any, tmp_path: Path) -> None:
    """playbooks/audit.yml, for users without Pulumi: the inventory's hosts audited by the same code."""
    import os
    import sys

    import yaml

    hosts = {
        h.name: {
            "ansible_host": h.ip,
            "ansible_user": "root",
            "vllm_fleet_profile": "cpu-lab",
            "vllm_fleet_host_key": h.host_key,
        }
        for h in site.state.hosts
    }
    inventory = tmp_path / "hosts.yml"
    group_vars = {k: v for k, v in lab_role_vars(site.state, site.model_dir).items()}
    inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm_nodes": {"hosts": hosts, "vars": group_vars}}}}))
    out = tmp_path / "reports"
    env = {**os.environ, "SSH_AUTH_SOCK": "", "ANSIBLE_NOCOLOR": "1"}
    key = tmp_path / "key"
    key.write_text(Path(site.state.ssh_key).read_text())
    key.chmod(0o600)
    playbook = Path(__file__).resolve().parents[2] / "playbooks" / "audit.yml"
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory), str(playbook),
         "-e", f"vllm_fleet_python={sys.executable}", "-e", f"vllm_fleet_audit_out={out}",
         "-e", f"vllm_fleet_audit_ssh_key={key}"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads((out / "audit.json").read_text())
    assert doc["summary"]["result"] == "compliant"
    assert sorted(doc["summary"]["hosts"]) == sorted(hosts)
    del hosts[site.state.hosts[0].name]["vllm_fleet_host_key"]  # no pinned key: refused before any host is read
    inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm_nodes": {"hosts": hosts, "vars": group_vars}}}}))
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_fleet.cli", "audit", str(inventory), "--out", str(out / "x"), "--ssh-key",
         str(key)], capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 2 and "vllm_fleet_host_key: missing" in proc.stderr


def test_a_hostile_host_among_real_ones_is_one_error_within_the_deadline(
    site: Any, lab_targets: list[Target], tmp_path: Path
) -> None:
    """The real lab fleet plus one hostile host (tests/hostile_node.py: its SSH port and its HTTP endpoints drip a
    byte at a time, forever): the real hosts are judged as usual, the run ends within the host deadline, and the
    hostile host is one `error` naming the bound."""
    from tests.hostile_node import DripServer, HostileNode
    from vllm_fleet.trust.node_reads import ReadBounds

    bounds = ReadBounds(request_s=5.0, ssh_s=20.0)
    with HostileNode("drip") as node, DripServer() as ssh_side:
        desired = replace(lab_targets[0].desired, host="hostile", address="127.0.0.1", port=node.port)
        hostile = replace(lab_targets[0], desired=desired, ssh_port=ssh_side.port)
        result = audit(
            [*lab_targets, hostile], tmp_path, private_key=Path(site.state.ssh_key).read_text(), bounds=bounds
        )
    assert result.exit_code == 2
    mine = [f for f in result.findings if f.host == "hostile"]
    assert [(f.check, f.status) for f in mine] == [("VF-REACH", "error")], mine
    assert "deadline" in str(mine[0].actual), mine[0]
    meta = json.loads((tmp_path / "evidence" / "hostile" / "meta.json").read_text())
    assert meta["finished_at"] - meta["started_at"] < bounds.ssh_s + 5  # its deadline, not the drip's forever
    for real in lab_targets:
        statuses = {f.status for f in result.findings if f.host == real.desired.host}
        assert "passed" in statuses and statuses <= {"passed", "not-applicable", "not-reviewed"}, real.desired.host
