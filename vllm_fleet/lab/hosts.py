"""``lab up`` / ``lab status`` / ``lab down``: N systemd hosts as systemd-nspawn containers.

Per host ``vfleet-node<i>`` (state dir ``<lab>/hosts/vfleet-node<i>/``):

* an overlayfs root: lower = the cached Debian 12 rootfs, upper/work in the host dir;
* its identity written into the overlay: hostname, machine-id, fresh SSH host key,
  the controller key in root's authorized_keys, a resolv.conf that fails fast;
* a network namespace ``vfleet-node<i>`` with ``eth0`` = 172.31.254.(10+i)/24, the other end
  of its veth on the ``vfleet0`` bridge (172.31.254.1) and no route out;
* a cgroup ``vfleet/vfleet-node<i>`` and a detached supervisor loop that runs
  ``systemd-nspawn --boot`` in both, restarting it on a reboot (see :mod:`.supervisor`).

(The main lab's names; the tests' lab uses its own, :class:`vllm_fleet.lab.config.LabNet`, so that a test run
leaves the main job's lab as it found it.)

``up`` is idempotent (running hosts are left alone), ``down`` removes every process,
mount, namespace, link and cgroup of the lab, and works from what it finds on the machine
even when the state file is gone.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fleet.lab import cgroups, config, network, rootfs, supervisor
from vllm_fleet.lab import ssh as lab_ssh
from vllm_fleet.lab.inventory import remove_inventory, write_inventory
from vllm_fleet.lab.state import HostState, LabState, load_state, save_state, state_path
from vllm_fleet.lab.system import (
    LabError,
    ensure_debian_packages,
    missing_commands,
    mount_fstype,
    mounts_under,
    require_root,
    run,
    write_file,
)

Log = Callable[[str], None]
NSPAWN_RUNTIME = Path("/run/systemd/nspawn")
NSPAWN_TMPFS_MARKER = ".vllm-fleet-lab"
SSH_KEY_NAME = "id_ed25519"


def _print(msg: str) -> None:
    print(msg, flush=True)


# -- pure helpers ------------------------------------------------------------------------


def host_dir(state_dir: Path, name: str) -> Path:
    return state_dir / "hosts" / name


def index_of(name: str) -> int | None:
    suffix = name.removeprefix(config.lab_net().host_prefix)
    return int(suffix) if suffix != name and suffix.isdigit() else None


def etc_hosts(name: str, ip: str) -> str:
    return (
        "127.0.0.1\tlocalhost\n"
        f"{ip}\t{name}\n"
        f"{config.lab_net().bridge_ip}\tlab-controller\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
    )


def new_host_state(state_dir: Path, index: int) -> HostState:
    name = config.host_name(index)
    return HostState(
        name=name,
        index=index,
        ip=config.host_ip(index),
        netns=network.netns_name(name),
        veth=network.veth_name(index),
        dir=host_dir(state_dir, name),
        cgroup=cgroups.host_cgroup(name),
        machine_id=uuid.uuid4().hex,
    )


# -- one host ----------------------------------------------------------------------------


def mount_overlay(lower: Path, host: HostState) -> None:
    for d in (host.upper, host.work, host.merged):
        d.mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={lower},upperdir={host.upper},workdir={host.work}"
    run(["mount", "-t", "overlay", "overlay", "-o", opts, host.merged])


def write_identity(host: HostState, controller_pubkey: str) -> None:
    """Hostname, machine-id, DNS, SSH host key and root's authorized_keys, inside the overlay."""
    root = host.merged
    write_file(root / "etc" / "hostname", f"{host.name}\n")
    write_file(root / "etc" / "hosts", etc_hosts(host.name, host.ip))
    write_file(root / "etc" / "machine-id", f"{host.machine_id}\n", mode=0o444)
    write_file(root / "etc" / "resolv.conf", rootfs.RESOLV_CONF)
    key = root / "etc" / "ssh" / "ssh_host_ed25519_key"
    pub = lab_ssh.generate_host_key(key, f"root@{host.name}")
    key.chmod(0o600)
    write_file(host.host_key_pub, pub + "\n")
    ssh_dir = root / "root" / ".ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_file(ssh_dir / "authorized_keys", controller_pubkey.strip() + "\n", mode=0o600)


