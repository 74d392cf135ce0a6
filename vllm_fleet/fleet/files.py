"""Validating the files that describe a fleet — Pulumi stack configs and Ansible inventories — without a host.

``vllm-fleet validate`` and the playbooks' controller-side check (``playbooks/tasks/check-inventory.yml``) both
call ``check_inventory``, and ``pulumi preview`` and ``vllm-fleet validate Pulumi.<stack>.yaml`` both go through
``vllm_fleet.fleet.spec.plan_fleet``: one code path, the same messages, before any host is touched.

    python -m vllm_fleet.fleet.files INVENTORY… [--hosts PATTERN]     (exit 1 and one problem per line)
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_fleet.fleet.plan import FleetError
from vllm_fleet.fleet.source import NAMESPACE as STACK_NAMESPACE
from vllm_fleet.models.staging import unverified
from vllm_fleet.profiles.loader import Problem, ProfileError, load_profile
from vllm_fleet.trust.user_yaml import InputFileError, read_user_yaml

STACK_KEYS = {
    "fleet": "the fleet: hosts, rollout, role_vars",
    "fleetFile": "a file holding the fleet (for large fleets), relative to the project",
    "sshPrivateKey": "the controller's SSH private key (a secret)",
    "apiKey": "the nodes' API key (a secret)",
    "smoke": "gate each node on `vllm-fleet smoke` (default true)",
}
SECRET_KEYS = ("sshPrivateKey", "apiKey")
NODE_GROUP = "vllm_nodes"
_OUR_PREFIXES = ("vllm_", "nvidia_", "cuda_toolkit_", "preflight_")


def file_kind(path: Path, data: Any) -> str:
    """``stack``, ``inventory`` or ``profile``, by the file's shape (a directory is an inventory)."""
    if path.is_dir():
        return "inventory"
    if isinstance(data, dict) and "config" in data and isinstance(data["config"], dict):
        return "stack"
    if isinstance(data, dict) and (
        "all" in data or any(isinstance(v, dict) and ({"hosts", "children"} & set(v)) for v in data.values())
    ):
        return "inventory"
    return "profile"


# -- stack configs ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FleetFileCheck:
    """What ``vllm-fleet validate`` says of a stack config or an inventory: its problems (the file is refused) and
    its notes (a valid file does something its reader should know, e.g. a model staged unverified)."""

    kind: str
    problems: list[Problem]
    notes: list[Problem] = field(default_factory=list)


def check_stack_config(data: dict[str, Any], project: Path) -> FleetFileCheck:
    """Every problem of a ``Pulumi.<stack>.yaml`` in ``project``: its ``vllm-fleet:*`` keys, secrets in clear, the
    fleet (inline or the fleet file it names); with no problem, the notes on the fleet read once for both."""
    from vllm_fleet.fleet.source import in_file, stack_fleet
    from vllm_fleet.fleet.spec import plan_fleet

    problems: list[Problem] = []
    config: dict[str, Any] = data["config"]
    for key, value in config.items():
        namespace, _, name = str(key).partition(":")
        if namespace != STACK_NAMESPACE:
            continue
        if name not in STACK_KEYS:
            close = difflib.get_close_matches(name, list(STACK_KEYS), n=1)
            hint = f"did you mean {STACK_NAMESPACE}:{close[0]}?" if close else f"known: {', '.join(STACK_KEYS)}"
            problems.append(Problem(str(key), f"not read by the program; {hint}"))
        elif name in SECRET_KEYS and not (isinstance(value, dict) and set(value) == {"secure"}):
            problems.append(
                Problem(
                    str(key),
                    f"a secret in clear text in the stack file: remove it and run "
                    f"`pulumi config set --secret {name} -- …` (it is then stored encrypted)",
                )
            )
    try:
        fleet, fleet_file = stack_fleet(config, project)
    except FleetError as err:
        return FleetFileCheck("stack", problems + err.problems)
    try:
        plan_fleet(fleet)
    except FleetError as err:
        problems += in_file(err, fleet_file).problems
    return FleetFileCheck("stack", problems, [] if problems else fleet_notes(fleet))


def fleet_notes(fleet: Any) -> list[Problem]:
    """What a valid fleet does that its reader should know: each model staged ``unverified`` (no manifest checks
    its files)."""
    role_vars = fleet.get("role_vars") if isinstance(fleet, dict) else None
    models = role_vars.get("vllm_models") if isinstance(role_vars, dict) else None
    return [
        Problem(
            f"role_vars.vllm_models[{i}]",
            f"{name} is staged unverified: no manifest checks its files (make one: `vllm-fleet model manifest DIR`)",
        )
        for i, name in unverified(models)
    ]


