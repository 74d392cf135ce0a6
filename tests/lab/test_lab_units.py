"""The lab's pure parts (no root, no containers): addresses, scripts, inventory, state, CLI guard."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from vllm_fleet.lab import cli, config, inventory, network, rootfs, supervisor
from vllm_fleet.lab.hosts import etc_hosts, index_of, new_host_state, preflight
from vllm_fleet.lab.ssh import known_hosts_line, ssh_argv
from vllm_fleet.lab.state import LabState, load_state, save_state
from vllm_fleet.lab.system import parse_mountinfo


@pytest.fixture(autouse=True)
def main_lab_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """These pure tests check the main lab's names (tests/conftest.py selects the tests' lab for the session)."""
    monkeypatch.setenv(config.LAB_NET_ENV, "main")


def make_state(tmp_path: Path, n: int = 2) -> LabState:
    state = LabState(
        state_dir=tmp_path / "lab",
        rootfs=tmp_path / "rootfs",
        ssh_key=tmp_path / "lab" / "ssh" / "id_ed25519",
        known_hosts=tmp_path / "lab" / "ssh" / "known_hosts",
        cgroup_roots=[Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/systemd")],
        inventory=tmp_path / "inventory",
    )
    state.hosts = [new_host_state(state.state_dir, i) for i in range(1, n + 1)]
    return state


def test_addresses_and_names() -> None:
    assert config.host_name(1) == "vfleet-node1"
    assert config.host_ip(1) == "172.31.254.11"
    assert config.host_ip(2) == "172.31.254.12"
    assert config.mirror_url() == f"http://172.31.254.1:{config.MIRROR_PORT}"
    with pytest.raises(ValueError):
        config.host_ip(0)
    assert index_of("vfleet-node12") == 12
    assert index_of("something-else") is None
    assert network.netns_name("vfleet-node3") == "vfleet-node3"
    assert network.veth_name(200) == "vfh200"
    assert network.guest_mac("172.31.254.11") == "02:76:ac:1f:fe:0b"


def test_the_tests_lab_shares_no_name_or_address_with_the_main_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    """`lab down` of one lab matches its hosts, veths, netns and cgroups by prefix: no prefix of one lab may
    start another's, and their addresses, bridges, state and mirror-server dirs differ (the main job's, the tests'
    converged lab, and the lab tests' own bare hosts)."""
    main, test = config.LAB_NETS["main"], config.LAB_NETS["test"]
    assert config.lab_net({}) == main and config.lab_net({config.LAB_NET_ENV: "test"}) == test
    nets = list(config.LAB_NETS.values())
    assert len(nets) == 3
    for a_net, b_net in ((a, b) for a in nets for b in nets if a is not b):
        for field in ("host_prefix", "veth_prefix", "cgroup_group", "bridge"):
            a, b = getattr(a_net, field), getattr(b_net, field)
            assert not a.startswith(b), (field, a_net.key, b_net.key)
        assert a_net.subnet != b_net.subnet and a_net.bridge_ip != b_net.bridge_ip
        assert a_net.default_state_dir != b_net.default_state_dir
        assert config.mirror_state_dir(a_net) != config.mirror_state_dir(b_net)
    assert config.state_dir({config.LAB_NET_ENV: "test"}) != config.state_dir({})
    monkeypatch.setenv(config.LAB_NET_ENV, "test")
    assert config.host_ip(1) == "172.31.253.11" and config.host_name(1) == "vftest-node1"
    assert network.veth_name(3) == "vth3"
    test_mirror = config.mirror_state_dir()
    assert config.default_inventory_dir(Path("/x")) == Path("/x/inventory")  # not the checkout's inventories/lab
    monkeypatch.setenv(config.LAB_NET_ENV, "main")
    assert config.mirror_state_dir() != test_mirror
    assert config.default_inventory_dir(Path("/x")) == config.repo_root() / "inventories" / "lab"
    with pytest.raises(ValueError, match="VLLM_FLEET_LAB_NET='prod'"):
        config.lab_net({config.LAB_NET_ENV: "prod"})


def test_paths_follow_the_environment(tmp_path: Path) -> None:
    assert config.cache_dir({"VLLM_FLEET_CACHE": str(tmp_path)}) == tmp_path
    assert config.cache_dir({"HOME": "/home/x"}) == Path("/home/x/.cache/vllm-fleet")
    assert config.state_dir({}) == Path("/var/lib/vllm-fleet/lab")
    assert config.state_dir({config.LAB_NET_ENV: "test"}) == Path("/var/lib/vllm-fleet/test-lab")
    assert config.state_dir({"VLLM_FLEET_LAB_DIR": str(tmp_path)}) == tmp_path
    path, marker = rootfs.rootfs_paths(tmp_path)
    assert path == tmp_path / "rootfs" / "debian-12"
    assert marker == tmp_path / "rootfs" / "debian-12.json"
    assert not rootfs.is_ready(path, marker)


def test_debootstrap_command_has_what_ansible_needs(tmp_path: Path) -> None:
    argv = rootfs.debootstrap_argv(tmp_path, "http://mirror/debian")
    include = next(a for a in argv if a.startswith("--include=")).split("=", 1)[1].split(",")
    for pkg in ("systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-apt", "sudo"):
        assert pkg in include
    assert argv[-3:] == ["bookworm", str(tmp_path), "http://mirror/debian"]