def start_host(state: LabState, host: HostState, controller_pubkey: str) -> HostState:
    """Create everything a host needs from scratch and start its supervisor (not waiting for sshd)."""
    teardown_host(host.name, host.index, state.state_dir, state.cgroup_roots)
    host.dir.mkdir(parents=True)
    mount_overlay(state.rootfs, host)
    write_identity(host, controller_pubkey)
    network.create_host_network(host.index, host.netns, host.ip)
    cg_dirs = cgroups.create(host.cgroup, state.cgroup_roots)
    argv = supervisor.nspawn_argv(host.name, host.merged, network.netns_path(host.netns))
    script = supervisor.render_script(host.dir, cg_dirs, argv)
    host.supervisor_pid = supervisor.launch(host.dir, script, host.log)
    host.started_at = time.time()
    return host


def host_running(host: HostState) -> bool:
    return (
        supervisor.is_supervisor(host.supervisor_pid, host.dir)
        and supervisor.nspawn_pid(host.dir) is not None
        and network.host_network_ok(host.index, host.netns)
        and mount_fstype(host.merged) == "overlay"
    )


def teardown_host(name: str, index: int | None, state_dir: Path, roots: list[Path]) -> None:
    """Remove every trace of one host; safe to call on a host that is half there or gone."""
    hdir = host_dir(state_dir, name)
    pid = supervisor.read_pid(hdir / supervisor.PIDFILE)
    if supervisor.is_supervisor(pid, hdir):
        supervisor.request_stop(hdir, pid)
    relpath = cgroups.host_cgroup(name)
    cgroups.kill_all(relpath, roots)
    cgroups.remove(relpath, roots)
    for mnt in sorted(mounts_under(hdir), key=len, reverse=True):
        _umount(mnt)
    if index is not None:
        network.delete_host_network(index, network.netns_name(name))
    if hdir.exists():
        shutil.rmtree(hdir, onerror=_gone_is_fine)


def _gone_is_fine(
    func: Callable[..., object], path: str, exc: tuple[type[BaseException], BaseException, object]
) -> None:
    """rmtree's error hook: a file that vanished under it (a lazily unmounted overlay's last writer) is removed."""
    if not isinstance(exc[1], FileNotFoundError):
        raise exc[1]


def _umount(path: str) -> None:
    for _ in range(50):
        if run(["umount", path], check=False).returncode == 0:
            return
        time.sleep(0.1)
    run(["umount", "--lazy", path])


# -- controller-wide pieces --------------------------------------------------------------


def ensure_nspawn_runtime() -> Path | None:
    """nspawn keeps per-container state under /run/systemd/nspawn and refuses to clean it up
    on a non-tmpfs filesystem (a controller whose /run is not a tmpfs): mount one there."""
    if mount_fstype(NSPAWN_RUNTIME) == "tmpfs":
        return NSPAWN_RUNTIME if (NSPAWN_RUNTIME / NSPAWN_TMPFS_MARKER).exists() else None
    if mount_fstype(Path("/run")) == "tmpfs":
        return None
    NSPAWN_RUNTIME.mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=16m", "vfleet-nspawn", NSPAWN_RUNTIME])
    write_file(NSPAWN_RUNTIME / NSPAWN_TMPFS_MARKER, "mounted by vllm-fleet lab up\n")
    return NSPAWN_RUNTIME


def _own_nspawn_tmpfs() -> bool:
    return mount_fstype(NSPAWN_RUNTIME) == "tmpfs" and (NSPAWN_RUNTIME / NSPAWN_TMPFS_MARKER).exists()


def release_nspawn_runtime() -> None:
    """Unmount the tmpfs ``up`` mounted on /run/systemd/nspawn, unless another lab's containers still use it."""
    if _own_nspawn_tmpfs() and not nspawn_processes(every_lab=True):
        _umount(str(NSPAWN_RUNTIME))


def ensure_tools() -> None:
    ensure_debian_packages({**rootfs.HOST_TOOLS, "setsid": "util-linux", "mount": "mount"})


def write_known_hosts(state: LabState) -> None:
    lines = []
    for h in sorted(state.hosts, key=lambda h: h.index):
        if h.host_key_pub.is_file():
            lines.append(lab_ssh.known_hosts_line([h.name, h.ip], h.host_key_pub.read_text()))
    write_file(state.known_hosts, "".join(f"{line}\n" for line in lines))


def _parallel(fn: Callable[[HostState], HostState], hosts: Iterable[HostState]) -> list[HostState]:
    items = list(hosts)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(len(items), 16)) as pool:
        return list(pool.map(fn, items))


# -- up / status / down ------------------------------------------------------------------


def _same_lab(state: LabState | None) -> None:
    """A state dir belongs to the lab that made it: refuse to run another lab's names over it."""
    net = config.lab_net()
    if state is not None and state.net != net.key:
        raise LabError(
            f"{state.state_dir} holds the {state.net!r} lab, but {config.LAB_NET_ENV} selects {net.key!r}: "
            f"set {config.LAB_NET_ENV}={state.net} to work on it, or pick another --state-dir"
        )


