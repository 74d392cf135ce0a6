"""`site.yml` on real lab hosts: the first converge makes each a serving vLLM node, the second changes nothing,
and testinfra checks the state the roles promise."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import testinfra

from vllm_fleet.deploy.ansible import PlaybookResult
from vllm_fleet.lab.stack import LAB_DRIVER_VERSION
from vllm_fleet.probes.smoke import smoke
from vllm_fleet.profiles.loader import load_profile

pytestmark = pytest.mark.lab
UNIT = "vllm-main.service"


def host(site: Any, name: str) -> Any:
    state = site.state
    h = state.host(name)
    extra = f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={state.known_hosts}"
    return testinfra.get_host(f"ssh://root@{h.ip}", ssh_identity_file=str(state.ssh_key), ssh_extra_args=extra)


def names(site: Any) -> list[str]:
    return [h.name for h in site.state.hosts]


def test_first_converge_succeeds(first_converge: PlaybookResult, site: Any) -> None:
    assert first_converge.ok, first_converge.stats
    for name in names(site):
        assert first_converge.count("changed", name) > 0


def test_second_converge_changes_nothing(second_converge: PlaybookResult, site: Any) -> None:
    """On one host (tests/fixtures_lab.py's converge_again), right after the first converge."""
    last = site.state.hosts[-1].name
    again = second_converge
    assert again.ok, again.stats
    touched = {host for per_host in again.stats.values() for host in per_host}
    assert touched & set(names(site)) == {last}, again.stats  # it ran there, and only there
    assert again.count("changed", last) == 0, again.stats


def test_driver_packages_pinned_and_held(first_converge: PlaybookResult, site: Any) -> None:
    for name in names(site):
        h = host(site, name)
        smi = h.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
        assert smi.stdout.strip() == LAB_DRIVER_VERSION  # pinned, though a newer 580 sits in the mirror
        assert h.package("nvidia-kernel-open-dkms").is_installed  # Hopper: open kernel modules
        assert not h.package("nvidia-kernel-dkms").is_installed
        holds = h.run("dpkg --get-selections | awk '$2==\"hold\"{print $1}'").stdout.split()
        assert "nvidia-kernel-open-dkms" in holds and "cuda-toolkit-13-0" in holds
        assert h.file("/etc/modprobe.d").is_directory
        assert h.service("nvidia-persistenced").is_running


def test_vllm_node_serves(first_converge: PlaybookResult, site: Any) -> None:
    prof = load_profile("cpu-lab")
    for state_host in site.state.hosts:
        h = host(site, state_host.name)
        svc = h.service(UNIT)
        assert svc.is_enabled and svc.is_running
        assert h.socket(f"tcp://0.0.0.0:{prof.frontend.port}").is_listening
        cfg = h.file("/etc/vllm/main.yaml")
        assert cfg.exists and cfg.user == "root" and not cfg.mode & 0o007
        assert h.user("vllm").shell in ("/usr/sbin/nologin", "/bin/false")
        url = f"http://{state_host.ip}:{prof.frontend.port}"
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        body = {"model": prof.model.served_model_name, "prompt": "Once upon a time in a lab", "max_tokens": 8}
        r = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
        assert "vllm:cache_config_info" in httpx.get(f"{url}/metrics", timeout=10).text


def test_smoke_gate_passes_on_each_node(first_converge: PlaybookResult, site: Any) -> None:
    prof = load_profile("cpu-lab")
    for h in site.state.hosts:
        result = smoke(f"http://{h.ip}:{prof.frontend.port}", prof, timeout_s=60)
        assert result.exit_code == 0, [c for c in result.checks if c.status != "pass"]


def test_unit_security_exposure(first_converge: PlaybookResult, site: Any) -> None:
    h = host(site, names(site)[0])
    out = h.run(f"systemd-analyze security {UNIT} --no-pager")
    print(out.stdout[-1500:])
    score = float(out.stdout.strip().splitlines()[-1].split("exposure level for")[1].split(":")[1].split()[0])
    assert score <= 2.5
