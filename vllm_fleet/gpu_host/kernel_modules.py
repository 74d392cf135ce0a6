"""NVIDIA's kernel-module flavour (open or proprietary) for a GPU architecture and driver branch.

The rule is data (vllm_fleet/catalog/nvidia_kernel_modules.yaml, with NVIDIA's documentation quoted); this module
only reads it. An explicit choice wins unless NVIDIA says it cannot work (open on Volta, proprietary on Blackwell).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vllm_fleet.catalog._data import read_yaml

Flavour = Literal["open", "proprietary"]
Requested = Literal["auto", "open", "proprietary"]


class ArchitectureSupport(BaseModel):
    """One row of the table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    generation: int = Field(ge=1)
    open: Literal["unsupported", "default", "required"]
    last_branch: int | None = None
    compute_capabilities: tuple[str, ...] = ()
    example: str = ""


class FlavourTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(alias="schema")
    open_default_from_branch: int
    architectures: dict[str, ArchitectureSupport]


@cache
def flavour_table() -> FlavourTable:
    """The table, read once."""
    return FlavourTable.model_validate(read_yaml("nvidia_kernel_modules.yaml"))


def architectures() -> list[str]:
    """Every architecture the table knows, older first."""
    table = flavour_table().architectures
    return sorted(table, key=lambda a: table[a].generation)


def architecture_of(compute_capability: str) -> str | None:
    """``"8.9"`` -> ``"ada"``; ``None`` for a compute capability the table does not know."""
    for name, arch in flavour_table().architectures.items():
        if compute_capability.strip() in arch.compute_capabilities:
            return name
    return None


@dataclass(frozen=True)
class FlavourChoice:
    """The flavour to install and why; ``problem`` set means: refuse, with the fix in the text."""

    flavour: Flavour | None
    reason: str
    problem: str = ""


def branch_of(driver_version: str | int | None) -> int | None:
    """``"580.95.05"`` or ``580`` -> 580; anything else -> None."""
    head = str(driver_version or "").split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _names(support: str) -> str:
    table = flavour_table().architectures
    found = [a.capitalize() for a in architectures() if table[a].open == support]
    return ", ".join(found[:-1]) + " and " + found[-1] if len(found) > 1 else "".join(found)


def choose_flavour(architecture: str, requested: str = "auto", driver_version: str | int | None = "") -> FlavourChoice:
    """The kernel-module flavour NVIDIA documents for ``architecture`` on the branch of ``driver_version``.

    ``requested`` is nvidia_driver_kernel_modules: ``auto`` follows NVIDIA's rule, ``open``/``proprietary`` win
    unless they cannot work on that architecture.
    """
    table = flavour_table()
    arch = table.architectures.get(architecture)
    if arch is None:
        return FlavourChoice(
            None,
            "",
            f"nvidia_driver_gpu_architecture: {json.dumps(architecture)} is not one of {', '.join(architectures())}",
        )
    if requested not in ("auto", "open", "proprietary"):
        return FlavourChoice(
            None, "", f"nvidia_driver_kernel_modules: {json.dumps(requested)} is not one of auto, open, proprietary"
        )
    name = architecture.capitalize()
    branch = branch_of(driver_version)
    if arch.last_branch is not None and branch is not None and branch > arch.last_branch:
        return FlavourChoice(
            None,
            "",
            f"nvidia_driver_version: driver branch {branch} has no support for {name} GPUs (R{arch.last_branch} is "
            f"the last branch for {_names('unsupported')}); pin a {arch.last_branch} driver",
        )
    if arch.open == "unsupported":
        why = (
            f"{name} predates Turing: the open kernel modules need the GSP (Turing and later), so NVIDIA requires "
            "the proprietary modules"
        )
        if requested == "open":
            return FlavourChoice(
                None,
                why,
                f"nvidia_driver_kernel_modules: open does not work on {name} GPUs ({why}); "
                "set nvidia_driver_kernel_modules: proprietary (or auto)",
            )
        explicit = " (set explicitly; also NVIDIA's rule)" if requested == "proprietary" else ""
        return FlavourChoice("proprietary", why + explicit)
    if arch.open == "required":
        why = f"{name}: NVIDIA supports only the open kernel modules"
        if requested == "proprietary":
            return FlavourChoice(
                None,
                why,
                f"nvidia_driver_kernel_modules: {name} GPUs need the open kernel modules (use auto or open)",
            )
        explicit = " (set explicitly; also NVIDIA's rule)" if requested == "open" else ""
        return FlavourChoice("open", why + explicit)
    since = table.open_default_from_branch
    if branch is None or branch >= since:
        default: Flavour = "open"
        on = f"branch {branch}" if branch is not None else "a current branch"
        why = f"{name} is Turing or later and {on} is R{since} or later: NVIDIA's default is the open kernel modules"
    else:
        default = "proprietary"
        why = (
            f"{name} supports both flavours, and branch {branch} predates R{since}: NVIDIA's default there is the "
            "proprietary modules"
        )
    if requested == "auto":
        hint = " (set nvidia_driver_kernel_modules: open to opt in)" if default == "proprietary" else ""
        return FlavourChoice(default, why + hint)
    if requested == default:
        return FlavourChoice(default, why + " (set explicitly; also NVIDIA's rule)")
    return FlavourChoice(
        "open" if requested == "open" else "proprietary",
        f"nvidia_driver_kernel_modules: {requested} set explicitly (NVIDIA's default here: {default}; {why})",
    )


OpenModules = Literal["required", "recommended", "unsupported", "none"]
_SUMMARY: dict[str, OpenModules] = {"unsupported": "unsupported", "default": "recommended", "required": "required"}


def open_kernel_module(architecture: str) -> OpenModules:
    """The hardware catalogue's summary: what the open modules are to this architecture (``none``: no GPU)."""
    arch = flavour_table().architectures.get(architecture)
    return "none" if arch is None else _SUMMARY[arch.open]
