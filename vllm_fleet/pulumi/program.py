"""The Pulumi program body: read stack config once, plan the fleet, register GpuNodes.

Hosts serving now are rolled in batches (a canary first, then ``rollout.batch_size``, each batch waiting for the
last one's smoke gate and ``rollout.pause_s``); new hosts, with nothing to protect, are provisioned beside them,
``rollout.provision_parallel`` at a time.

The plan (validation, profiles, rendering) comes from the core through ``plan_cache``: an unchanged fleet reuses
the plan computed last time, so a no-op `pulumi up` costs little more than the engine's own work.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pulumi

from vllm_fleet.fleet.plan import FleetError, NodeSpec
from vllm_fleet.fleet.role_vars import sentinel_port
from vllm_fleet.fleet.source import FILE, INLINE, in_file, stack_fleet
from vllm_fleet.models.staging import unverified
from vllm_fleet.project.digest import tree_files, update_with_files
from vllm_fleet.project.paths import project_root
from vllm_fleet.pulumi.gpu_node import CanaryArgs, GpuNode, GpuNodeArgs, api_key_version, rollout_pause
from vllm_fleet.pulumi.names import RolloutPlan
from vllm_fleet.pulumi.plan_cache import cached_plan
from vllm_fleet.pulumi.serving import cordoned_nodes, serving_endpoints

CONVERGE_INPUTS = ("roles", "playbooks", "templates", "ansible.cfg")
ANALYSIS_OPTIONS = {
    "window_s": "--window",
    "warmup_s": "--warmup",
    "windows": "--windows",
    "max_ttft_increase": "--max-ttft-increase",
    "max_itl_increase": "--max-itl-increase",
    "max_error_rate_increase": "--max-error-rate-increase",
    "min_requests": "--min-requests",
    "alpha": "--alpha",
}
"""``rollout.analysis``'s keys and the `vllm-fleet canary` options that take them."""


def converge_digest(root: Path | None = None) -> str:
    """Hash of every file the converge runs (roles, playbooks, templates): editing one re-converges."""
    root = root or project_root()
    digest = hashlib.sha256()
    for name in CONVERGE_INPUTS:
        base = root / name
        update_with_files(digest, root, tree_files(base) if base.is_dir() else [base] if base.exists() else [])
    return digest.hexdigest()


def sentinel_url(endpoint: str, port: int) -> str:
    """The base URL of the sentinel beside a node's vLLM endpoint (``http://host:port``)."""
    host = urlsplit(endpoint).hostname or ""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def canary_args(canary: NodeSpec, baseline: list[NodeSpec], analysis: dict[str, float]) -> CanaryArgs:
    """The canary analysis of ``canary`` against ``baseline`` (the later batches, still on the old config): `vllm-fleet
    canary` with the stack's thresholds, run by the role on the controller after the canary's smoke test."""
    command = [sys.executable, "-m", "vllm_fleet.cli", "canary", "--vllm-version", canary.vllm_version]
    if baseline[0].vllm_version != canary.vllm_version:  # an upgrade: the baseline's metric names are its own
        command += ["--baseline-vllm-version", baseline[0].vllm_version]
    for key, option in ANALYSIS_OPTIONS.items():
        command += [option, f"{analysis[key]:g}"]
    return CanaryArgs(command=command, baseline=[n.endpoint for n in baseline])


