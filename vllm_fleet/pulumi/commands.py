"""Local and SSH commands as Pulumi resources: create / update / delete commands with secret inputs.

These play the part `pulumi-command`'s `local.Command` and `remote.Command` would. That provider is a Go
binary, and the Go module proxy refuses `github.com/pulumi/pulumi-command/provider` at every version (403), so
it cannot be built here, and air-gapped users cannot always fetch it either. A Python dynamic provider runs
inside the program's own venv: no plugin to download.

Semantics kept from pulumi-command: a change of ``triggers`` replaces the resource; a change of any other
input runs ``update`` (or ``create`` again) in place; ``delete`` runs when the resource is destroyed. Secret
inputs (environment, private key) stay secret in state (``additional_secret_outputs``); the commands get
secrets through the environment or stdin, never argv. SSH keeps host-key checking on: the host key is pinned.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

OUTPUT_TAIL = 8000
"""Characters of stdout/stderr kept in state."""
REPLACE_ON = ("triggers",)
UPDATE_ON = ("create", "update", "environment", "connection", "stdin", "script")


class CommandError(Exception):
    pass


def _tail(text: str) -> str:
    return text[-OUTPUT_TAIL:]


def run_local(command: str, environment: dict[str, str] | None, stdin: str | None = None) -> tuple[str, str]:
    env = {**os.environ, **(environment or {})}
    proc = subprocess.run(["/bin/sh", "-c", command], env=env, input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CommandError(f"exit {proc.returncode}: {_tail(proc.stderr or proc.stdout)}")
    return _tail(proc.stdout), _tail(proc.stderr)


def run_remote(connection: dict[str, Any], script: str, environment: dict[str, str] | None) -> tuple[str, str]:
    """Run ``script`` with ``sh -s`` over SSH, the host key pinned, the private key in a 0600 temp file."""
    host, port, user = connection["host"], int(connection.get("port") or 22), connection.get("user") or "root"
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-ssh-") as tmp:
        identity: list[str] = []
        if connection.get("private_key"):
            key = Path(tmp) / "id"
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                text = str(connection["private_key"])
                fh.write(text if text.endswith("\n") else text + "\n")
            identity = ["-i", str(key)]
        known = Path(tmp) / "known_hosts"
        if connection.get("host_key"):
            name = host if port == 22 else f"[{host}]:{port}"
            known.write_text(f"{name} {connection['host_key']}\n")
        else:
            known = Path(connection.get("known_hosts_file") or Path.home() / ".ssh" / "known_hosts")
        exports = "".join(f"export {k}={_sh_quote(v)}\n" for k, v in (environment or {}).items())
        argv = [
            "ssh",
            *identity,
            "-p", str(port),
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={known}",
            "-o", "ConnectTimeout=10",
            f"{user}@{host}",
            "sh -s",
        ]  # fmt: skip
        proc = subprocess.run(argv, input=exports + script, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CommandError(f"ssh {user}@{host}:{port}: exit {proc.returncode}: {_tail(proc.stderr or proc.stdout)}")
    return _tail(proc.stdout), _tail(proc.stderr)


def _sh_quote(value: str) -> str:
    return "'" + str(value).replace("'", "'\"'\"'") + "'"


class _CommandProvider(ResourceProvider):
    """create/update/delete of a command; ``remote`` set when props carry a ``connection``."""

    def _run(self, props: dict[str, Any], which: str) -> tuple[str, str]:
        command = props.get(which) or (props.get("create") if which == "update" else None)
        if not command:
            return "", ""
        if props.get("connection"):
            return run_remote(props["connection"], command, props.get("environment"))
        return run_local(command, props.get("environment"), props.get("stdin"))

    def create(self, props: dict[str, Any]) -> CreateResult:
        stdout, stderr = self._run(props, "create")
        return CreateResult(id_=uuid.uuid4().hex, outs={**props, "stdout": stdout, "stderr": stderr})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in REPLACE_ON if olds.get(k) != news.get(k)]
        changed = [k for k in UPDATE_ON if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(replaces or changed), replaces=replaces, delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        stdout, stderr = self._run(news, "update")
        return UpdateResult(outs={**news, "stdout": stdout, "stderr": stderr})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        self._run(props, "delete")


_SECRET_OUTPUTS = ["environment", "connection"]


class _Command(pulumi.dynamic.Resource):
    """A command resource; ``connection`` set means over SSH."""

    stdout: pulumi.Output[str]
    stderr: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        create: pulumi.Input[str],
        *,
        connection: pulumi.Input[dict[str, Any]] | None = None,
        update: pulumi.Input[str] | None = None,
        delete: pulumi.Input[str] | None = None,
        environment: pulumi.Input[dict[str, pulumi.Input[str]]] | None = None,
        triggers: pulumi.Input[list[Any]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "create": create,
            "update": update,
            "delete": delete,
            "environment": environment,
            "triggers": triggers,
            "stdout": None,
            "stderr": None,
        }
        if connection is not None:
            props["connection"] = connection
        secret = pulumi.ResourceOptions(additional_secret_outputs=_SECRET_OUTPUTS)
        super().__init__(_CommandProvider(), name, props, pulumi.ResourceOptions.merge(opts, secret))


class LocalCommand(_Command):
    """A command run on the controller (like pulumi-command's local.Command)."""


class RemoteCommand(_Command):
    """A script run on a host over SSH with a pinned host key (like pulumi-command's remote.Command)."""
