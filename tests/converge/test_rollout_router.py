"""Rollouts behind the lab's real router (Debian's HAProxy): a load client sends requests through it during the
whole rollout, and none may fail; a rollout killed with SIGKILL after a host's restart resumes without
restarting it twice, and leaves no host drained. These run after every test that needs the lab profile on the
hosts (tests/conftest.py orders them), so they leave the hosts on their new configs."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import testinfra

from tests.fixtures_lab import converge
from vllm_fleet.ansible import PlaybookResult
from vllm_fleet.lab import config
from vllm_fleet.profile_loader import load_profile
from vllm_fleet.rollout.load import LoadClient
from vllm_fleet.rollout.router import HAProxyRouter
from vllm_fleet.vllm.render import render

pytestmark = pytest.mark.lab

UNIT = "vllm-main.service"
JOURNAL = "/var/lib/vllm-fleet/main.rollout.json"


def _ssh(site: Any, h: Any) -> Any:
    extra = f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={site.state.known_hosts}"
    return testinfra.get_host(f"ssh://root@{h.ip}", ssh_identity_file=str(site.state.ssh_key), ssh_extra_args=extra)


def ansible_playbook_groups() -> set[int]:
    """Process groups of the ansible-playbook runs this test process started (ansible-runner gives each a session
    of its own): only those, never a lab host's processes, which the controller sees too."""
    me, groups = os.getpid(), set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), 0)
        if ppid == me and b"ansible-playbook" in cmdline:
            group = os.getpgid(int(proc.name))
            if group != os.getpgid(0):
                groups.add(group)
    return groups


def router(site: Any) -> HAProxyRouter:
    return HAProxyRouter(config.router_dir(site.state.state_dir) / "haproxy.sock")


def main_pid(h: Any) -> str:
    return str(h.run(f"systemctl show -p MainPID --value {UNIT}").stdout.strip())


def journal(h: Any) -> dict[str, Any]:
    text = h.run(f"cat {JOURNAL}").stdout
    return json.loads(text) if text.strip() else {}


def config_of(h: Any) -> str:
    return str(h.file("/etc/vllm/main.yaml").content_string)


def all_serving(site: Any) -> None:
    r = router(site)
    for h in site.state.hosts:
        r.wait_serving(h.name, 60)


def test_rollout_behind_the_router_drops_no_request(first_converge: PlaybookResult, site: Any) -> None:
    assert first_converge.ok
    all_serving(site)
    hosts = {h.name: _ssh(site, h) for h in site.state.hosts}
    before = {name: main_pid(h) for name, h in hosts.items()}
    lab = load_profile("cpu-lab")
    new = lab.model_copy(update={"scheduler": lab.scheduler.model_copy(update={"max_num_seqs": 6})})
    with LoadClient(site.router_url, "tiny-llama-lab") as load:
        result = converge(site, "rollout.yml", vllm_config=render(new).config)
    assert result.ok, result.stats
    report = load.report
    assert report.failed == [], report.failed[:5]
    assert report.ok >= 20, report  # requests really flowed during the whole rollout
    for name, h in hosts.items():
        assert "max-num-seqs: 6" in config_of(h)
        assert main_pid(h) != before[name]  # restarted on the new config
        assert journal(h)["phase"] == "done"
        state = router(site).state(name)
        assert (state.admin, state.operational) == ("ready", "up")


def test_rollout_killed_after_a_restart_resumes_without_restarting_twice(
    first_converge: PlaybookResult, site: Any
) -> None:
    assert first_converge.ok
    all_serving(site)
    first = site.state.hosts[0]
    h = _ssh(site, first)
    pid0 = main_pid(h)
    lab = load_profile("cpu-lab")
    new = lab.model_copy(update={"scheduler": lab.scheduler.model_copy(update={"max_num_seqs": 5})})
    killed: dict[str, Any] = {}

    def kill_after_restart() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if journal(h).get("phase") == "restarting" and main_pid(h) not in ("0", pid0):
                killed["groups"] = ansible_playbook_groups()
                for group in killed["groups"]:
                    os.killpg(group, signal.SIGKILL)
                killed["pid"] = main_pid(h)
                killed["journal"] = journal(h)
                return
            time.sleep(0.3)

    killer = threading.Thread(target=kill_after_restart)
    killer.start()
    interrupted = converge(site, "rollout.yml", vllm_config=render(new).config, vllm_fleet_hosts=first.name)
    killer.join()
    assert killed, "the rollout was never seen restarting the host"
    assert killed["groups"], "no ansible-playbook of this test was found to kill"
    assert not interrupted.ok
    assert killed["journal"]["phase"] == "restarting"
    assert router(site).state(first.name).admin == "drain"  # killed while out of the router

    again = converge(site, "rollout.yml", vllm_config=render(new).config, vllm_fleet_hosts=first.name)
    assert again.ok, again.stats
    assert main_pid(h) == killed["pid"]  # the restart that already happened was verified, not repeated
    assert journal(h)["phase"] == "done" and journal(h)["target"] == killed["journal"]["target"]
    assert "max-num-seqs: 5" in config_of(h)
    state = router(site).state(first.name)
    assert (state.admin, state.operational) == ("ready", "up")  # no host left drained
