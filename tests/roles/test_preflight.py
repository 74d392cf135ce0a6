"""playbooks/validate.yml: the inventory check (kubespray's validate_inventory pattern) and the controller-side
render of each host's decode profile, without connecting to any host."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

Run = Callable[..., Any]
Tool = Callable[[str], str]


def _inventory(tmp_path: Path, hosts: dict[str, dict[str, Any]]) -> Path:
    for host in hosts.values():
        host.setdefault("ansible_connection", "local")
        host.setdefault("ansible_python_interpreter", sys.executable)
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"vllm_nodes": {"hosts": hosts}}}}))
    return path


GOOD = {
    "vllm_fleet_profile": "cpu-lab",
    "nvidia_driver_version": "580.82.07",
    "nvidia_driver_gpu_architecture": "hopper",
    "cuda_toolkit_version": "13.0.2",
}


def test_a_complete_inventory_passes_and_renders_the_profile(run: Run, tool: Tool, tmp_path: Path) -> None:
    inv = _inventory(tmp_path, {"node1": dict(GOOD)})
    proc = run([tool("ansible-playbook"), "-i", str(inv), "playbooks/validate.yml"])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "cpu-lab on vLLM 0.32.0" in proc.stdout
    assert "kv-cache-memory-bytes" in proc.stdout


def test_problems_are_all_reported_with_the_release(run: Run, tool: Tool, tmp_path: Path) -> None:
    bad = {
        "nvidia_driver_skip_reboot": True,  # NVIDIA's role's variable
        "nvidia_driver_version": "580",
        "nvidia_driver_branch": "570",
        "nvidia_driver_gpu_architecture": "kepler",  # no driver branch of the table supports it
        "nvidia_driver_reboot": "false",  # a string, not a boolean
    }
    inv = _inventory(tmp_path, {"node1": dict(GOOD), "node2": bad})
    proc = run([tool("ansible-playbook"), "-i", str(inv), "playbooks/validate.yml"])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    for expected in (
        "nvidia_driver_skip_reboot: not read since vllm-fleet 0.1.0; use nvidia_driver_reboot: false",
        "cuda_toolkit_version: missing",
        "vllm_fleet_profile: missing",
        "nvidia_driver_reboot: must be a YAML boolean",
        'nvidia_driver_gpu_architecture: "kepler" is not one of maxwell, pascal, volta, turing, ampere, ada,',
        'nvidia_driver_version: "580" is not an exact version',
        "nvidia_driver_branch: 570 does not match nvidia_driver_version 580",
    ):
        assert expected in out, expected
    # any_errors_fatal is site.yml's; validate.yml reports every host: the good one still renders.
    assert "node2: 8 inventory problem(s)" in out


def test_rollout_only_needs_what_the_server_needs(run: Run, tool: Tool, tmp_path: Path) -> None:
    inv = _inventory(tmp_path, {"node1": {"vllm_fleet_profile": "cpu-lab"}})
    proc = run([tool("ansible-playbook"), "-i", str(inv), "playbooks/rollout.yml", "--tags", "preflight"])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_a_broken_profile_fails_on_the_controller(run: Run, tool: Tool, tmp_path: Path) -> None:
    profile = tmp_path / "broken.yaml"
    profile.write_text(
        yaml.safe_dump({"name": "broken", "hardware": "l40", "vllm_version": "0.32.0", "model": "x/y", "swap_space": 4})
    )
    inv = _inventory(tmp_path, {"node1": {**GOOD, "vllm_fleet_profile": str(profile)}})
    proc = run([tool("ansible-playbook"), "-i", str(inv), "playbooks/validate.yml"])
    assert proc.returncode != 0
    assert "swap_space" in proc.stdout + proc.stderr


def test_preflight_names_the_kernel_module_flavour_and_why(run: Run, tool: Tool, tmp_path: Path) -> None:
    """Done when (issue 14): preflight output for an Ada, a Hopper and a Volta host names the flavour and why."""
    hosts = {
        "ada-node": {**GOOD, "nvidia_driver_gpu_architecture": "ada"},
        "hopper-node": {**GOOD, "nvidia_driver_gpu_architecture": "hopper"},
        "volta-node": {**GOOD, "nvidia_driver_gpu_architecture": "volta"},
        "hopper-535": {**GOOD, "nvidia_driver_version": "535.230.02"},
        "ada-pinned": {**GOOD, "nvidia_driver_gpu_architecture": "ada", "nvidia_driver_kernel_modules": "proprietary"},
    }
    inv = _inventory(tmp_path, hosts)
    proc = run([tool("ansible-playbook"), "-i", str(inv), "playbooks/validate.yml"])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    plans = _plans(proc.stdout)
    assert plans["ada-node"][0] == (
        "nvidia_driver: open kernel modules: Ada is Turing or later and branch 580 is R560 or later: NVIDIA's "
        "default is the open kernel modules"
    )
    assert plans["hopper-node"][0].startswith("nvidia_driver: open kernel modules: Hopper is Turing or later")
    assert plans["volta-node"][0] == (
        "nvidia_driver: proprietary kernel modules: Volta predates Turing: the open kernel modules need the GSP "
        "(Turing and later), so NVIDIA requires the proprietary modules"
    )
    assert plans["hopper-535"][0].startswith("nvidia_driver: proprietary kernel modules: Hopper supports both")
    assert "predates R560" in plans["hopper-535"][0]
    # An explicit choice wins, and says what NVIDIA's default would have been.
    assert plans["ada-pinned"][0].startswith(
        "nvidia_driver: proprietary kernel modules: nvidia_driver_kernel_modules: proprietary set explicitly "
        "(NVIDIA's default here: open;"
    )
    for host in hosts:
        assert plans[host][1].startswith("next kernel: a new kernel brings its headers"), plans[host]


def test_preflight_refuses_open_modules_on_volta_with_the_fix(run: Run, tool: Tool, tmp_path: Path) -> None:
    bad = {**GOOD, "nvidia_driver_gpu_architecture": "volta", "nvidia_driver_kernel_modules": "open"}
    inv = _inventory(tmp_path, {"v100": bad})
    proc = run([tool("ansible-playbook"), "-i", str(inv), "playbooks/validate.yml"])
    assert proc.returncode != 0
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "nvidia_driver_kernel_modules: open does not work on Volta GPUs" in out
    assert "set nvidia_driver_kernel_modules: proprietary (or auto)" in out


def _plans(stdout: str) -> dict[str, list[str]]:
    """Each host's `_preflight_plan` lines from the debug task's YAML output."""
    plans: dict[str, list[str]] = {}
    for block in stdout.split("TASK [")[1:]:
        if not block.startswith("preflight : Show what the host will get"):
            continue
        for chunk in block.split("ok: [")[1:]:
            host, _, body = chunk.partition("]")
            loaded = yaml.safe_load(body.split("=>", 1)[1].split("\n\n", 1)[0])
            plans[host] = loaded["_preflight_plan"]
    return plans
