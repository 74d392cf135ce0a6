"""vllm-fleet 0.3's command resources (the `vllm-fleet-command` package), kept to make stacks of that shape for
the migration tests: the program now uses `pulumi_command` (vllm_fleet/pulumi/gpu_node.py), `vllm-fleet up` moves
such stacks over (vllm_fleet/pulumi/state_migration.py), and the provider binary still serves the package under
its old name for them.

These play the part `pulumi-command`'s `local.Command` and `remote.Command` would. That provider is a Go
binary whose module (`github.com/pulumi/pulumi-command/provider`) the Go module proxy refuses at every
version, so it cannot be built here, and air-gapped users cannot always fetch it either. Its stand-in,
`pulumi-resource-vllm-fleet-command`, is our own Go provider (tools/pulumi_engine/cmd/...), built by
tools/build_pulumi_engine.sh next to the `pulumi` binary, where the engine finds it.

Semantics kept from pulumi-command: a change of ``triggers`` replaces the resource; a change of any other
input runs ``update`` (or ``create`` again) in place; ``delete`` runs when the resource is destroyed. The
commands get secrets through the environment or stdin, never argv. SSH keeps host-key checking on: the host
key is pinned.

Secrets are held once per stack, by the provider: ``CommandProvider`` carries the SSH private key and the API
key in its configuration (encrypted once in state), a command names the ones it needs
(``secret_environment={"VLLM_FLEET_API_KEY": "apiKey"}``: names, not values), and a remote command without a
``private_key`` in its connection uses the provider's ``sshPrivateKey``. A secret passed as an input instead
stays secret in state (the engine marks an output secret where its input was), but every copy costs: the engine
serialises and re-encrypts the whole snapshot's secrets at each step (docs/scale.md).
"""

from __future__ import annotations

from typing import Any

import pulumi

PACKAGE = "vllm-fleet-command"
"""The provider plugin's package name: the engine runs `pulumi-resource-vllm-fleet-command`."""
SSH_KEY = "sshPrivateKey"
API_KEY = "apiKey"
"""The provider's secret configuration keys (a command's ``secret_environment`` names them)."""


class CommandProvider(pulumi.ProviderResource):
    """The stack's one `vllm-fleet-command` provider, holding the secrets its commands need (each at most once
    in state, encrypted). Its configuration changes in place (a rotated key): it never replaces the commands."""

    def __init__(
        self,
        name: str,
        ssh_private_key: pulumi.Input[str] | None = None,
        api_key: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {k: v for k, v in ((SSH_KEY, ssh_private_key), (API_KEY, api_key)) if v is not None}
        super().__init__(PACKAGE, name, props, opts)


class _Command(pulumi.CustomResource):
    stdout: pulumi.Output[str]
    stderr: pulumi.Output[str]

    def __init__(
        self,
        kind: str,
        name: str,
        create: pulumi.Input[str],
        *,
        connection: pulumi.Input[dict[str, Any]] | None = None,
        update: pulumi.Input[str] | None = None,
        delete: pulumi.Input[str] | None = None,
        environment: pulumi.Input[dict[str, pulumi.Input[str]]] | None = None,
        secret_environment: dict[str, str] | None = None,
        stdin: pulumi.Input[str] | None = None,
        triggers: pulumi.Input[list[Any]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        # Only what is set: each property is an Output the SDK tracks until the program ends (a cost per resource).
        given = {
            "create": create,
            "update": update,
            "delete": delete,
            "environment": environment,
            # Environment variable -> the provider's config key holding its value (names only, not secret).
            "secret_environment": secret_environment or None,
            "stdin": stdin,
            "triggers": triggers,
            "connection": connection,
        }
        props: dict[str, Any] = {k: v for k, v in given.items() if v is not None} | {"stdout": None, "stderr": None}
        super().__init__(f"{PACKAGE}:{kind}:Command", name, props, opts)


class LocalCommand(_Command):
    """A command run on the controller (like pulumi-command's local.Command)."""

    def __init__(self, name: str, create: pulumi.Input[str], **kwargs: Any) -> None:
        super().__init__("local", name, create, **kwargs)


class RemoteCommand(_Command):
    """A script run on a host over SSH with a pinned host key (like pulumi-command's remote.Command)."""

    def __init__(
        self, name: str, create: pulumi.Input[str], *, connection: pulumi.Input[dict[str, Any]], **kwargs: Any
    ) -> None:
        super().__init__("remote", name, create, connection=connection, **kwargs)
