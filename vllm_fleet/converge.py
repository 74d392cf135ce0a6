"""Converge (or remove) ONE node: what the Pulumi GpuNode's local command runs.

    python -m vllm_fleet.converge apply|remove

    python -m vllm_fleet.converge smoke        (the rollout gate after a converge)

Input comes from the environment, so secrets never appear on a command line:
  VLLM_FLEET_NODE     JSON: host, profile name, vLLM version, rendered vllm_config, role vars
  VLLM_FLEET_SSH_KEY  the controller's SSH private key (a Pulumi secret)
  VLLM_FLEET_API_KEY  the node's API key (optional, a Pulumi secret)
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from vllm_fleet.ansible import InventoryHost, PlaybookResult, run_playbook
from vllm_fleet.catalog import load_hardware

PLAYBOOKS = {"apply": "site.yml", "remove": "remove.yml"}
ACTIONS = (*PLAYBOOKS, "smoke")


def extravars(node: dict[str, Any], api_key: str | None) -> dict[str, Any]:
    """Role variables for one node: hardware facts, the rendered profile, then the fleet's role_vars."""
    hw = load_hardware(node["host"]["hardware"])
    out: dict[str, Any] = {
        "vllm_fleet_hardware": hw.key,
        # No GPU, no NVIDIA stack (a lab overrides these through role_vars to exercise the roles on stand-ins).
        "vllm_fleet_nvidia_driver": hw.architecture != "cpu",
        "vllm_fleet_cuda_toolkit": hw.architecture != "cpu",
        "nvidia_driver_gpu_architecture": hw.architecture,
        "nvidia_driver_nvswitch": hw.nvswitch,
        "vllm_profile_name": node["profile"],
        "vllm_version": node["vllm_version"],
        "vllm_config": node["vllm_config"],
        "vllm_config_hash": node["config_hash"],
        # The effective profile (overrides applied), for the role's smoke-test hook.
        "vllm_fleet_profile_data": node.get("profile_data"),
    }
    out.update(node.get("role_vars") or {})
    if api_key:
        out["vllm_service_api_key"] = api_key
    return out


def converge(action: str, node: dict[str, Any], ssh_key: str | None, api_key: str | None) -> PlaybookResult:
    host = node["host"]
    target = InventoryHost(host["name"], host["address"], host.get("ssh_user", "root"), host.get("ssh_port", 22))
    return run_playbook(
        PLAYBOOKS[action],
        [target],
        extravars(node, api_key),
        private_key=ssh_key,
        known_hosts_file=node.get("known_hosts_file"),
    )


def smoke_gate(node: dict[str, Any], api_key: str | None) -> int:
    """The rollout gate: `vllm-fleet smoke` on the node with its effective profile (overrides applied)."""
    from vllm_fleet.profile import DecodeProfile
    from vllm_fleet.smoke import smoke

    profile = DecodeProfile.model_validate(node["profile_data"])
    url = f"http://{node['host']['address']}:{profile.port}"
    result = smoke(url, profile, timeout_s=300, api_key=api_key)
    for check in result.checks:
        print(f"{check.status:>4} {check.name}: {check.detail}")
    if result.reason:
        print(f"could not check: {result.reason}")
    return result.exit_code


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ACTIONS:
        print("usage: python -m vllm_fleet.converge apply|remove|smoke", file=sys.stderr)
        return 2
    node = json.loads(os.environ["VLLM_FLEET_NODE"])
    if argv[0] == "smoke":
        return smoke_gate(node, os.environ.get("VLLM_FLEET_API_KEY"))
    result = converge(argv[0], node, os.environ.get("VLLM_FLEET_SSH_KEY"), os.environ.get("VLLM_FLEET_API_KEY"))
    name = node["host"]["name"]
    print(
        f"{argv[0]} {name}: {result.status} (ok={result.count('ok', name)} changed={result.count('changed', name)} "
        f"failed={result.count('failures', name)} unreachable={result.count('dark', name)})"
    )
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
