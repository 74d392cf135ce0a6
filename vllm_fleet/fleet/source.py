"""Where a stack's fleet comes from: inline in stack config (``vllm-fleet:fleet``) or a fleet file it names.

The engine hands the whole stack config to the program in one environment variable, and Linux caps one variable
at 128 KiB: an inline fleet stops at about 560 hosts. A large fleet lives in its own file, named by
``vllm-fleet:fleetFile`` (a path relative to the project, the directory of ``Pulumi.yaml``, inside it)::

    config:
      vllm-fleet:fleetFile: fleets/site-a.yaml     # {hosts: [...], rollout: {...}, role_vars: {...}}

The file has the shape of the inline value, is read as untrusted YAML (``user_yaml``: size and alias limits,
duplicate keys refused) and is validated by the same schema; its problems name the file, then the field
(``fleets/site-a.yaml: hosts[3](gpu-b).address: …``). `pulumi preview`/`up` and ``vllm-fleet validate`` both read
it through ``stack_fleet``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from vllm_fleet.fleet.plan import FleetError
from vllm_fleet.profiles.loader import Problem
from vllm_fleet.trust.user_yaml import InputFileError, read_user_yaml

NAMESPACE = "vllm-fleet"
INLINE = f"{NAMESPACE}:fleet"
FILE = f"{NAMESPACE}:fleetFile"


def fleet_file_path(project: Path, name: Any) -> Path:
    """The fleet file ``name`` (stack config's ``vllm-fleet:fleetFile``) under ``project``, or FleetError."""
    if not isinstance(name, str) or not name.strip():
        raise FleetError([Problem(FILE, "must be a file name (a path relative to the project, e.g. fleet.yaml)")])
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or any(c in name for c in "\\\n\r\0"):
        raise FleetError(
            [
                Problem(
                    FILE,
                    "must be a relative path inside the project (the directory of Pulumi.yaml), without '..': "
                    "move the fleet file into the project",
                )
            ]
        )
    path = project / rel
    if path.suffix not in {".yaml", ".yml", ".json"}:
        raise FleetError([Problem(FILE, f"{name!r}: want a .yaml, .yml or .json file")])
    if not path.resolve().is_relative_to(project.resolve()):
        raise FleetError([Problem(FILE, f"{name!r} leads outside the project (a symlink): use a plain file in it")])
    return path


def read_fleet_file(project: Path, name: Any) -> Any:
    """The fleet data of the file ``name`` names, or FleetError naming the field and the file."""
    path = fleet_file_path(project, name)
    try:
        return read_user_yaml(path)
    except InputFileError as err:
        raise FleetError([Problem(FILE, f"{name}: {err.field}: {err.message}")]) from None


def stack_fleet(config: Mapping[str, Any], project: Path) -> tuple[Any, str | None]:
    """(the fleet's data, the fleet file's name or None when inline) from a stack's config; FleetError if the
    stack names none, or both."""
    inline, named = config.get(INLINE), config.get(FILE)
    if inline is not None and named is not None:
        raise FleetError(
            [Problem(FILE, f"the stack sets {INLINE} too: describe the fleet in one place, remove one of them")]
        )
    if named is not None:
        return read_fleet_file(project, named), str(named)
    if inline is None:
        raise FleetError(
            [Problem(INLINE, f"missing: describe the hosts (see docs/pulumi.md), or name a fleet file with {FILE}")]
        )
    return inline, None


def in_file(err: FleetError, name: str | None) -> FleetError:
    """The error with each problem's field prefixed by the fleet file it is in (unchanged when inline)."""
    if name is None:
        return err
    return FleetError([Problem(f"{name}: {p.field}", p.message) for p in err.problems])
