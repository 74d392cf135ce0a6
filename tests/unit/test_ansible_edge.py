"""vllm_fleet.deploy.ansible at its edges: data never templated, one pinned host-key policy, secrets never on disk.

Real ansible-playbook runs on localhost (throw-away playbooks in tmp_path, through run_playbook), a real
ssh-agent, and a converge SIGKILLed in the middle of its SSH connect.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_fleet.deploy.ansible import InventoryHost, data_yaml, known_hosts_line, run_playbook, ssh_args
from vllm_fleet.deploy.private_dir import PREFIX, PrivateDir, private_base
from vllm_fleet.project.paths import project_root

ROOT = project_root()
VENV_BIN = Path(sys.executable).parent
EVIL = "{{ lookup('pipe','id -un') }}-X"
needs_ssh_tools = pytest.mark.skipif(
    not (shutil.which("ssh-agent") and shutil.which("ssh-add") and shutil.which("ssh-keygen")),
    reason="needs OpenSSH's ssh-agent, ssh-add and ssh-keygen",
)


def _keypair(tmp_path: Path, name: str) -> tuple[str, str]:
    """(private key text, public ``<type> <base64>``), the files removed again."""
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True)
    private, public = path.read_text(), " ".join(path.with_suffix(".pub").read_text().split()[:2])
    path.unlink()
    path.with_suffix(".pub").unlink()
    return private, public


@pytest.fixture(scope="module")
def host_key(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _keypair(tmp_path_factory.mktemp("hostkey"), "hk")[1]


def _playbook(tmp_path: Path, tasks: list[dict[str, Any]], hosts: str = "localhost") -> str:
    path = tmp_path / "probe.yml"
    path.write_text(yaml.safe_dump([{"hosts": hosts, "gather_facts": False, "tasks": tasks}], sort_keys=False))
    return str(path)


def _write(dest: Path, content: str) -> dict[str, Any]:
    return {"ansible.builtin.copy": {"content": content, "dest": str(dest), "mode": "0600"}}


def _events() -> tuple[list[dict[str, Any]], Any]:
    seen: list[dict[str, Any]] = []

    def handler(event: dict[str, Any]) -> bool:
        seen.append(event)
        return True

    return seen, handler


def _failures(events: list[dict[str, Any]]) -> list[Any]:
    failed = ("runner_on_failed", "runner_on_unreachable")
    return [e["event_data"].get("res") for e in events if e.get("event") in failed]


# -- (a) data, never templates -----------------------------------------------------------------------------------
def test_data_yaml_tags_every_string_keys_and_values() -> None:
    text = data_yaml({"a": {"{{ k }}": [EVIL, 3, None, True, ("t",)]}, "n": 1.5})
    assert text.count("!unsafe") == 5  # a, {{ k }}, EVIL, t, n: every string, key or value, and nothing else
    assert '!unsafe "{{ k }}":' in text and "- 3\n" in text and "- null" in text and "- true" in text


def test_template_in_extra_vars_reaches_the_playbook_literally(tmp_path: Path) -> None:
    """The issue's case: a per-host override `"{{ lookup('pipe','id -un') }}-X"` must not run on the controller."""
    out = tmp_path / "out.txt"
    extravars = {
        "served_model_name": EVIL,
        "nested": {"{{ 7 * 7 }}": [EVIL, 3, None], "deep": {"x": "{% raw %}{{ 1 }}", "y": 'a\n"b"\\c é\t#{{'}},
        "empty": "",  # stays an empty string (ansible-core 2.19 reads `!unsafe ""` as null)
    }
    pb = _playbook(tmp_path, [_write(out, "{{ served_model_name }}\n{{ nested | to_json }}\n[{{ empty }}]\n")])
    events, handler = _events()
    result = run_playbook(pb, [], extravars, connect=False, quiet=True, event_handler=handler)
    assert result.ok, _failures(events)
    name, nested, empty = out.read_text().splitlines()
    assert name == EVIL
    assert json.loads(nested) == extravars["nested"]
    assert empty == "[]"
    assert "root-X" not in out.read_text()


