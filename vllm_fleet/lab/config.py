"""Where the lab keeps things and which addresses it uses (pure; reads only the environment)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from vllm_fleet import paths

# A private /24 that is unlikely to clash with a real network (the top of 172.16.0.0/12).
LAB_SUBNET = "172.31.254.0/24"
LAB_PREFIXLEN = 24
BRIDGE_NAME = "vfleet0"
BRIDGE_IP = "172.31.254.1"
FIRST_HOST_OCTET = 11
MAX_HOSTS = 200
# The port the controller serves the package mirror on, on the bridge address.
MIRROR_PORT = 8765
# The lab router (HAProxy) listens on the bridge address at ROUTER_PORT, in front of each host's VLLM_PORT
# (the cpu-lab profile's port).
ROUTER_PORT = 8080
VLLM_PORT = 8000
HOST_PREFIX = "vfleet-node"
DEFAULT_HOSTS = 2


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    return paths.cache_dir(env)


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("VLLM_FLEET_LAB_DIR") or "/var/lib/vllm-fleet/lab")


def router_dir(state_dir: Path) -> Path:
    """The lab router's config, pid file and runtime-API socket."""
    return state_dir / "router"


def router_command(state_dir: Path, vllm_fleet: str) -> list[str]:
    """The role's router hook for the lab: ``vllm-fleet router --haproxy-socket <the lab's socket>``."""
    return [vllm_fleet, "router", "--haproxy-socket", str(router_dir(state_dir) / "haproxy.sock")]


def repo_root() -> Path:
    """The checkout this package lives in."""
    return paths.project_root()


def default_inventory_dir() -> Path:
    return repo_root() / "inventories" / "lab"


def host_name(index: int) -> str:
    return f"{HOST_PREFIX}{index}"


def host_ip(index: int) -> str:
    if not 1 <= index <= MAX_HOSTS:
        raise ValueError(f"host index {index} out of range 1..{MAX_HOSTS}")
    base = BRIDGE_IP.rsplit(".", 1)[0]
    return f"{base}.{FIRST_HOST_OCTET + index - 1}"


def mirror_url() -> str:
    return f"http://{BRIDGE_IP}:{MIRROR_PORT}"