def run() -> None:
    cfg = pulumi.Config("vllm-fleet")
    fleet_file = cfg.get("fleetFile")
    config = {INLINE: cfg.get_object("fleet"), FILE: fleet_file}
    try:
        # Inline, or a fleet file the stack names (relative to the project: the program's working directory).
        data, name = stack_fleet({k: v for k, v in config.items() if v is not None}, Path.cwd())
        try:
            fleet, _hit = cached_plan(data)
        except FleetError as err:
            raise in_file(err, name) from None
    except FleetError as err:
        # Fails the preview/update before any resource is registered, naming each field and its fix.
        raise pulumi.RunError(str(err)) from None
    for _i, model in unverified(fleet.role_vars.get("vllm_models")):
        pulumi.log.warn(
            f"model {model} is staged unverified (vllm_models: unverified: true): no manifest checks its files at "
            "staging, before a rollout or in the audit (docs/mirror.md, 'Model manifests')"
        )
    # The secrets, once per stack, in its config: the commands name the stack, never a value, and read them when
    # they run (stack_secrets). Without a key in config, SSH uses the controller's own agent.
    stack = f"{pulumi.get_project()}/{pulumi.get_stack()}"
    api_key = cfg.get_secret("apiKey")
    key_version = api_key_version(api_key) if api_key is not None else None
    digest = converge_digest()
    smoke = cfg.get_bool("smoke") is not False  # the gate is on unless the stack turns it off

    canary: dict[str, CanaryArgs] = {}

    def node(spec: NodeSpec, after: list[pulumi.Resource], cordon: str | None = None) -> GpuNode:
        return GpuNode(
            spec.name,
            GpuNodeArgs(
                node=spec,
                stack=stack,
                api_key_version=key_version,
                converge_digest=digest,
                role_vars=fleet.role_vars,
                smoke=smoke,
                canary=canary.get(spec.name),
                cordoned=cordon,
            ),
            opts=pulumi.ResourceOptions(depends_on=after),
        )

    serving = serving_endpoints(n.endpoint for n in fleet.nodes)
    port = sentinel_port(fleet.role_vars)
    cordoned = (
        cordoned_nodes({n.name: sentinel_url(n.endpoint, port) for n in fleet.nodes if n.endpoint in serving})
        if port is not None
        else {}
    )
    # A serving host a person cordoned is in no batch: its converge keeps its last inputs until it is uncordoned.
    for n in fleet.nodes:
        if n.name in cordoned:
            pulumi.log.warn(f"{n.name} is cordoned ({cordoned[n.name]}): skipped; uncordon it to roll it")
            node(n, [], cordoned[n.name])
    rolling = [n for n in fleet.nodes if n.endpoint in serving and n.name not in cordoned]
    new = [n for n in fleet.nodes if n.endpoint not in serving]
    # Serving hosts: the canary, then batch after batch, each waiting for the last one's gate (and the pause).
    previous: list[pulumi.Resource] = []
    batches = fleet.batches(rolling)
    waves = fleet.provision_waves(new)
    # The order, for the progress display (vllm_fleet/rollout/progress.py): the engine's events do not carry it.
    pulumi.log.info(
        RolloutPlan(
            batches=[[n.name for n in b] for b in batches],
            new=[[n.name for n in w] for w in waves],
            canary=fleet.canary and len(batches) > 1,  # then the first batch is one host
            smoke=smoke,
            pause_s=fleet.pause_s,
            cordoned=cordoned,
        ).message()
    )
    if fleet.analysis is not None and fleet.canary and len(batches) > 1:
        first, rest = batches[0][0], [n for b in batches[1:] for n in b]
        canary[first.name] = canary_args(first, rest, fleet.analysis)
    for k, batch in enumerate(batches):
        nodes = [node(n, previous) for n in batch]
        previous = [g.gate for g in nodes]
        if fleet.pause_s and k < len(batches) - 1:
            previous = [rollout_pause(k, fleet.pause_s, nodes)]
    # New hosts: nothing to protect, provisioned beside the rollout, provision_parallel at a time.
    wave: list[pulumi.Resource] = []
    for batch in waves:
        wave = [node(n, wave).gate for n in batch]

    table = [
        {
            "host": n.name,
            "endpoint": n.endpoint,
            "hardware": n.hardware,
            "profile": n.profile,
            "vllm_version": n.vllm_version,
            "config_hash": n.config_hash[:12],
            "rollout": "cordoned" if n.name in cordoned else "batch" if n.endpoint in serving else "new",
        }
        for n in fleet.nodes
    ]
    pulumi.export("nodes", table)