def test_role_default_dict_through_template_lookup_stays_literal(tmp_path: Path) -> None:
    """vllm_service's path: a role default that is a template of the (data) extra var, rendered with the template
    lookup against the project's one config template, as roles/vllm_service/tasks/main.yml does."""
    role = tmp_path / "roles" / "probe"
    (role / "defaults").mkdir(parents=True)
    (role / "tasks").mkdir()
    (role / "defaults" / "main.yml").write_text(
        'vllm_service_config: "{{ vllm_config | default({}) }}"\n'
        "vllm_service_profile_name: \"{{ vllm_profile_name | default('') }}\"\n"
        "vllm_service_vllm_version: \"{{ vllm_version | default('') }}\"\n"
    )
    out = tmp_path / "vllm-config.yaml"
    task = {
        "name": "Render the decode profile",
        "ansible.builtin.copy": {
            "content": "{{ lookup('ansible.builtin.template', '"
            + str(ROOT / "templates" / "vllm-config.yaml.j2")
            + "', template_vars=_vars) }}",
            "dest": str(out),
            "mode": "0600",
        },
        "vars": {
            "_vars": {
                "vllm_config": "{{ vllm_service_config }}",
                "vllm_profile_name": "{{ vllm_service_profile_name }}",
                "vllm_version": "{{ vllm_service_vllm_version }}",
            }
        },
    }
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump([task], sort_keys=False))
    pb = tmp_path / "probe.yml"
    pb.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "roles": ["probe"]}]))
    config = {"served-model-name": EVIL, "max-num-seqs": 8, "override-generation-config": {"x": "{{ 6 * 7 }}"}}
    events, handler = _events()
    result = run_playbook(
        str(pb),
        [],
        {"vllm_config": config, "vllm_profile_name": "{{ 6 * 7 }}", "vllm_version": "0.1"},
        connect=False,
        quiet=True,
        event_handler=handler,
    )
    assert result.ok, _failures(events)
    rendered = out.read_text()
    body = yaml.safe_load(rendered)
    assert body["served-model-name"] == EVIL
    assert body["override-generation-config"] == {"x": "{{ 6 * 7 }}"}
    assert body["max-num-seqs"] == 8
    assert "decode profile {{ 6 * 7 }}," in rendered and "root-X" not in rendered and " 42" not in rendered


def test_api_key_comes_from_the_environment_not_the_extravars_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one trusted template: the key is read from ansible-playbook's environment (literally, even with braces);
    the extravars file has the lookup, never the key; a secret of the caller's environment is blanked."""
    monkeypatch.setenv("VLLM_FLEET_SSH_KEY", "caller-ssh-key-" + secrets.token_hex(8))
    monkeypatch.setenv("VLLM_FLEET_API_KEY", "caller-api-key-" + secrets.token_hex(8))
    api_key = "sk-{{ 7 * 7 }}-" + secrets.token_hex(16)
    out, files = tmp_path / "out.txt", tmp_path / "files.txt"
    private = "{{ lookup('ansible.builtin.env', 'VLLM_FLEET_PRIVATE_DIR') }}"
    pb = _playbook(
        tmp_path,
        [
            _write(
                out,
                "{{ vllm_service_api_key }}\n{{ lookup('ansible.builtin.env', 'VLLM_FLEET_SSH_KEY') }}|\n"
                # A `copy: content=` (the role's API key file) is staged in the local temp dir: the private dir.
                "{{ lookup('ansible.builtin.config', 'DEFAULT_LOCAL_TMP')"
                ".startswith(lookup('ansible.builtin.env', 'VLLM_FLEET_PRIVATE_DIR') ~ '/') }}\n",
            ),
            {
                "ansible.builtin.command": {"argv": ["cat", f"{private}/extravars.yml", f"{private}/inventory.yml"]},
                "register": "c",
            },
            _write(files, "{{ c.stdout }}\n"),
        ],
    )
    events, handler = _events()
    result = run_playbook(pb, [], {"x": 1}, api_key=api_key, connect=False, quiet=True, event_handler=handler)
    assert result.ok, _failures(events)
    assert out.read_text().splitlines() == [api_key, "|", "True"]
    text = files.read_text()
    assert api_key not in text and "lookup('ansible.builtin.env', 'VLLM_FLEET_API_KEY')" in text
    assert '"vllm_service_api_key": "{{' in text  # untagged: the only template we hand Ansible
    assert not any(api_key in json.dumps(e) for e in events)


