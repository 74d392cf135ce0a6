"""The nspawn lab for real: 2 systemd hosts, SSH with strict host keys, no route out, the
controller's bridge port reachable, idempotent ``up``, reboot via exit 133, Ansible over SSH,
and a ``down`` that leaves nothing behind. Needs root (CI runs as root); builds the Debian
rootfs on first use (a few minutes, cached afterwards)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from vllm_fleet.lab import config, supervisor
from vllm_fleet.lab.hosts import lab_down, lab_status, lab_up, leftovers, preflight
from vllm_fleet.lab.network import link_exists
from vllm_fleet.lab.ssh import ssh_argv, ssh_run
from vllm_fleet.lab.state import LabState, load_state

pytestmark = pytest.mark.lab

_problems = preflight()
if _problems:
    pytest.skip(f"the nspawn lab cannot run here: {'; '.join(_problems)}", allow_module_level=True)
NET = config.SELFTEST
"""Bare hosts of their own (`LabNet` "selftest"): never the main job's lab, and not the tests' converged lab, which
scripts/test starts in the background before this runs (tests/lab_prestart.py)."""
if link_exists(NET.bridge):
    pytest.skip(
        f"the lab tests' hosts are already up on this machine (bridge {NET.bridge} exists): "
        f"`VLLM_FLEET_LAB_NET={NET.key} vllm-fleet lab down --state-dir <dir>` them first",
        allow_module_level=True,
    )

N_HOSTS = 2
OK_STATES = ("running", "degraded")


@pytest.fixture(scope="module", autouse=True)
def selftest_net() -> Iterator[None]:
    """This module's lab functions (which read the environment at each call) work on NET, then the session's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(config.LAB_NET_ENV, NET.key)
        yield


@pytest.fixture(scope="module")
def lab(selftest_net: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabState]:
    base = tmp_path_factory.mktemp("lab")
    try:
        state = lab_up(N_HOSTS, base / "state", inventory_dir=base / "inventory")
    except BaseException:
        lab_down(base / "state")
        raise
    try:
        yield state
    finally:
        lab_down(base / "state")