def test_supervisor_script_restarts_on_133_only(tmp_path: Path) -> None:
    argv = supervisor.nspawn_argv("vfleet-node1", tmp_path / "merged", Path("/run/netns/vfleet-node1"))
    for flag in ("--boot", "--keep-unit", "--register=no", "--network-namespace-path=/run/netns/vfleet-node1"):
        assert flag in argv
    script = supervisor.render_script(tmp_path, [Path("/sys/fs/cgroup/unified/vfleet/vfleet-node1")], argv)
    assert '[ "$rc" -eq 133 ] || break' in script
    assert "echo $$ > /sys/fs/cgroup/unified/vfleet/vfleet-node1/cgroup.procs" in script
    assert subprocess.run(["sh", "-n"], input=script, text=True, check=False).returncode == 0


def test_supervisor_loop_semantics(tmp_path: Path) -> None:
    """Run the real loop with a fake nspawn: exits 133 twice, then 0; no cgroups needed."""
    counter = tmp_path / "count"
    fake = tmp_path / "fake-nspawn"
    fake.write_text(f'#!/bin/sh\necho x >> {counter}\n[ "$(wc -l < {counter})" -ge 3 ] && exit 0\nexit 133\n')
    fake.chmod(0o755)
    script = supervisor.render_script(tmp_path, [], [str(fake)])
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("exited 133") == 2 and "exited 0" in proc.stdout
    assert supervisor.boots(tmp_path) == 3
    assert not (tmp_path / supervisor.PIDFILE).exists()


def test_supervisor_stop_file_ends_the_loop(tmp_path: Path) -> None:
    fake = tmp_path / "fake-nspawn"
    fake.write_text("#!/bin/sh\nexit 133\n")
    fake.chmod(0o755)
    (tmp_path / supervisor.STOPFILE).write_text("")
    script = supervisor.render_script(tmp_path, [], [str(fake)])
    subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30, check=True)
    assert supervisor.boots(tmp_path) == 1


def test_inventory_is_strict_ansible_yaml(tmp_path: Path) -> None:
    state = make_state(tmp_path)
    for h in state.hosts:  # what write_identity leaves in a started host's directory
        h.host_key_pub.parent.mkdir(parents=True, exist_ok=True)
        h.host_key_pub.write_text(f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{h.index:0>39} root@{h.name}\n")
    written = inventory.write_inventory(state, tmp_path / "inventory")
    assert [p.name for p in written] == ["hosts.yml", "all.yml"]
    data = yaml.safe_load(written[0].read_text())
    hosts = data["all"]["children"]["vllm_nodes"]["hosts"]
    assert list(hosts) == ["vfleet-node1", "vfleet-node2"]
    node = hosts["vfleet-node1"]
    assert node["ansible_host"] == "172.31.254.11"
    assert node["ansible_user"] == "root"
    assert node["ansible_ssh_private_key_file"] == str(state.ssh_key)
    assert f"UserKnownHostsFile={state.known_hosts}" in node["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in node["ansible_ssh_common_args"]
    assert node["vllm_fleet_profile"] == "cpu-lab" and "vllm_fleet_hardware" not in node  # inventories may not set it
    assert node["vllm_fleet_host_key"] == state.hosts[0].host_key and "root@" not in node["vllm_fleet_host_key"]
    gv = yaml.safe_load(written[1].read_text())
    assert gv["lab_mirror_url"] == "http://172.31.254.1:8765"
    assert gv["lab_mirror_port"] == 8765
    inventory.remove_inventory(tmp_path / "inventory")
    assert not any((tmp_path / "inventory").rglob("*.yml"))


def test_state_round_trips(tmp_path: Path) -> None:
    state = make_state(tmp_path, n=3)
    state.hosts[0].supervisor_pid = 1234
    save_state(state)
    loaded = load_state(state.state_dir)
    assert loaded == state
    assert loaded.host("vfleet-node1").merged == state.state_dir / "hosts" / "vfleet-node1" / "merged"
    assert load_state(tmp_path / "nowhere") is None


def test_ssh_is_strict() -> None:
    argv = ssh_argv("172.31.254.11", Path("/k"), Path("/kh"), "true")
    assert "StrictHostKeyChecking=yes" in argv and "UserKnownHostsFile=/kh" in argv
    assert argv[-2:] == ["root@172.31.254.11", "true"]
    line = known_hosts_line(["vfleet-node1", "172.31.254.11"], "ssh-ed25519 AAAAkey root@vfleet-node1")
    assert line == "vfleet-node1,172.31.254.11 ssh-ed25519 AAAAkey"
    assert "172.31.254.11\tvfleet-node1" in etc_hosts("vfleet-node1", "172.31.254.11")


def test_mountinfo_parsing() -> None:
    text = (
        "36 25 0:32 / /var/lib/x\\040y/merged rw,relatime shared:1 - overlay overlay rw,lowerdir=/a\n"
        "37 25 0:33 / /run/systemd/nspawn rw - tmpfs tmpfs rw\n"
    )
    assert parse_mountinfo(text) == [("/var/lib/x y/merged", "overlay"), ("/run/systemd/nspawn", "tmpfs")]


def test_preflight_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert "not root" in preflight()


def test_cli_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    for cmd in (["up"], ["status"], ["down"]):
        result = CliRunner().invoke(cli.app, cmd)
        assert result.exit_code == 1
        assert "needs root" in result.output
