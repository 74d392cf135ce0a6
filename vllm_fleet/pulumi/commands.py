"""Local and SSH commands as Pulumi resources, served by the `vllm-fleet-command` provider plugin.

These play the part `pulumi-command`'s `local.Command` and `remote.Command` would. That provider is a Go
binary whose module (`github.com/pulumi/pulumi-command/provider`) the Go module proxy refuses at every
version, so it cannot be built here, and air-gapped users cannot always fetch it either. Its stand-in,
`pulumi-resource-vllm-fleet-command`, is our own Go provider (tools/pulumi_engine/cmd/...), built by
tools/build_pulumi_engine.sh next to the `pulumi` binary, where the engine finds it.

Semantics kept from pulumi-command: a change of ``triggers`` replaces the resource; a change of any other
input runs ``update`` (or ``create`` again) in place; ``delete`` runs when the resource is destroyed. Secret
inputs (environment, connection with its private key) stay secret in state; the commands get secrets
through the environment or stdin, never argv. SSH keeps host-key checking on: the host key is pinned.
"""

from __future__ import annotations

from typing import Any

import pulumi

PACKAGE = "vllm-fleet-command"
"""The provider plugin's package name: the engine runs `pulumi-resource-vllm-fleet-command`."""
_SECRET_OUTPUTS = ["environment", "connection"]


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
        stdin: pulumi.Input[str] | None = None,
        triggers: pulumi.Input[list[Any]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props: dict[str, Any] = {
            "create": create,
            "update": update,
            "delete": delete,
            "environment": environment,
            "stdin": stdin,
            "triggers": triggers,
            "stdout": None,
            "stderr": None,
        }
        if connection is not None:
            props["connection"] = connection
        secret = pulumi.ResourceOptions(additional_secret_outputs=_SECRET_OUTPUTS)
        super().__init__(f"{PACKAGE}:{kind}:Command", name, props, pulumi.ResourceOptions.merge(opts, secret))


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