def lab_up(
    n: int | None = None,
    state_dir: Path | None = None,
    *,
    inventory_dir: Path | None = None,
    cache: Path | None = None,
    log: Log = _print,
) -> LabState:
    """Bring the lab to ``n`` running hosts (default: as many as are up, else 2); idempotent."""
    require_root()
    state_dir = (state_dir or config.state_dir()).resolve()
    ensure_tools()
    image = rootfs.build_rootfs(cache)
    previous = load_state(state_dir)
    _same_lab(previous)
    if n is None:
        n = len(previous.hosts) if previous and previous.hosts else config.DEFAULT_HOSTS
    if not 1 <= n <= config.MAX_HOSTS:
        raise LabError(f"--hosts must be between 1 and {config.MAX_HOSTS}")
    ssh_dir = state_dir / "ssh"
    state = LabState(
        state_dir=state_dir,
        rootfs=image.path,
        ssh_key=ssh_dir / SSH_KEY_NAME,
        known_hosts=ssh_dir / "known_hosts",
        cgroup_roots=cgroups.hierarchy_roots(),
        inventory=inventory_dir
        or (previous.inventory if previous else None)
        or config.default_inventory_dir(state_dir),
    )
    if previous is not None:
        state.nspawn_tmpfs = previous.nspawn_tmpfs
    lab_ssh.ensure_controller_key(state.ssh_key)
    controller_pub = state.ssh_key.with_suffix(".pub").read_text()
    network.ensure_bridge()
    state.nspawn_tmpfs = ensure_nspawn_runtime() or state.nspawn_tmpfs

    old = {h.name: h for h in (previous.hosts if previous else [])}
    keep: list[HostState] = []
    fresh: list[HostState] = []
    for i in range(1, n + 1):
        name = config.host_name(i)
        if name in old and host_running(old[name]):
            keep.append(old[name])
        else:
            fresh.append(new_host_state(state_dir, i))
    for extra in (h for name, h in old.items() if (index_of(name) or 0) > n):
        log(f"lab: stopping {extra.name} (scaling down to {n})")
        teardown_host(extra.name, extra.index, state_dir, state.cgroup_roots)

    if not fresh:
        state.hosts = keep
        state.last_up_started = []
        write_known_hosts(state)
        save_state(state)
        _write_inventory(state, log)
        log(f"lab: {n} hosts up; nothing to start")
        return state

    log(f"lab: starting {', '.join(h.name for h in fresh)}")
    started = _parallel(lambda h: start_host(state, h, controller_pub), fresh)
    state.hosts = sorted(keep + started, key=lambda h: h.index)
    state.last_up_started = [h.name for h in started]
    write_known_hosts(state)
    save_state(state)  # before waiting: a failed wait still leaves `down` everything it needs

    def wait(h: HostState) -> HostState:
        lab_ssh.wait_for_ssh(h.ip, state.ssh_key, state.known_hosts)
        return h

    _parallel(wait, started)
    _write_inventory(state, log)
    log(f"lab: up: {', '.join(f'{h.name}={h.ip}' for h in state.hosts)}")
    return state


def _write_inventory(state: LabState, log: Log) -> None:
    if state.inventory is None:
        return
    for path in write_inventory(state, state.inventory):
        log(f"lab: wrote {path}")


@dataclass
class HostStatus:
    name: str
    ip: str
    running: bool
    supervisor_pid: int | None
    nspawn_pid: int | None
    boots: int
    system: str = "-"
    failed_units: list[str] = field(default_factory=list)


@dataclass
class LabStatus:
    state: LabState | None
    hosts: list[HostStatus]
    bridge_up: bool


def probe_system(state: LabState, host: HostState) -> tuple[str, list[str]]:
    """``systemctl is-system-running`` and the failed units, over SSH."""
    cmd = "systemctl is-system-running; systemctl --failed --no-legend --plain | cut -d' ' -f1"
    proc = lab_ssh.ssh_run(host.ip, state.ssh_key, state.known_hosts, cmd, timeout=15)
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        return "unreachable", []
    return lines[0], lines[1:]


