"""The main job on the local lab: lab site up, then `pulumi up` of the `lab` stack with the real engine."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_fleet.deploy.engine import clear_stale_locks, configure, ensure_engine, stack, up
from vllm_fleet.fleet.plan import FleetPlan
from vllm_fleet.fleet.spec import plan_fleet
from vllm_fleet.lab.config import lab_api_key_path
from vllm_fleet.lab.hosts import Log
from vllm_fleet.lab.prometheus import prometheus_up
from vllm_fleet.lab.site import site_up
from vllm_fleet.lab.stack import LAB_PROFILE, lab_fleet
from vllm_fleet.lab.system import LabError
from vllm_fleet.profiles.loader import builtin_profile_names
from vllm_fleet.project.paths import project_root
from vllm_fleet.trust.user_yaml import read_user_yaml


def lab_api_key() -> str:
    """The lab fleet's API key, generated once (0600, in the cache); Pulumi keeps it as a secret."""
    path = lab_api_key_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("sk-lab-" + secrets.token_hex(16))
    return path.read_text().strip()


def lab_signing_key() -> tuple[Path, Path]:
    """The lab's key for signing audit bundles and the allowed-signers file an auditor verifies them with (made
    once, beside the API key): (private key, allowed signers)."""
    from vllm_fleet.audit.signature import signing_key

    return signing_key(lab_api_key_path().parent, "vllm-fleet-lab")


@dataclass(frozen=True)
class LabUp:
    """One `pulumi up` of the lab stack: the nodes it exported, what they had before, and how it ended."""

    nodes: list[dict[str, Any]]
    before: dict[str, str]
    """host -> the config hash (12 hex digits) the stack recorded before this run (absent: a new host)."""
    plan: FleetPlan
    """The lab fleet's plan, computed once: the lab's Prometheus, the audit and the rollout report all read it."""
    started_at: float
    error: str | None = None
    """Why the update failed (its last lines); None: it succeeded."""
    up_wall_s: float = 0.0
    """Seconds `pulumi up` itself took."""
    prometheus_url: str | None = None
    """The lab's Prometheus, scraping the nodes with the generated rules (None: not started, see monitoring_error)."""
    monitoring_error: str | None = None


def lab_fleet_up(
    hosts: int | None,
    stack_name: str = "lab",
    *,
    profile: str = LAB_PROFILE,
    log: Log = print,
    pulumi_log: Log | None = None,
    on_event: Callable[[Any], None] | None = None,
) -> LabUp:
    """Bring the lab up and run `pulumi up` on it with ``profile`` on every host. A failed update is returned
    (with the nodes of the last good one), not raised: the caller still reports what each host became. An invalid
    fleet (a broken profile file) raises ``FleetError`` before the stack is configured. Pulumi's own output goes to
    ``pulumi_log`` (default: ``log``), its engine events to ``on_event`` (the progress display)."""
    from pulumi import automation as auto

    if profile not in builtin_profile_names():
        profile = str(Path(profile).resolve())  # the stack config is read from the project root
    site = site_up(hosts, log=log)
    engine = ensure_engine(log)
    clear_stale_locks(engine, stack_name, log)
    st = stack(engine, stack_name)
    previous = st.outputs().get("nodes")
    # A host cordoned in that run kept its older config: its row's hash is the one it was not given.
    rows = (previous.value if previous else []) or []
    before = {n["host"]: n["config_hash"] for n in rows if n.get("rollout") != "cordoned"}
    fleet = lab_fleet(site.state, site.model_dir, profile)
    plan = plan_fleet(fleet)
    configure(
        st,
        fleet,
        Path(site.state.ssh_key).read_text(),
        lab_api_key(),
    )
    # vllm-fleet 0.1's lab stacks carried a knownHostsFile; the pinned host_key per host is the one policy now.
    if "vllm-fleet:knownHostsFile" in st.get_all_config():
        st.remove_config("vllm-fleet:knownHostsFile")
    started = time.time()
    try:
        outputs = up(st, on_output=lambda line: (pulumi_log or log)(line.rstrip("\n")), on_event=on_event)
    except auto.CommandError as err:
        tail = [line for line in str(err).splitlines() if line.strip()][-12:]
        last = list((previous.value if previous else []) or [])
        return LabUp(last, before, plan, started, "\n".join(tail), time.time() - started)
    nodes: list[dict[str, Any]] = outputs.get("nodes", [])
    up_wall_s = time.time() - started
    try:  # beside the nodes: Prometheus with what `vllm-fleet monitoring` generates for this very fleet
        url = prometheus_up(site.state, plan)
    except (LabError, OSError, subprocess.SubprocessError) as err:
        return LabUp(nodes, before, plan, started, None, up_wall_s, monitoring_error=str(err))
    log(f"prometheus: {url} (scraping {len(nodes)} node(s) with the generated rules and alerts)")
    return LabUp(nodes, before, plan, started, None, up_wall_s, prometheus_url=url)


def lab_stack_fleet(stack_name: str = "lab") -> dict[str, Any] | None:
    """The fleet the lab stack was last configured with (Pulumi.<stack>.yaml), or None."""
    path = project_root() / f"Pulumi.{stack_name}.yaml"
    if not path.is_file():
        return None
    raw = (read_user_yaml(path) or {}).get("config", {}).get("vllm-fleet:fleet")
    fleet = json.loads(raw) if isinstance(raw, str) else raw
    return fleet if isinstance(fleet, dict) else None
