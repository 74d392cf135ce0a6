"""`GpuNode`: a bare-metal vLLM node as a Pulumi ComponentResource (preflight → converge → smoke gate)."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

import pulumi

from vllm_fleet.digest import json_digest
from vllm_fleet.fleet_plan import NodeSpec
from vllm_fleet.pulumi.commands import API_KEY, SSH_KEY, CommandProvider, LocalCommand, RemoteCommand
from vllm_fleet.pulumi.names import GPU_NODE_TYPE, node_step_name, pause_name

PREFLIGHT = r"""set -eu
. /etc/os-release
echo "os=${ID}-${VERSION_ID}"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu=/'
else
  echo "gpu=none (no driver yet)"
fi
case "${ID}-${VERSION_ID}" in
  debian-12|ubuntu-22.04|ubuntu-24.04) ;;
  *) echo "unsupported OS ${ID}-${VERSION_ID}: vllm-fleet supports Debian 12, Ubuntu 22.04 and 24.04" >&2; exit 1;;
esac
"""


SECRET_ENV = {"VLLM_FLEET_SSH_KEY": SSH_KEY, "VLLM_FLEET_API_KEY": API_KEY}
"""What the converge gets from the provider's secrets (none is in a node's own inputs or state)."""


@dataclass
class GpuNodeArgs:
    """Inputs of one node. No secret: the SSH and API keys are the provider's (once per stack)."""

    node: NodeSpec
    """The resolved host: profile, rendered config (computed before any resource is registered)."""
    provider: CommandProvider
    """The stack's command provider, holding the SSH private key (absent: the controller's own SSH keys /
    agent) and the API key (written to a root-only file on the node by the role)."""
    converge_digest: str
    """Hash of the roles, templates and playbooks: a change re-converges every node."""
    api_key_version: pulumi.Input[str] | None = None
    """Changes exactly when the API key does (not the key): the converge runs again to write the new one."""
    role_vars: dict[str, Any] = field(default_factory=dict)
    """Extra Ansible variables (mirror URLs, package pins)."""
    smoke: bool = False
    """Gate the node on `vllm-fleet smoke` after converging (the next batch waits for it)."""


class GpuNode(pulumi.ComponentResource):
    """One vLLM node: SSH preflight, Ansible converge (only when its inputs changed), smoke gate."""

    endpoint: pulumi.Output[str]
    config_hash: pulumi.Output[str]

    def __init__(self, name: str, args: GpuNodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GPU_NODE_TYPE, name, None, opts)
        node = args.node
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)

        self.preflight = RemoteCommand(
            node_step_name(name, "preflight"),
            connection={
                "host": node.address,
                "port": node.ssh_port,
                "user": node.ssh_user,
                # No private_key: the provider's sshPrivateKey (or the controller's own keys / agent).
                # The one host-key policy: the key pinned in the fleet spec, strict, no fallback.
                "host_key": node.host_key,
            },
            create=PREFLIGHT,
            triggers=[node.address, node.ssh_port],
            opts=child,
        )

        # Everything but the server's own config: when a host reports this digest from its last full converge,
        # the converge only rolls the server (playbooks/site.yml skips the driver, toolkit and vLLM install).
        system = json_digest(
            [
                args.converge_digest,
                {k: v for k, v in node.host.items() if k not in ("profile", "overrides")},
                node.vllm_version,
                args.role_vars,
            ]
        )
        spec = {
            "system_digest": system,
            "host": node.host,
            "profile": node.profile,
            "profile_data": node.profile_data,
            "vllm_version": node.vllm_version,
            "vllm_config": node.vllm_config,
            "config_hash": node.config_hash,
            "role_vars": args.role_vars,
        }
        self.inputs_digest = json_digest([args.converge_digest, spec])
        """What a converge of this node depends on: it changes exactly when the converge runs again."""
        env: dict[str, pulumi.Input[str]] = {
            # Not key-sorted: vllm_config's order is the config file's (its sha256 is config_hash).
            "VLLM_FLEET_NODE": json.dumps(spec),
            # In the inputs (not `triggers`): a trigger change REPLACES the command, which would run its
            # delete (the removal playbook) on a live node; an input change runs `update` = converge.
            "VLLM_FLEET_CONVERGE_DIGEST": self.inputs_digest,
        }
        if args.api_key_version is not None:
            env["VLLM_FLEET_API_KEY_VERSION"] = args.api_key_version
        python = shlex.quote(sys.executable)
        converge = f"{python} -m vllm_fleet.converge apply"
        self.converge = LocalCommand(
            node_step_name(name, "converge"),
            create=converge,
            update=converge,
            delete=f"{python} -m vllm_fleet.converge remove",
            environment=env,
            secret_environment=SECRET_ENV,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.preflight])),
        )
        gate: pulumi.Resource = self.converge
        if args.smoke:
            smoke = f"{python} -m vllm_fleet.converge smoke"
            # What the gate reads (the node's address, its effective profile), not the whole spec: every byte of
            # a command's inputs is serialised again at each of the engine's per-step checkpoints.
            target = {"host": {"name": node.name, "address": node.address}, "profile_data": node.profile_data}
            self.smoke = LocalCommand(
                node_step_name(name, "smoke"),
                create=smoke,
                update=smoke,
                # The converge's digest: the gate runs again after every converge (and with a new API key).
                environment={**env, "VLLM_FLEET_NODE": json.dumps(target)},
                secret_environment={k: v for k, v in SECRET_ENV.items() if k != "VLLM_FLEET_SSH_KEY"},
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.converge])),
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


def api_key_version(provider: CommandProvider, api_key: pulumi.Input[str]) -> pulumi.Output[str]:
    """A random token that changes exactly when the API key does, to put in the nodes' (non-secret) inputs.

    The key itself is kept once per stack (this command's input, the provider's config), never in a node's
    state; a hash of it would be guessable for a short key. This command runs (prints a new UUID) only when
    its environment, the key, changed."""
    new = f"{shlex.quote(sys.executable)} -c 'import uuid; print(uuid.uuid4())'"
    version = LocalCommand(
        "api-key-version",
        create=new,
        update=new,
        environment={"VLLM_FLEET_API_KEY": pulumi.Output.secret(api_key)},
        opts=pulumi.ResourceOptions(provider=provider),
    )
    return version.stdout.apply(lambda out: out.strip())


def rollout_pause(k: int, seconds: float, batch: list[GpuNode], provider: CommandProvider) -> LocalCommand:
    """The wait after rollout batch ``k`` passed its gate: it runs again only when a host of that batch
    changed (its inputs carry the batch's converge digests), so a no-op ``up`` does not wait."""
    wait = f"{shlex.quote(sys.executable)} -c 'import sys, time; time.sleep(float(sys.argv[1]))' {seconds:g}"
    return LocalCommand(
        pause_name(k),
        create=wait,
        update=wait,
        environment={"VLLM_FLEET_BATCH": json_digest([g.inputs_digest for g in batch])},
        opts=pulumi.ResourceOptions(depends_on=[g.gate for g in batch], provider=provider),
    )