def sh(state: LabState, host_index: int, command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    h = state.hosts[host_index]
    return ssh_run(h.ip, state.ssh_key, state.known_hosts, command, timeout=timeout)


def out(state: LabState, host_index: int, command: str) -> str:
    proc = sh(state, host_index, command)
    assert proc.returncode == 0, f"{command!r} on {state.hosts[host_index].name}: {proc.stderr}"
    return proc.stdout.strip()


def system_state(state: LabState, host_index: int) -> tuple[str, str]:
    proc = sh(state, host_index, "systemctl is-system-running --wait", timeout=60)
    failed = out(state, host_index, "systemctl --failed --no-legend --plain")
    return proc.stdout.strip(), failed


def test_hosts_boot_systemd_and_answer_ssh(lab: LabState) -> None:
    assert [h.name for h in lab.hosts] == [config.host_name(1), config.host_name(2)]
    ids = set()
    for i, h in enumerate(lab.hosts):
        st, failed = system_state(lab, i)
        assert st in OK_STATES, f"{h.name} is {st!r}; failed units:\n{failed}"
        if st == "degraded":
            warnings.warn(f"{h.name} is degraded; failed units:\n{failed}", stacklevel=1)
        assert out(lab, i, "hostname") == h.name
        assert out(lab, i, "ps -p 1 -o comm=") == "systemd"
        assert out(lab, i, "systemd-detect-virt") == "systemd-nspawn"
        ids.add(out(lab, i, "cat /etc/machine-id"))
    assert len(ids) == N_HOSTS, "every host has its own machine-id"


def test_host_key_checking_is_on(lab: LabState, tmp_path: Path) -> None:
    """With an empty known_hosts the same ssh command must refuse the host."""
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    h = lab.hosts[0]
    proc = subprocess.run(
        ssh_argv(h.ip, lab.ssh_key, empty, "true"), capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode != 0
    assert "Host key verification failed" in proc.stderr
    # The generated known_hosts has exactly the hosts' fresh keys.
    lines = lab.known_hosts.read_text().splitlines()
    assert [ln.split()[0] for ln in lines] == [f"{h.name},{h.ip}" for h in lab.hosts]


@pytest.fixture
def bridge_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A tiny HTTP server on the controller's bridge address (like the lab mirror); yields (url, token)."""
    token = f"vfleet-{os.getpid()}-{time.time_ns()}"
    (tmp_path / "token.txt").write_text(token)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer((NET.bridge_ip, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{NET.bridge_ip}:{server.server_address[1]}/token.txt", token
    finally:
        server.shutdown()
        server.server_close()


def controller_addresses() -> list[str]:
    """The controller's own IPv4 addresses outside the lab (targets on this machine only)."""
    data = json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=True).stdout)
    return [a["local"] for link in data if link["ifname"] not in ("lo", NET.bridge) for a in link.get("addr_info", [])]


def test_no_route_out_but_the_bridge_port_answers(lab: LabState, bridge_server: tuple[str, str]) -> None:
    url, token = bridge_server
    for i, h in enumerate(lab.hosts):
        assert out(lab, i, f"curl -sS -m 5 {url}") == token, f"{h.name} cannot reach {url}"
        routes = out(lab, i, "ip -4 route show")
        assert "default" not in routes and routes.startswith(NET.subnet), routes
        # Name resolution fails at once (no DNS), and there is no route to any outside address.
        start = time.monotonic()
        assert sh(lab, i, "curl -sS -m 3 http://deb.debian.org/").returncode != 0
        assert time.monotonic() - start < 10
        unreachable = sh(lab, i, "ip route get 1.1.1.1")
        assert unreachable.returncode != 0 and "unreachable" in unreachable.stderr.lower()
        for addr in controller_addresses():
            # The controller's other addresses are not reachable from the lab either.
            assert sh(lab, i, f"curl -sS -m 3 http://{addr}:22/").returncode != 0, addr
        # The hosts see each other on the bridge.
        other = lab.hosts[(i + 1) % len(lab.hosts)]
        assert sh(lab, i, f"ping -c1 -W2 {other.ip}").returncode == 0


def test_up_again_is_a_noop(lab: LabState) -> None:
    before = {h.name: h.supervisor_pid for h in lab.hosts}
    nspawn_before = {h.name: supervisor.nspawn_pid(h.dir) for h in lab.hosts}
    again = lab_up(N_HOSTS, lab.state_dir, inventory_dir=lab.inventory)
    assert again.last_up_started == []
    assert {h.name: h.supervisor_pid for h in again.hosts} == before
    assert {h.name: supervisor.nspawn_pid(h.dir) for h in again.hosts} == nspawn_before
    status = lab_status(lab.state_dir)
    assert [(h.name, h.running) for h in status.hosts] == [(h.name, True) for h in lab.hosts]
    assert all(h.system in OK_STATES for h in status.hosts), status.hosts


def test_reboot_comes_back(lab: LabState) -> None:
    """`systemctl reboot` makes nspawn exit 133; the supervisor starts the host again."""
    h = lab.hosts[0]
    boots = supervisor.boots(h.dir)
    old_nspawn = supervisor.nspawn_pid(h.dir)
    out(lab, 0, "touch /run/vfleet-before-reboot")
    sh(lab, 0, "systemctl reboot")  # the connection may drop: its exit status does not matter
    deadline = time.monotonic() + 90
    while True:
        proc = sh(lab, 0, "test ! -e /run/vfleet-before-reboot && systemctl is-system-running --wait", timeout=30)
        if proc.returncode == 0 or proc.stdout.strip() == "degraded":
            break
        assert time.monotonic() < deadline, f"{h.name} did not come back: {proc.stderr}"
        time.sleep(0.3)
    assert supervisor.boots(h.dir) == boots + 1
    assert supervisor.nspawn_pid(h.dir) not in (None, old_nspawn)
    assert supervisor.is_supervisor(h.supervisor_pid, h.dir), "the same supervisor restarted nspawn"
    assert "exited 133" in h.log.read_text(errors="replace")
    assert out(lab, 0, "hostname") == h.name


def _ansible() -> str | None:
    local = Path(sys.executable).parent / "ansible"
    return str(local) if local.exists() else shutil.which("ansible")


def test_inventory_files(lab: LabState) -> None:
    assert lab.inventory is not None
    inv = yaml.safe_load((lab.inventory / "hosts.yml").read_text())
    hosts = inv["all"]["children"]["vllm_nodes"]["hosts"]
    assert sorted(hosts) == [h.name for h in lab.hosts]
    for h in lab.hosts:
        v = hosts[h.name]
        assert v["ansible_host"] == h.ip and v["ansible_user"] == "root"
        assert v["vllm_fleet_profile"] == "cpu-lab" and v["vllm_fleet_host_key"] == h.host_key
        assert "StrictHostKeyChecking=yes" in v["ansible_ssh_common_args"]
        assert str(lab.known_hosts) in v["ansible_ssh_common_args"]
    gv = yaml.safe_load((lab.inventory / "group_vars" / "all.yml").read_text())
    assert gv["lab_mirror_url"] == f"http://{NET.bridge_ip}:{config.MIRROR_PORT}"


@pytest.mark.skipif(_ansible() is None, reason="ansible is not installed (pip install 'ansible-core<2.20')")
def test_ansible_over_ssh(lab: LabState) -> None:
    assert lab.inventory is not None
    ansible = _ansible()
    assert ansible is not None
    env = {
        **os.environ,
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=no",  # no ssh masters left behind after the test
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",  # ansible.cfg prints YAML; the asserts below read JSON
    }
    inv = str(lab.inventory / "hosts.yml")

    def ansible_run(*args: str) -> str:
        proc = subprocess.run(
            [ansible, "-i", inv, *args], capture_output=True, text=True, env=env, timeout=300, check=False
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    pong = ansible_run("all", "-m", "ansible.builtin.ping")
    for h in lab.hosts:
        assert f"{h.name} | SUCCESS" in pong
    # The reboot module works too: nspawn exits 133 and the supervisor boots the host again.
    h2 = lab.hosts[1]
    boots = supervisor.boots(h2.dir)
    rebooted = ansible_run(h2.name, "-m", "ansible.builtin.reboot")
    assert '"rebooted": true' in rebooted
    assert supervisor.boots(h2.dir) == boots + 1


def test_up_repairs_a_killed_host(lab: LabState) -> None:
    """SIGKILL a host's nspawn (container orphaned in its cgroup): `up` rebuilds just that host."""
    h = lab.hosts[1]
    pid = supervisor.nspawn_pid(h.dir)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while supervisor.is_supervisor(h.supervisor_pid, h.dir):  # exit 137 ends the loop
        assert time.monotonic() < deadline
        time.sleep(0.05)
    start = time.monotonic()
    again = lab_up(N_HOSTS, lab.state_dir, inventory_dir=lab.inventory)
    assert again.last_up_started == [h.name]
    assert time.monotonic() - start < 30
    assert again.hosts[0].supervisor_pid == lab.hosts[0].supervisor_pid
    proc = ssh_run(h.ip, again.ssh_key, again.known_hosts, "hostname")
    assert proc.stdout.strip() == h.name, proc.stderr


def test_down_leaves_nothing(lab: LabState) -> None:
    removed = lab_down(lab.state_dir)
    assert removed == [h.name for h in lab.hosts]
    left = leftovers(lab.state_dir, lab.cgroup_roots)
    assert left == {"processes": [], "mounts": [], "netns": [], "links": [], "cgroups": []}
    assert load_state(lab.state_dir) is None
    for h in lab.hosts:
        assert not h.dir.exists()
        assert not supervisor.is_supervisor(h.supervisor_pid, h.dir)
    assert not link_exists(NET.bridge)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert NET.host_prefix not in netns
    assert lab.inventory is not None and not (lab.inventory / "hosts.yml").exists()
    # down again is harmless
    assert lab_down(lab.state_dir) == []
