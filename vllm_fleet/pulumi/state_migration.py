"""Moving a stack's commands from `vllm-fleet-command` to pulumi-command's `command` package, by state edit.

vllm-fleet 0.3's commands were `vllm-fleet-command:local:Command` / `:remote:Command` under the explicit provider
`pulumi:providers:vllm-fleet-command::commands`, which held the stack's keys. Their successors are `pulumi_command`
resources (`command:local:Command`) on the engine's default `command` provider. A type change is a new URN: left
to the engine, every converge would be created anew and its predecessor *deleted* -- the removal playbook on a
live node. Instead ``migrate_deployment`` rewrites the exported state, which `vllm-fleet up` imports before it
runs the engine (vllm_fleet/deploy/engine.py):

- each local command keeps its id, outputs and dependencies under the new type and URN, on the default
  provider; its inputs become what the program now registers: ``secret_environment`` (names of the provider's
  keys) gives way to ``VLLM_FLEET_SECRETS=<project>/<stack>`` in its environment (vllm_fleet/pulumi/stack_secrets.py),
  so the next `up` finds nothing to update;
- the explicit provider becomes the default provider for the SDK's version (its keys, held in stack config now,
  leave the state);
- a remote command (the preflight, now a local command running the system ssh) is dropped from the state, not
  deleted: it has no delete command, and the next `up` creates its successor, which re-reads the node's OS and GPUs.
"""

from __future__ import annotations

import uuid
from typing import Any

from vllm_fleet.pulumi.stack_secrets import SECRETS_ENV

OLD_PACKAGE, NEW_PACKAGE = "vllm-fleet-command", "command"
OLD_PROVIDER_TYPE = f"pulumi:providers:{OLD_PACKAGE}"
NEW_PROVIDER_TYPE = f"pulumi:providers:{NEW_PACKAGE}"
SIG_KEY = "4dabf18193072939515e22adb298388d"
"""Pulumi's signature key: a state value ``{SIG_KEY: <the secret signature>, "ciphertext": …}`` is a secret."""


def command_sdk_version() -> str:
    """The `command` plugin version the pulumi_command SDK asks for (its default provider's name says it)."""
    import json
    from importlib import resources

    data = json.loads(resources.files("pulumi_command").joinpath("pulumi-plugin.json").read_text(encoding="utf-8"))
    return str(data["version"])


def _urn_prefix(urn: str) -> str:
    """``urn:pulumi:<stack>::<project>``."""
    return "::".join(urn.split("::")[:2])


def _stack_name(urn: str) -> str:
    """``<project>/<stack>`` from a URN: what the program names in ``VLLM_FLEET_SECRETS``."""
    stack, project = urn.split("::")[:2]
    return f"{project}/{stack.removeprefix('urn:pulumi:')}"


def _retype(urn: str, old: str, new: str) -> str:
    """The URN with its resource type (the last part of its qualified type) replaced."""
    head, name = urn.rsplit("::", 1)
    qualified = head.rsplit("::", 1)
    types = qualified[1].split("$")
    assert types[-1] == old, urn
    return f"{qualified[0]}::{'$'.join([*types[:-1], new])}::{name}"


def needs_migration(deployment: dict[str, Any]) -> bool:
    return any(r.get("type", "").startswith(f"{OLD_PACKAGE}:") for r in deployment.get("resources") or [])


def migrate_deployment(deployment: dict[str, Any], version: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The deployment with its `vllm-fleet-command` resources moved to `command` (see the module's doc), and
    what was done, a line per resource. A deployment without them is returned unchanged."""
    resources: list[dict[str, Any]] = deployment.get("resources") or []
    if not needs_migration(deployment):
        return deployment, []
    version = version or command_sdk_version()
    done: list[str] = []
    renamed: dict[str, str] = {}  # old URN -> new URN
    refs: dict[str, str] = {}  # old provider reference (<urn>::<id>) -> new
    dropped: set[str] = set()
    out: list[dict[str, Any]] = []
    default = next((r for r in resources if r.get("type") == NEW_PROVIDER_TYPE), None)
    for r in resources:
        typ, urn = r.get("type", ""), r["urn"]
        if typ == OLD_PROVIDER_TYPE:
            if default is None:  # the first old provider becomes the default one, keeping its id
                new_urn = f"{_urn_prefix(urn)}::{NEW_PROVIDER_TYPE}::default_{version.replace('.', '_')}"
                default = {
                    "urn": new_urn,
                    "custom": True,
                    "id": r.get("id") or str(uuid.uuid4()),
                    "type": NEW_PROVIDER_TYPE,
                    "inputs": {"__internal": {}, "version": version},
                    "outputs": {"version": version},
                }
                out.append(default)
                done.append(f"{urn.rsplit('::', 1)[-1]}: the provider becomes {new_urn.rsplit('::', 1)[-1]}")
            else:
                dropped.add(urn)
            refs[f"{urn}::{r.get('id', '')}"] = f"{default['urn']}::{default['id']}"
            continue
        if typ == f"{OLD_PACKAGE}:remote:Command":
            dropped.add(urn)
            done.append(f"{urn.rsplit('::', 1)[-1]}: dropped from the state, not deleted (a local command replaces it)")
            continue
        if typ == f"{OLD_PACKAGE}:local:Command":
            new_type = f"{NEW_PACKAGE}:local:Command"
            r = {**r, "type": new_type, "urn": _retype(urn, typ, new_type)}
            renamed[urn] = r["urn"]
            inputs = dict(r.get("inputs") or {})
            if inputs.pop("secret_environment", None):
                env = inputs.get("environment")
                # A secret environment (an old converge's) stays as it is: the engine then updates it in place.
                if isinstance(env, dict) and SIG_KEY not in env:
                    inputs["environment"] = {**env, SECRETS_ENV: _stack_name(urn)}
                elif env is None:
                    inputs["environment"] = {SECRETS_ENV: _stack_name(urn)}
            r["inputs"] = inputs
            r.setdefault("replaceOnChanges", ["triggers[*]"])
            done.append(f"{urn.rsplit('::', 1)[-1]}: now {new_type}, kept (no command runs)")
        out.append(r)

    def fix(urn: str) -> str:
        return renamed.get(urn, urn)

    for r in out:
        if r.get("provider") in refs:
            r["provider"] = refs[r["provider"]]
        if r.get("parent"):
            r["parent"] = fix(r["parent"])
        if r.get("dependencies"):
            r["dependencies"] = [fix(u) for u in r["dependencies"] if u not in dropped]
        if r.get("propertyDependencies"):
            r["propertyDependencies"] = {
                k: [fix(u) for u in v if u not in dropped] for k, v in r["propertyDependencies"].items()
            }
        if r.get("deletedWith") in dropped:
            del r["deletedWith"]
        elif r.get("deletedWith"):
            r["deletedWith"] = fix(r["deletedWith"])
    # The default provider precedes its users (the engine checks the order on import).
    out.sort(key=lambda r: r is not default)
    stack = [r for r in out if r.get("type") == "pulumi:pulumi:Stack"]
    out = stack + [r for r in out if r.get("type") != "pulumi:pulumi:Stack"]
    return {**deployment, "resources": out}, done
