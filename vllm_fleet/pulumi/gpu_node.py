"""`GpuNode`: a bare-metal vLLM node as a Pulumi ComponentResource (preflight → converge → smoke gate).

Its steps are `pulumi_command` local commands (`command:local:Command`), served by our build of the `command`
provider or by upstream's where it is installed (docs/pulumi.md). Every SSH connection is the system ssh's with
the host key pinned (`python -m vllm_fleet.converge`), so the preflight is a local command too: pulumi-command's
remote.Command would also keep its connection as a secret per node in state (O(nodes²), docs/scale.md).
The commands name the stack whose secrets they use (``VLLM_FLEET_SECRETS``), never a secret's value
(vllm_fleet/pulumi/stack_secrets.py)."""

from __future__ import annotations

import functools
import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi_command.local import Command

from vllm_fleet.fleet.plan import ConvergeInput, NodeSpec, system_digest
from vllm_fleet.project.digest import json_digest
from vllm_fleet.project.paths import project_root
from vllm_fleet.pulumi.names import GPU_NODE_TYPE, node_step_name, pause_name
from vllm_fleet.pulumi.stack_secrets import SECRETS_ENV


@functools.cache
def supported_platforms(roles: Path | None = None) -> tuple[str, ...]:
    """The platforms every node role supports, ``Debian-12``…: the os_vars role's ``os_vars_supported`` default,
    the one list (the roles stop on any other host; the preflight refuses it before the converge)."""
    defaults = (roles or project_root() / "roles") / "os_vars" / "defaults" / "main.yml"
    # Read once per program run, not once per node (the program builds a GpuNode per host).
    return tuple(str(p) for p in yaml.safe_load(defaults.read_text(encoding="utf-8"))["os_vars_supported"])


def _in_words(platforms: Sequence[str]) -> str:
    """``Debian 12, Ubuntu 22.04 and 24.04``: each distribution once, its versions joined."""
    versions: dict[str, list[str]] = {}
    for platform in platforms:
        name, _, version = platform.partition("-")
        versions.setdefault(name, []).append(version)
    return ", ".join(
        f"{name} {' and '.join([', '.join(v[:-1]), v[-1]] if len(v) > 1 else v)}" for name, v in versions.items()
    )


def preflight_script(platforms: Sequence[str]) -> str:
    """The script the preflight runs on the host (``sh -s``): what it is, its GPUs, and a supported OS."""
    cases = "|".join(p.lower() for p in platforms)
    return f"""set -eu
. /etc/os-release
echo "os=${{ID}}-${{VERSION_ID}}"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu=/'
else
  echo "gpu=none (no driver yet)"
fi
case "${{ID}}-${{VERSION_ID}}" in
  {cases}) ;;
  *) echo "unsupported OS ${{ID}}-${{VERSION_ID}}: vllm-fleet supports {_in_words(platforms)}" >&2; exit 1;;
esac
"""


def was(kind: str) -> list[pulumi.Alias]:
    """The command's type before `pulumi_command` (`vllm-fleet-command:<kind>:Command`), as an alias: a stack
    not yet moved over by `vllm-fleet up` (vllm_fleet/pulumi/state_migration.py) then gets an in-place update
    from a plain `pulumi up`, not a new command and the old one's delete (the removal playbook on a live node).
    The converge only: the other commands' deletes run nothing, and an alias costs the program time per node."""
    return [pulumi.Alias(type_=f"vllm-fleet-command:{kind}:Command")]


@dataclass(frozen=True)
class CanaryArgs:
    """The canary analysis of the first batch's host (``rollout.analysis``): the command the role runs on the
    controller after the host's smoke test, and the hosts it is compared with (still on the old config)."""

    command: list[str]
    baseline: list[str]
    """Base URLs (``http://host:port``) of the serving hosts of the later batches."""


@dataclass
class GpuNodeArgs:
    """Inputs of one node. No secret: the SSH and API keys are the stack's (stack_secrets), named by ``stack``."""

    node: NodeSpec
    """The resolved host: profile, rendered config (computed before any resource is registered)."""
    stack: str
    """``<project>/<stack>``: whose secrets the commands use (the SSH key, absent: the controller's own agent;
    the API key, written to a root-only file on the node by the role)."""
    converge_digest: str
    """Hash of the roles, templates and playbooks: a change re-converges every node."""
    api_key_version: pulumi.Input[str] | None = None
    """Changes exactly when the API key does (not the key): the converge runs again to write the new one."""
    role_vars: dict[str, Any] = field(default_factory=dict)
    """Extra Ansible variables (mirror URLs, package pins)."""
    smoke: bool = False
    """Gate the node on `vllm-fleet smoke` after converging (the next batch waits for it)."""
    canary: CanaryArgs | None = None
    """This host is the canary of a rollout with ``rollout.analysis``: judged against the baseline before the next
    batch starts (the role's vllm_service_canary_* variables; not part of the system digest)."""
    cordoned: str | None = None
    """Why a person cordoned this serving node (None: not cordoned). A cordoned node's converge and smoke keep the
    inputs of their last run (``ignore_changes``): nothing runs on it until it is uncordoned."""