# -- (b) one host-key policy ---------------------------------------------------------------------------------------
def test_known_hosts_and_strict_policy_for_every_host(tmp_path: Path, host_key: str) -> None:
    out = tmp_path / "out.txt"
    hosts = [
        InventoryHost("n1", "192.0.2.1", port=2222, host_key=host_key),
        InventoryHost("n2", "10.0.0.2", host_key=host_key, hostvars={"ansible_ssh_common_args": "-o X=1"}),
    ]
    pb = _playbook(
        tmp_path,
        [
            _write(
                out,
                "{{ hostvars['n1'].ansible_ssh_common_args }}\n{{ hostvars['n2'].ansible_ssh_common_args }}\n"
                "{{ lookup('ansible.builtin.file', lookup('ansible.builtin.env', 'VLLM_FLEET_PRIVATE_DIR')"
                " ~ '/known_hosts') }}\n",
            )
        ],
    )
    events, handler = _events()
    assert run_playbook(pb, hosts, quiet=True, event_handler=handler).ok, _failures(events)
    n1_args, n2_args, *known = out.read_text().splitlines()
    assert n1_args == n2_args  # an extra var: no hostvar loosens it
    assert n1_args.startswith("-o StrictHostKeyChecking=yes -o UserKnownHostsFile=/")
    assert n1_args.endswith("/known_hosts -o GlobalKnownHostsFile=/dev/null")
    assert known == [f"[192.0.2.1]:2222 {host_key}", f"10.0.0.2 {host_key}"]
    assert known_hosts_line(hosts[1]) == f"10.0.0.2 {host_key}"
    assert "IdentitiesOnly" not in ssh_args("/k")


def test_a_host_without_a_pinned_key_is_refused_unless_nothing_connects(tmp_path: Path, host_key: str) -> None:
    hosts = [InventoryHost("n1", "192.0.2.1", host_key=host_key), InventoryHost("gpu-b", "192.0.2.2")]
    with pytest.raises(ValueError, match="no pinned SSH host key for gpu-b"):
        run_playbook("site.yml", hosts)
    pb = _playbook(tmp_path, [{"ansible.builtin.debug": {"msg": "ok"}}])
    assert run_playbook(pb, hosts, connect=False, quiet=True).ok


@pytest.mark.parametrize(
    ("host", "message"),
    [
        (InventoryHost("n1", "10.0.0.1 -oProxyCommand=x", host_key="ssh-ed25519 AAAA"), "host n1: address"),
        (InventoryHost("n1", "10.0.0.1", user="{{ x }}", host_key="ssh-ed25519 AAAA"), "host n1: user"),
        (InventoryHost("n1", "10.0.0.1", host_key="ssh-ed25519 AAAA\n10.0.0.9 ssh-rsa AAAA"), "host n1: host_key"),
        (InventoryHost("{{ x }}", "10.0.0.1"), "not an inventory host name"),
    ],
)
def test_malformed_hosts_are_refused(host: InventoryHost, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run_playbook("site.yml", [host], connect=False)


@pytest.mark.parametrize("var", ["ansible_connection", "ansible_ssh_common_args", "ansible_python_interpreter"])
def test_connection_and_controller_variables_are_refused_from_extra_vars(var: str) -> None:
    with pytest.raises(ValueError, match=var):
        run_playbook("site.yml", [], {var: "local"}, connect=False)
    with pytest.raises(ValueError, match="vllm_fleet_python"):
        run_playbook("site.yml", [], {"vllm_fleet_python": "/bin/sh"}, connect=False)


# -- (c) the private dir and the agent -----------------------------------------------------------------------------
def test_private_dir_is_0700_on_tmpfs_and_removed_after_an_exception() -> None:
    with pytest.raises(RuntimeError), PrivateDir() as pd:
        path = pd.path
        assert path.stat().st_mode & 0o777 == 0o700
        assert path.parent == private_base() and path.name.startswith(f"{PREFIX}{os.getpid()}-")
        pd.file("f", "x")
        raise RuntimeError
    assert not path.exists()


@needs_ssh_tools
def test_the_agent_holds_the_key_and_no_file_does(tmp_path: Path) -> None:
    private, _ = _keypair(tmp_path, "id")
    body = private.splitlines()[1]
    with PrivateDir() as pd:
        env = pd.start_agent(private)
        listed = subprocess.run(["ssh-add", "-l"], env={**os.environ, **env}, capture_output=True, text=True)
        assert listed.returncode == 0 and "(ED25519)" in listed.stdout
        assert not [p for p in pd.path.rglob("*") if p.is_file() and body.encode() in p.read_bytes()]
        agent = [p for p in _procs() if f"{pd.path}/" in p[1]]
        assert len(agent) == 1 and agent[0][1].startswith("ssh-agent ")
        path = pd.path
    assert not path.exists()
    _wait(lambda: not [p for p in _procs() if f"{path}/" in p[1]], "the agent outlived the private dir")


@needs_ssh_tools
def test_a_bad_key_fails_without_repeating_it() -> None:
    secret = (
        # A key-shaped text that is no key (the marker split so no scanner takes the file for a real key).
        "-----BEGIN OPENSSH "
        + "PRIVATE KEY-----\nnot-a-key-"
        + secrets.token_hex(8)
        + "\n-----END OPENSSH "
        + "PRIVATE KEY-----"
    )
    with PrivateDir() as pd, pytest.raises(ValueError, match="could not be loaded into ssh-agent") as err:
        pd.start_agent(secret)
    assert "not-a-key-" not in str(err.value)


def _procs() -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                found.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
    return found


def _wait(ok: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.05)


# -- (d) a converge SIGKILLed mid-run leaves no secret behind -------------------------------------------------------
SCAN_ROOTS = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path.home() / ".ansible", ROOT]
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__"}


