"""The lab network: one bridge on the controller, one network namespace + veth pair per host.

::

    controller: vfleet0 172.31.254.1/24 ── vfh1 ══ eth0 172.31.254.11/24 (netns vfleet-node1)
                                        └─ vfh2 ══ eth0 172.31.254.12/24 (netns vfleet-node2)

(the main lab's names; the tests' lab has its own: vftest0, 172.31.253.0/24, vth<i>, vftest-node<i>, see
:class:`vllm_fleet.lab.config.LabNet`).

Hosts get only the on-link route of the lab subnet: no default route, no DNS, so nothing
leaves the machine. The bridge does not forward to other interfaces (IPv4 forwarding is
off on it), and the controller's services on the bridge address (the package mirror) are
reachable from every host.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from vllm_fleet.lab import config
from vllm_fleet.lab.system import run

NETNS_DIR = Path("/run/netns")
GUEST_IFACE = "eth0"


def netns_name(host: str) -> str:
    """Each host's network namespace carries the host's name (``vfleet-node<i>``)."""
    assert host.startswith(config.lab_net().host_prefix), host
    return host


def veth_name(index: int) -> str:
    name = f"{config.lab_net().veth_prefix}{index}"
    assert len(name) <= 15, name  # IFNAMSIZ
    return name


def guest_mac(ip: str) -> str:
    """A stable, locally administered MAC for a host's eth0, derived from its IPv4 address."""
    octets = [int(o) for o in ip.split(".")]
    return "02:76:" + ":".join(f"{o:02x}" for o in octets)


def netns_path(netns: str) -> Path:
    return NETNS_DIR / netns


# -- queries ---------------------------------------------------------------------------


def links() -> list[dict[str, object]]:
    out = run(["ip", "-j", "link", "show"]).stdout
    data: list[dict[str, object]] = json.loads(out or "[]")
    return data


def link_exists(name: str) -> bool:
    return run(["ip", "link", "show", "dev", name], check=False).returncode == 0


def lab_links() -> list[str]:
    """Interfaces on the controller that belong to this lab (its bridge and host-side veths)."""
    names = [str(link.get("ifname", "")) for link in links()]
    return [n for n in names if n == config.lab_net().bridge or _is_lab_veth(n)]


def _is_lab_veth(name: str) -> bool:
    prefix = config.lab_net().veth_prefix
    return name.startswith(prefix) and name[len(prefix) :].isdigit()


def netns_list() -> list[str]:
    out = run(["ip", "-j", "netns", "list"], check=False).stdout.strip()
    if not out:
        return []
    return [str(ns["name"]) for ns in json.loads(out)]


def lab_netns() -> list[str]:
    return [ns for ns in netns_list() if ns.startswith(config.lab_net().host_prefix)]


# -- bridge ----------------------------------------------------------------------------


def ensure_bridge() -> bool:
    """Create and configure the lab bridge; return True if it was created."""
    created = False
    net = config.lab_net()
    bridge = net.bridge
    if not link_exists(bridge):
        run(["ip", "link", "add", bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0"])
        created = True
    addr = f"{net.bridge_ip}/{config.LAB_PREFIXLEN}"
    have = run(["ip", "-4", "-o", "addr", "show", "dev", bridge]).stdout
    if f" {addr} " not in have:
        run(["ip", "addr", "replace", addr, "dev", bridge])
    # Nothing received on the bridge is routed anywhere else, whatever the global setting.
    _write_sysctl(Path("/proc/sys/net/ipv4/conf") / bridge / "forwarding", "0")
    run(["ip", "link", "set", bridge, "up"])
    return created


def delete_bridge() -> None:
    bridge = config.lab_net().bridge
    if link_exists(bridge):
        run(["ip", "link", "del", bridge])


def _write_sysctl(path: Path, value: str) -> None:
    # Best effort: global IPv4 forwarding is off by default anyway.
    with contextlib.suppress(OSError):
        path.write_text(value)


# -- per host --------------------------------------------------------------------------


def create_host_network(index: int, netns: str, ip: str) -> None:
    """A fresh netns with ``eth0`` (the peer of ``vfh<index>`` on the bridge) holding ``ip``."""
    veth = veth_name(index)
    run(["ip", "netns", "add", netns])
    peer = ["peer", "name", GUEST_IFACE, "address", guest_mac(ip), "netns", netns]
    run(["ip", "link", "add", veth, "type", "veth", *peer])
    # A host re-created with the same IP must not be shadowed by a stale ARP entry (~30 s).
    bridge = config.lab_net().bridge
    run(["ip", "neigh", "flush", "to", ip, "dev", bridge], check=False)
    run(["ip", "link", "set", veth, "master", bridge, "up"])
    run(["ip", "-n", netns, "link", "set", "lo", "up"])
    run(["ip", "-n", netns, "addr", "add", f"{ip}/{config.LAB_PREFIXLEN}", "dev", GUEST_IFACE])
    run(["ip", "-n", netns, "link", "set", GUEST_IFACE, "up"])


def set_host_link(index: int, up: bool) -> None:
    """Plug or unplug a host's cable: its veth on the bridge up or down. Unplugged, the host runs on but nothing
    reaches it (SSH and HTTP time out, as for a host whose switch port or power went): the fault tests' unreachable
    host. `lab up` rebuilds a host it finds unplugged, so plug it back first."""
    run(["ip", "link", "set", veth_name(index), "up" if up else "down"])


def delete_host_network(index: int, netns: str) -> None:
    veth = veth_name(index)
    if link_exists(veth):
        run(["ip", "link", "del", veth], check=False)
    if netns in netns_list():
        run(["ip", "netns", "del", netns], check=False)


def host_network_ok(index: int, netns: str) -> bool:
    return netns in netns_list() and link_exists(veth_name(index))