class GpuNode(pulumi.ComponentResource):
    """One vLLM node: SSH preflight, Ansible converge (only when its inputs changed), smoke gate."""

    endpoint: pulumi.Output[str]
    config_hash: pulumi.Output[str]

    def __init__(self, name: str, args: GpuNodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GPU_NODE_TYPE, name, None, opts)
        node = args.node
        python = shlex.quote(sys.executable)
        secrets = {SECRETS_ENV: args.stack}

        # The one host-key policy: the key pinned in the fleet spec, strict, no fallback (the system ssh).
        reach = {"name": node.name, "address": node.address, "ssh_port": node.ssh_port, "ssh_user": node.ssh_user}
        check = f"{python} -m vllm_fleet.converge preflight"
        self.preflight = Command(
            node_step_name(name, "preflight"),
            create=check,
            stdin=preflight_script(supported_platforms()),
            environment={"VLLM_FLEET_NODE": json.dumps({"host": {**reach, "host_key": node.host_key}}), **secrets},
            triggers=[node.address, node.ssh_port],
            opts=pulumi.ResourceOptions(parent=self),
        )

        # Everything but the server's own config: when a host reports this digest from its last full converge,
        # the converge only rolls the server (playbooks/site.yml skips the driver, toolkit and vLLM install).
        system = system_digest(args.converge_digest, node, args.role_vars)
        role_vars = args.role_vars
        if args.canary is not None:
            role_vars = role_vars | {
                "vllm_service_canary_command": args.canary.command,
                "vllm_service_canary_baseline": args.canary.baseline,
                "vllm_service_canary_url": node.endpoint,
            }
        converge_input = ConvergeInput.of(node, role_vars, system_digest=system)
        self.inputs_digest = json_digest([args.converge_digest, converge_input.as_dict()])
        """What a converge of this node depends on: it changes exactly when the converge runs again."""
        env: dict[str, pulumi.Input[str]] = {
            "VLLM_FLEET_NODE": converge_input.to_json(),
            **secrets,
            # In the inputs (not `triggers`): a trigger change REPLACES the command, which would run its
            # delete (the removal playbook) on a live node; an input change runs `update` = converge.
            "VLLM_FLEET_CONVERGE_DIGEST": self.inputs_digest,
        }
        if args.api_key_version is not None:
            env["VLLM_FLEET_API_KEY_VERSION"] = args.api_key_version
        converge = f"{python} -m vllm_fleet.converge apply"
        # Cordoned: the engine keeps the last run's environment, so nothing runs now and the change is still pending
        # (a diff) at the first `pulumi up` after the uncordon.
        held = ["environment"] if args.cordoned is not None else None
        self.converge = Command(
            node_step_name(name, "converge"),
            create=converge,
            update=converge,
            delete=f"{python} -m vllm_fleet.converge remove",
            environment=env,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.preflight], aliases=was("local"), ignore_changes=held
            ),
        )
        gate: pulumi.Resource = self.converge
        if args.smoke:
            smoke = f"{python} -m vllm_fleet.converge smoke"
            # What the gate reads (the node's address, its effective profile), not the whole spec: every byte of
            # a command's inputs is serialised again at each of the engine's per-step checkpoints.
            target = {"host": {"name": node.name, "address": node.address}, "profile_data": node.profile_data}
            self.smoke = Command(
                node_step_name(name, "smoke"),
                create=smoke,
                update=smoke,
                # The converge's digest: the gate runs again after every converge (and with a new API key).
                environment={**env, "VLLM_FLEET_NODE": json.dumps(target)},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.converge], ignore_changes=held),
            )
            gate = self.smoke
        self.gate = gate

        self.endpoint = pulumi.Output.from_input(node.endpoint)
        self.config_hash = pulumi.Output.from_input(node.config_hash)
        self.register_outputs(
            {
                "endpoint": node.endpoint,
                "vllm_version": node.vllm_version,
                "profile": node.profile,
                "config_hash": node.config_hash,
                "preflight": self.preflight.stdout,
            }
        )


def api_key_version(api_key: pulumi.Input[str]) -> pulumi.Output[str]:
    """A random token that changes exactly when the API key does, to put in the nodes' (non-secret) inputs.

    The key itself is kept once per stack (this command's input, and the stack's config), never in a node's
    state; a hash of it would be guessable for a short key. This command runs (prints a new UUID) only when
    its environment, the key, changed."""
    new = f"{shlex.quote(sys.executable)} -c 'import uuid; print(uuid.uuid4())'"
    version = Command(
        "api-key-version",
        create=new,
        update=new,
        environment={"VLLM_FLEET_API_KEY": pulumi.Output.secret(api_key)},
    )
    return version.stdout.apply(lambda out: out.strip())


def rollout_pause(k: int, seconds: float, batch: list[GpuNode]) -> Command:
    """The wait after rollout batch ``k`` passed its gate: it runs again only when a host of that batch
    changed (its inputs carry the batch's converge digests), so a no-op ``up`` does not wait."""
    wait = f"{shlex.quote(sys.executable)} -c 'import sys, time; time.sleep(float(sys.argv[1]))' {seconds:g}"
    return Command(
        pause_name(k),
        create=wait,
        update=wait,
        environment={"VLLM_FLEET_BATCH": json_digest([g.inputs_digest for g in batch])},
        opts=pulumi.ResourceOptions(depends_on=[g.gate for g in batch]),
    )