def lab_status(state_dir: Path | None = None, *, probe: bool = True) -> LabStatus:
    require_root()
    state_dir = (state_dir or config.state_dir()).resolve()
    state = load_state(state_dir)
    if state is None:
        return LabStatus(state=None, hosts=[], bridge_up=network.link_exists(config.lab_net().bridge))

    def one(h: HostState) -> HostStatus:
        running = host_running(h)
        st = HostStatus(
            name=h.name,
            ip=h.ip,
            running=running,
            supervisor_pid=h.supervisor_pid if running else None,
            nspawn_pid=supervisor.nspawn_pid(h.dir) if running else None,
            boots=supervisor.boots(h.dir),
        )
        if running and probe:
            st.system, st.failed_units = probe_system(state, h)
        return st

    items = state.hosts
    if items:
        with ThreadPoolExecutor(max_workers=min(len(items), 16)) as pool:
            statuses = list(pool.map(one, items))
    else:
        statuses = []
    return LabStatus(state=state, hosts=statuses, bridge_up=network.link_exists(state.bridge))


def lab_down(state_dir: Path | None = None, *, log: Log = _print) -> list[str]:
    """Stop and remove every lab host and the lab network; return the host names removed."""
    require_root()
    state_dir = (state_dir or config.state_dir()).resolve()
    state = load_state(state_dir)
    _same_lab(state)
    roots = state.cgroup_roots if state else cgroups.hierarchy_roots()
    names: set[str] = {h.name for h in state.hosts} if state else set()
    hosts_root = state_dir / "hosts"
    if hosts_root.is_dir():
        names.update(p.name for p in hosts_root.iterdir() if p.is_dir())
    names.update(network.lab_netns())
    for root in roots:
        group = root / cgroups.lab_group()
        if group.is_dir():
            names.update(p.name for p in group.iterdir() if p.is_dir())
    if names:
        log(f"lab: stopping {', '.join(sorted(names))}")

    def down_one(name: str) -> str:
        teardown_host(name, index_of(name), state_dir, roots)
        return name

    if names:
        with ThreadPoolExecutor(max_workers=min(len(names), 16)) as pool:
            list(pool.map(down_one, sorted(names)))
    for link in network.lab_links():
        if link != config.lab_net().bridge:
            run(["ip", "link", "del", link], check=False)
    network.delete_bridge()
    cgroups.remove_lab_group_if_empty(roots)
    if hosts_root.is_dir() and not any(hosts_root.iterdir()):
        hosts_root.rmdir()
    release_nspawn_runtime()
    if state and state.inventory:
        remove_inventory(state.inventory)
    state_path(state_dir).unlink(missing_ok=True)
    (state_dir / "ssh" / "known_hosts").unlink(missing_ok=True)  # host keys die with the hosts
    left = leftovers(state_dir, roots)
    if any(left.values()):
        raise LabError(f"lab down left things behind: {left}")
    log("lab: down" if names else "lab: nothing was running")
    return sorted(names)


def nspawn_processes(*, every_lab: bool = False) -> list[int]:
    """PIDs of systemd-nspawn processes started for this lab (or for any lab), by their --network-namespace-path."""
    found = []
    nets = config.LAB_NETS.values() if every_lab else [config.lab_net()]
    markers = [str(network.NETNS_DIR / net.host_prefix).encode() for net in nets]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"systemd-nspawn") and any(m in a for a in argv for m in markers):
            found.append(int(entry.name))
    return found


def memory_kib(state: LabState, host: HostState) -> int:
    """Proportional set size (PSS) of everything in a host's cgroup, in KiB."""
    total = 0
    for pid in cgroups.procs(host.cgroup, state.cgroup_roots):
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
    return total


def leftovers(state_dir: Path, roots: list[Path] | None = None) -> dict[str, list[str]]:
    """What of a lab exists on this machine now (all empty after a clean ``down``)."""
    roots = roots if roots is not None else cgroups.hierarchy_roots()
    procs = [str(p) for p in nspawn_processes()]
    procs += [str(p) for p in cgroups.procs(cgroups.lab_group(), roots)]
    lab_mounts = mounts_under(state_dir)
    if _own_nspawn_tmpfs() and not nspawn_processes(every_lab=True):
        lab_mounts.append(str(NSPAWN_RUNTIME))  # shared by the labs: this lab's to remove when it is the last
    return {
        "processes": sorted(set(procs)),
        "mounts": lab_mounts,
        "netns": network.lab_netns(),
        "links": network.lab_links(),
        "cgroups": [str(p) for p in cgroups.lab_cgroups(roots)],
    }


def preflight() -> list[str]:
    """Why the lab cannot run here (empty when it can); used by the tests to skip clearly."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root")
    if missing_commands(["apt-get"]) and missing_commands(["systemd-nspawn"]):
        problems.append("no systemd-nspawn and no apt-get to install it")
    if not Path("/proc/self/ns/net").exists():
        problems.append("no network namespaces")
    return problems