def _files_changed_since(since: float, max_bytes: int = 8 << 20) -> Iterator[Path]:
    """Regular files under SCAN_ROOTS whose inode changed since ``since`` (ctime: no write escapes it), on each
    root's own filesystem: a mount below one (a /proc a rootfs build left mounted under a cache in /tmp) is not
    walked -- reading its /proc/kmsg blocks."""
    roots = {str(Path(tempfile.gettempdir()).resolve()), *(str(r) for r in SCAN_ROOTS)}
    for root in sorted(roots):
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not Path(dirpath, d).is_mount()]
            for name in filenames:
                path = Path(dirpath, name)
                try:
                    st = path.lstat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_ctime >= since and st.st_size <= max_bytes:
                    yield path


def _node(port: int, host_key: str) -> str:
    from vllm_fleet.fleet.plan import ConvergeInput
    from vllm_fleet.fleet.spec import plan_fleet

    host = {"name": "n1", "address": "127.0.0.1", "ssh_port": port, "host_key": host_key}
    n = plan_fleet({"hosts": [{**host, "hardware": "cpu-lab", "profile": "cpu-lab"}]}).nodes[0]
    # As the lab does: the driver roles' checks pass on a CPU stand-in.
    return ConvergeInput.of(n, {"nvidia_driver_gpu_architecture": "hopper"}).to_json()


@needs_ssh_tools
@pytest.mark.parametrize("kill", ["process-group", "process"])
def test_a_converge_killed_mid_run_leaves_no_secret_on_disk(tmp_path: Path, host_key: str, kill: str) -> None:
    """SIGKILL while ansible-playbook's ssh is connecting (to a port that accepts and never answers): within
    seconds the private dir is gone, no process of the run is left, and no file holds the SSH key or API key."""
    started = time.time() - 1
    private_key, _ = _keypair(tmp_path, "controller")
    api_key = "sk-" + secrets.token_hex(24)
    needles = {"api key": api_key.encode()}
    body = [line for line in private_key.splitlines() if line and not line.startswith("-----")]
    needles.update({f"ssh key line {i}": line.encode() for i, line in enumerate(body) if len(line) >= 16})

    silent = socket.socket()  # completes the TCP handshake (backlog), never sends an SSH banner
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    env = {
        **os.environ,
        "VLLM_FLEET_NODE": _node(silent.getsockname()[1], host_key),
        "VLLM_FLEET_SSH_KEY": private_key,
        "VLLM_FLEET_API_KEY": api_key,
    }
    log = tmp_path / "converge.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_fleet.converge", "apply"],
            env=env,
            cwd=ROOT,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        private: list[Path] = []
        ssh: list[tuple[int, str]] = []
        deadline = time.monotonic() + 120
        while not ssh:
            assert proc.poll() is None, f"converge ended before its ssh connect: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no ssh connect within 120 s: {log.read_text()[-3000:]}"
            private = list(private_base().glob(f"{PREFIX}{proc.pid}-*"))
            if private:
                ssh = [p for p in _procs() if f"{private[0]}/" in p[1] and p[1].startswith("ssh ")]
            time.sleep(0.05)
        assert f"UserKnownHostsFile={private[0]}/known_hosts" in ssh[0][1]
        assert any("ansible-playbook" in c for _, c in _procs() if f"{private[0]}/" in c)
    finally:
        if kill == "process-group":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()
        silent.close()
    killed = time.monotonic()
    _wait(lambda: not private[0].exists(), "the private dir outlived the killed converge")
    _wait(lambda: not [p for p in _procs() if f"{private[0]}/" in p[1]], "a process of the run outlived it")
    assert time.monotonic() - killed < 10
    hits = []
    for path in _files_changed_since(started):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        hits += [f"{path}: {what}" for what, needle in needles.items() if needle in data]
    assert not hits


