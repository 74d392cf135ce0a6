"""Converge (or remove) ONE node: what the Pulumi GpuNode's local command runs.

    python -m vllm_fleet.converge apply|remove

    python -m vllm_fleet.converge smoke        (the rollout gate after a converge)

    python -m vllm_fleet.converge preflight    (the script on stdin, run on the host over SSH)

Input comes from the environment, so secrets never appear on a command line:
  VLLM_FLEET_NODE     JSON: apply/remove read a whole ``ConvergeInput`` (vllm_fleet.fleet.plan: host with its
                      pinned host_key, profile, vLLM version, rendered vllm_config, role vars); preflight reads
                      only its "host", the smoke gate its "host" (name, address) and "profile_data"
  VLLM_FLEET_SECRETS  the stack (<project>/<stack>) whose config holds the SSH private key and the node's API
                      key (vllm_fleet/pulumi/stack_secrets.py): read now, never in the node's inputs
  VLLM_FLEET_SSH_KEY  or the SSH private key itself, and
  VLLM_FLEET_API_KEY  the node's API key (a caller of our own, e.g. a test)

Both secrets are taken out of this process's environment at once: the SSH key goes to the run's ssh-agent, the
API key to ansible-playbook's environment only (vllm_fleet.deploy.ansible.run_playbook); neither is written to a file.
Without any SSH key, the controller's own agent (SSH_AUTH_SOCK) is used.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from typing import Any

from vllm_fleet.deploy.ansible import (
    InventoryHost,
    PlaybookResult,
    check_hosts,
    known_hosts_line,
    run_playbook,
    ssh_args,
)
from vllm_fleet.deploy.private_dir import PrivateDir
from vllm_fleet.fleet.plan import ConvergeInput
from vllm_fleet.fleet.role_vars import extravars
from vllm_fleet.pulumi.stack_secrets import SECRETS_ENV, stack_secrets
from vllm_fleet.rollout.phases import writer_from_env

PLAYBOOKS = {"apply": "site.yml", "remove": "remove.yml"}
ACTIONS = (*PLAYBOOKS, "smoke", "preflight")


def inventory_host(host: dict[str, Any]) -> InventoryHost:
    return InventoryHost(
        host["name"],
        host["address"],
        host.get("ssh_user", "root"),
        host.get("ssh_port", 22),
        host_key=host.get("host_key"),
    )


def preflight(host: dict[str, Any], script: str, ssh_key: str | None) -> int:
    """Run ``script`` (`sh -s`) on the host with the system ssh: the one host-key policy (the pinned key in a
    known_hosts file of the run's own, strict, no other known_hosts), the key from an agent, never argv."""
    target = inventory_host(host)
    check_hosts([target], connect=True)
    with PrivateDir() as private:
        known_hosts = private.file("known_hosts", known_hosts_line(target) + "\n")
        env = {**os.environ, **private.marker}
        if ssh_key is not None:
            env.update(private.start_agent(ssh_key))
        argv = [
            "ssh", "-p", str(target.port), *shlex.split(ssh_args(known_hosts)),
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "ForwardAgent=no",
            "--", f"{target.user}@{target.address}", "sh -s",
        ]  # fmt: skip
        return subprocess.run(argv, input=script, text=True, env=env, check=False).returncode


def converge(action: str, node: ConvergeInput, ssh_key: str | None, api_key: str | None) -> PlaybookResult:
    target = inventory_host(node.host)
    return run_playbook(
        PLAYBOOKS[action],
        [target],
        extravars(node),
        private_key=ssh_key,
        # Only the converge writes the key to the node (and smoke-tests with it); removing needs none.
        api_key=api_key if action == "apply" else None,
        # What the run is doing (draining, restarting …) for `vllm-fleet up`'s live display, when it asked.
        event_handler=writer_from_env(target.name) if action == "apply" else None,
    )


def smoke_gate(node: dict[str, Any], api_key: str | None) -> int:
    """The rollout gate: `vllm-fleet smoke` on the node with its effective profile (overrides applied)."""
    from vllm_fleet.probes.smoke import smoke
    from vllm_fleet.profiles.model import DecodeProfile

    profile = DecodeProfile.model_validate(node["profile_data"])
    url = f"http://{node['host']['address']}:{profile.frontend.port}"
    result = smoke(url, profile, timeout_s=300, api_key=api_key)
    for check in result.checks:
        print(f"{check.status:>4} {check.name}: {check.detail}")
    if result.reason:
        print(f"could not check: {result.reason}")
    return result.exit_code


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ACTIONS:
        print("usage: python -m vllm_fleet.converge apply|remove|smoke|preflight", file=sys.stderr)
        return 2
    text = os.environ["VLLM_FLEET_NODE"]
    data = json.loads(text)
    # Out of the environment: no child (ansible-playbook, ssh, the smoke command) inherits them from here.
    ssh_key = os.environ.pop("VLLM_FLEET_SSH_KEY", None) or None
    api_key = os.environ.pop("VLLM_FLEET_API_KEY", None) or None
    stack = os.environ.pop(SECRETS_ENV, None)
    if stack:
        try:
            stack_ssh_key, stack_api_key = stack_secrets(stack)
        except (RuntimeError, ValueError) as err:
            print(f"{argv[0]} {data['host']['name']}: {err}", file=sys.stderr)
            return 1
        ssh_key, api_key = ssh_key or stack_ssh_key, api_key or stack_api_key
    if argv[0] == "smoke":
        return smoke_gate(data, api_key)
    if argv[0] == "preflight":
        return preflight(data["host"], sys.stdin.read(), ssh_key)
    node = ConvergeInput.from_json(text)
    name = node.name
    try:
        result = converge(argv[0], node, ssh_key, api_key)
    except ValueError as err:  # a host without a pinned key, a key ssh-agent refuses: never the secrets' text
        print(f"{argv[0]} {name}: {err}", file=sys.stderr)
        return 1
    print(
        f"{argv[0]} {name}: {result.status} (ok={result.count('ok', name)} changed={result.count('changed', name)} "
        f"failed={result.count('failures', name)} unreachable={result.count('dark', name)})"
    )
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
