"""The Pulumi program body: read stack config once, plan the fleet, register GpuNodes batch by batch.

The plan (validation, profiles, rendering) comes from the core through ``plan_cache``: an unchanged fleet reuses
the plan computed last time, so a no-op `pulumi up` costs little more than the engine's own work.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pulumi

from vllm_fleet.digest import tree_files, update_with_files
from vllm_fleet.fleet_plan import FleetError
from vllm_fleet.paths import project_root
from vllm_fleet.pulumi.gpu_node import GpuNode, GpuNodeArgs
from vllm_fleet.pulumi.plan_cache import cached_plan

CONVERGE_INPUTS = ("roles", "playbooks", "templates", "ansible.cfg")


def converge_digest(root: Path | None = None) -> str:
    """Hash of every file the converge runs (roles, playbooks, templates): editing one re-converges."""
    root = root or project_root()
    digest = hashlib.sha256()
    for name in CONVERGE_INPUTS:
        base = root / name
        update_with_files(digest, root, tree_files(base) if base.is_dir() else [base] if base.exists() else [])
    return digest.hexdigest()


def run() -> None:
    cfg = pulumi.Config("vllm-fleet")
    try:
        fleet, _hit = cached_plan(cfg.require_object("fleet"))
    except FleetError as err:
        # Fails the preview/update before any resource is registered, naming each field and its fix.
        raise pulumi.RunError(str(err)) from None
    # Without a key in config, SSH falls back to the controller's own keys / agent.
    ssh_key = cfg.get_secret("sshPrivateKey")
    api_key = cfg.get_secret("apiKey")
    digest = converge_digest()
    smoke = cfg.get_bool("smoke")

    previous: list[pulumi.Resource] = []
    table: list[dict[str, object]] = []
    for batch in fleet.batches():
        current: list[pulumi.Resource] = []
        for node in batch:
            gpu = GpuNode(
                node.name,
                GpuNodeArgs(
                    node=node,
                    ssh_private_key=ssh_key,
                    api_key=api_key,
                    converge_digest=digest,
                    role_vars=fleet.role_vars,
                    smoke=True if smoke is None else smoke,
                ),
                opts=pulumi.ResourceOptions(depends_on=previous),
            )
            current.append(gpu.gate)
            table.append(
                {
                    "host": node.name,
                    "endpoint": node.endpoint,
                    "hardware": node.hardware,
                    "profile": node.profile,
                    "vllm_version": node.vllm_version,
                    "config_hash": node.config_hash[:12],
                }
            )
        previous = current
    pulumi.export("nodes", table)
