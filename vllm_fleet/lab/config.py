"""Where the lab keeps things and which names and addresses it uses (pure; reads only the environment).

Three labs can live side by side on one machine: the main job's (``./scripts/up``), the tests' converged lab
(``./scripts/test``) and the bare hosts the lab's own tests bring up and down (tests/lab). Each has its own
:class:`LabNet` — host names, bridge, subnet, veths, cgroup group, state directory, and services bound to its own
bridge address — so a test run never stops, renames or re-addresses the main job's hosts, and the lab's own tests
run beside the converged lab. ``VLLM_FLEET_LAB_NET`` picks one (``main`` by default; the tests set ``test``, the
lab's own tests ``selftest``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vllm_fleet.project import paths

LAB_PREFIXLEN = 24
FIRST_HOST_OCTET = 11
MAX_HOSTS = 200
# The port the controller serves the package mirror on, on the bridge address.
MIRROR_PORT = 8765
# The lab router (HAProxy) listens on the bridge address at ROUTER_PORT, in front of each host's VLLM_PORT
# (the cpu-lab profile's port).
ROUTER_PORT = 8080
VLLM_PORT = 8000
# Seconds a lab node's engine may stay wedged before its sentinel's watchdog restarts it (role default: off).
LAB_WATCHDOG_SEC = 60
# The lab's Prometheus (Debian's) listens on the bridge address, scraping the lab's nodes.
PROMETHEUS_PORT = 9090
DEFAULT_HOSTS = 2
LAB_NET_ENV = "VLLM_FLEET_LAB_NET"


@dataclass(frozen=True)
class LabNet:
    """One lab's names and addresses; no name of one lab is a prefix of another's (``down`` matches by prefix)."""

    key: str
    host_prefix: str
    bridge: str
    subnet_octet: int
    """The third octet of the lab's private /24 (the top of 172.16.0.0/12, unlikely to clash with a real one)."""
    veth_prefix: str
    cgroup_group: str
    default_state_dir: str

    @property
    def subnet(self) -> str:
        return f"172.31.{self.subnet_octet}.0/{LAB_PREFIXLEN}"

    @property
    def bridge_ip(self) -> str:
        return f"172.31.{self.subnet_octet}.1"

    def host_name(self, index: int) -> str:
        return f"{self.host_prefix}{index}"

    def host_ip(self, index: int) -> str:
        if not 1 <= index <= MAX_HOSTS:
            raise ValueError(f"host index {index} out of range 1..{MAX_HOSTS}")
        return f"172.31.{self.subnet_octet}.{FIRST_HOST_OCTET + index - 1}"

    @property
    def mirror_url(self) -> str:
        return f"http://{self.bridge_ip}:{MIRROR_PORT}"

    @property
    def router_url(self) -> str:
        return f"http://{self.bridge_ip}:{ROUTER_PORT}"

    @property
    def prometheus_url(self) -> str:
        return f"http://{self.bridge_ip}:{PROMETHEUS_PORT}"


MAIN = LabNet("main", "vfleet-node", "vfleet0", 254, "vfh", "vfleet", "/var/lib/vllm-fleet/lab")
TEST = LabNet("test", "vftest-node", "vftest0", 253, "vth", "vftest", "/var/lib/vllm-fleet/test-lab")
SELFTEST = LabNet("selftest", "vfself-node", "vfself0", 252, "vsh", "vfself", "/var/lib/vllm-fleet/selftest-lab")
LAB_NETS = {net.key: net for net in (MAIN, TEST, SELFTEST)}


def lab_net(env: Mapping[str, str] | None = None) -> LabNet:
    """The lab this process works on: ``$VLLM_FLEET_LAB_NET`` (main, test or selftest), main when unset."""
    env = os.environ if env is None else env
    key = env.get(LAB_NET_ENV) or MAIN.key
    try:
        return LAB_NETS[key]
    except KeyError:
        raise ValueError(f"{LAB_NET_ENV}={key!r}: expected one of {', '.join(LAB_NETS)}") from None


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    return paths.cache_dir(env)


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("VLLM_FLEET_LAB_DIR") or lab_net(env).default_state_dir)


def lab_api_key_path() -> Path:
    """The lab fleet's API key (0600, in the cache; both labs share it): written by ``lab.fleet.lab_api_key``."""
    return cache_dir() / "lab-api-key"


def router_dir(state_dir: Path) -> Path:
    """The lab router's config, pid file and runtime-API socket."""
    return state_dir / "router"


def prometheus_dir(state_dir: Path) -> Path:
    """The lab Prometheus's generated configuration (``vllm-fleet monitoring``), data, pid file and log."""
    return state_dir / "prometheus"


def router_command(state_dir: Path, vllm_fleet: str) -> list[str]:
    """The role's router hook for the lab: ``vllm-fleet router --haproxy-socket <the lab's socket>``."""
    return [vllm_fleet, "router", "--haproxy-socket", str(router_dir(state_dir) / "haproxy.sock")]


def repo_root() -> Path:
    """The checkout this package lives in."""
    return paths.project_root()


def default_inventory_dir(state_dir: Path | None = None) -> Path:
    """The main lab's inventory is the checkout's ``inventories/lab``; another lab's lives in its state dir."""
    if lab_net() == MAIN:
        return repo_root() / "inventories" / "lab"
    return (state_dir or Path(lab_net().default_state_dir)) / "inventory"


def mirror_state_dir(net: LabNet | None = None) -> Path:
    """The mirror server of each lab (bound to that lab's bridge address): ``<cache>/mirror/server[-<lab>]``."""
    net = net or lab_net()
    name = "server" if net == MAIN else f"server-{net.key}"
    return cache_dir() / "mirror" / name


# The current lab's names, as functions (the environment is read at each call).
def host_name(index: int) -> str:
    return lab_net().host_name(index)


def host_ip(index: int) -> str:
    return lab_net().host_ip(index)


def mirror_url() -> str:
    return lab_net().mirror_url