# -- the smoke hook gets the API key on stdin ----------------------------------------------------------------------
@pytest.mark.parametrize("exit_code", [0, 1])
def test_smoke_hook_passes_the_key_on_stdin_never_a_file_or_argv(tmp_path: Path, exit_code: int) -> None:
    api_key = "sk-" + secrets.token_hex(24)
    fake = tmp_path / "fake-python"
    fake.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" > {tmp_path}/argv\n"
        f"cat > {tmp_path}/stdin\n"
        "echo '| health | pass | 200 |'\n"
        "echo '| metrics | fail | boom |'\n"
        f"exit {exit_code}\n"
    )
    fake.chmod(0o700)
    pb = tmp_path / "smoke.yml"
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {
            "ansible_host": "127.0.0.1",
            "ansible_python_interpreter": sys.executable,
            "vllm_service_config": {"port": 8123},
            "vllm_fleet_profile_data": {"name": "p"},
            "vllm_fleet_python": str(fake),
            "vllm_service_api_key": "{{ lookup('ansible.builtin.env', 'SMOKE_TEST_KEY') }}",
        },
        "tasks": [{"ansible.builtin.include_tasks": str(ROOT / "playbooks" / "tasks" / "smoke.yml")}],
    }
    pb.write_text(yaml.safe_dump([play], sort_keys=False))
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "SMOKE_TEST_KEY": api_key,
    }
    run = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-vvv", "-i", "localhost,", "-c", "local", str(pb)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = run.stdout + run.stderr
    assert (run.returncode == 0) == (exit_code == 0), output[-4000:]
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:4] == ["-m", "vllm_fleet.cli", "smoke", "http://127.0.0.1:8123"]
    assert argv[-2:] == ["--api-key-file", "/dev/stdin"]
    assert (tmp_path / "stdin").read_text() == api_key
    assert api_key not in output
    assert "AnsiballZ_command.py" not in output  # pipelined: the module and its arguments never hit ~/.ansible/tmp
    if exit_code:
        assert "vllm-fleet smoke exited 1" in output and "boom" in output


# -- the whole path over real SSH (optional: needs an sshd) --------------------------------------------------------
def _sshd() -> str | None:
    """An sshd to run (VLLM_FLEET_TEST_SSHD may name one, or a wrapper that sets up what it needs)."""
    given = os.environ.get("VLLM_FLEET_TEST_SSHD")
    if given:
        return given
    found = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    if found and os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("sshd")
        except KeyError:
            return None
        if not Path("/run/sshd").is_dir():
            return None
    return found


@needs_ssh_tools
@pytest.mark.skipif(_sshd() is None, reason="no usable sshd (set VLLM_FLEET_TEST_SSHD)")
def test_over_ssh_the_pinned_key_and_the_agent_are_all_it_takes(tmp_path: Path) -> None:
    sshd = _sshd()
    assert sshd
    client_key, client_pub = _keypair(tmp_path, "client")
    hk = tmp_path / "ssh_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hk)], check=True)
    pinned = " ".join(hk.with_suffix(".pub").read_text().split()[:2])
    (tmp_path / "authorized_keys").write_text(client_pub + "\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nAuthorizedKeysFile {tmp_path}/authorized_keys\n"
        "StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPidFile none\n"
        "PermitRootLogin prohibit-password\n"
    )
    server = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    try:
        _wait(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, "sshd did not listen")
        user = os.environ.get("USER") or "root"
        hv = {"ansible_python_interpreter": sys.executable}
        out = tmp_path / "out.txt"
        pb = _playbook(
            tmp_path,
            [
                {"ansible.builtin.command": {"argv": ["echo", "{{ some_var }}"]}, "register": "e"},
                {**_write(out, "{{ e.stdout }}\n"), "delegate_to": "localhost"},
            ],
            hosts="vllm_nodes",
        )
        good = [InventoryHost("n1", "127.0.0.1", user, port, host_key=pinned, hostvars=hv)]
        events, handler = _events()
        result = run_playbook(pb, good, {"some_var": EVIL}, private_key=client_key, quiet=True, event_handler=handler)
        assert result.ok, _failures(events)
        assert out.read_text() == EVIL + "\n"
        # Another key pinned: strict checking refuses the host (no fallback to any other known_hosts).
        wrong = [InventoryHost("n1", "127.0.0.1", user, port, host_key=_keypair(tmp_path, "other")[1], hostvars=hv)]
        events, handler = _events()
        result = run_playbook(pb, wrong, {"some_var": "x"}, private_key=client_key, quiet=True, event_handler=handler)
        assert not result.ok and result.count("dark") == 1
        assert any("IDENTIFICATION HAS CHANGED" in str(r) or "verification failed" in str(r) for r in _failures(events))
    finally:
        server.terminate()
        server.wait(10)