# -- inventories -----------------------------------------------------------------------------------------------
def ansible_inventory(sources: list[str]) -> dict[str, Any]:
    """The inventory as Ansible itself reads it (``ansible-inventory --list``: variables merged, not templated)."""
    exe = Path(sys.executable).with_name("ansible-inventory")
    argv = [str(exe) if exe.exists() else "ansible-inventory", "--list"]
    for source in sources:
        argv += ["-i", source]
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    if proc.returncode != 0:
        detail = " ".join((proc.stderr or proc.stdout).split())[:400]
        raise InputFileError(", ".join(sources), "(inventory)", f"Ansible cannot read it: {detail}")
    result: dict[str, Any] = json.loads(proc.stdout, object_hook=_unwrap_unsafe)
    return result


def _unwrap_unsafe(obj: dict[str, Any]) -> Any:
    """``ansible-inventory`` prints a value tagged ``!unsafe`` as ``{"__ansible_unsafe": value}``: the value."""
    return obj["__ansible_unsafe"] if set(obj) == {"__ansible_unsafe"} else obj


def group_hosts(inv: dict[str, Any], group: str) -> list[str]:
    node = inv.get(group)
    if not isinstance(node, dict):
        return []
    hosts = list(node.get("hosts") or [])
    for child in node.get("children") or []:
        hosts += [h for h in group_hosts(inv, child) if h not in hosts]
    return hosts


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def check_host_vars(name: str, hostvars: dict[str, Any]) -> list[Problem]:
    """One inventory host: connection, profile and our role variables, as data."""
    from vllm_fleet.fleet.role_vars import role_var_problems
    from vllm_fleet.profiles.validate import check_profile
    from vllm_fleet.trust.values import posix_user, ssh_address

    problems: list[Problem] = []
    for var, check in (("ansible_host", ssh_address), ("ansible_user", posix_user)):
        value = hostvars.get(var, name if var == "ansible_host" else None)
        if value is None:
            continue
        try:
            check(str(value))
        except ValueError as err:
            problems.append(Problem(f"{name}.{var}", str(err)))
    ours = {k: v for k, v in hostvars.items() if k.startswith(_OUR_PREFIXES)}
    for var, value in sorted(ours.items()):
        if _is_template(value):
            problems.append(
                Problem(
                    f"{name}.{var}",
                    "is a Jinja template: vllm-fleet reads inventories as data, never as code; write the value "
                    "itself (or tag it !unsafe to pass the braces literally)",
                )
            )
    problems += role_var_problems({k: v for k, v in ours.items() if k != "vllm_fleet_profile"}, prefix=name)
    ref = ours.get("vllm_fleet_profile")
    if isinstance(ref, str) and not _is_template(ref):
        try:
            errors, _ = check_profile(load_profile(ref))
        except ProfileError as err:
            errors = [Problem("--profile" if p.field == "--profile" else p.field, p.message) for p in err.problems]
        for p in errors:
            where = f"{name}.vllm_fleet_profile" + ("" if p.field == "--profile" else f".{p.field}")
            problems.append(Problem(where, p.message))
    return problems


def check_inventory(sources: list[str], pattern: str = NODE_GROUP) -> list[Problem]:
    """Every problem of an inventory for the playbooks: the node group exists and has hosts, each host's vars."""
    inv = ansible_inventory(sources)
    hostvars: dict[str, dict[str, Any]] = (inv.get("_meta") or {}).get("hostvars") or {}
    hosts = group_hosts(inv, pattern) if pattern in inv else ([pattern] if pattern in hostvars else [])
    if not hosts:
        return [
            Problem(
                "(inventory)",
                f"no host in {pattern!r}: the playbooks would do nothing; list the GPU hosts under a "
                f"{NODE_GROUP} group (or name the group or host with vllm_fleet_hosts)",
            )
        ]
    problems: list[Problem] = []
    for host in hosts:
        problems += check_host_vars(host, hostvars.get(host) or {})
    return problems


# -- any file --------------------------------------------------------------------------------------------------
def check_fleet_file(path: Path) -> FleetFileCheck | None:
    """The problems and notes of a stack config or an inventory; None for a profile (validate.check_file's job)."""
    if path.is_dir() or path.suffix not in {".yaml", ".yml", ".json"}:
        data: Any = None
    else:
        try:
            data = read_user_yaml(path)
        except InputFileError as err:
            return FleetFileCheck("file", [Problem(err.field, err.message)])
    kind = file_kind(path, data)
    if kind == "profile" and path.suffix in {".yaml", ".yml", ".json"}:
        return None
    if kind == "stack":
        return check_stack_config(data, path.parent)
    try:
        return FleetFileCheck("inventory", check_inventory([str(path)]))
    except InputFileError as err:
        return FleetFileCheck("inventory", [Problem(err.field, err.message)])


def main(argv: list[str]) -> int:
    pattern = NODE_GROUP
    if "--hosts" in argv:
        i = argv.index("--hosts")
        pattern = argv[i + 1]
        argv = argv[:i] + argv[i + 2 :]
    try:
        problems = check_inventory(argv, pattern)
    except InputFileError as err:
        print(err, file=sys.stderr)
        return 1
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
