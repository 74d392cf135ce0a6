"""The one place that runs Ansible: playbooks through ansible-runner, in a private dir (vllm_fleet.deploy.private_dir),
and ``run_local_playbook`` for a play on the controller itself (the lab's Prometheus).

What reaches Ansible from a profile, a stack config or an inventory is DATA: the inventory and the extra vars
are YAML files in which every string (keys and values, at any depth) is tagged ``!unsafe``, so Ansible never
evaluates one as a template; ``TRUSTED_TEMPLATES`` are the only templates we hand it ourselves.

One SSH host-key policy: each host's pinned key in a known_hosts file of the run's own, strict checking, no
other known_hosts. The SSH private key lives in an ssh-agent; the API key in ansible-playbook's environment.

One set of Ansible settings (``ansible_settings``: this venv's ansible-playbook first on PATH, the project's
ansible.cfg and roles) for every run; ``playbook_env`` adds only ``CALLER_ENV`` and the locale from the caller's
environment, so a secret an operator's shell holds never reaches a playbook started here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vllm_fleet.deploy.private_dir import PrivateDir
from vllm_fleet.project.paths import project_root
from vllm_fleet.trust.values import host_key as check_host_key
from vllm_fleet.trust.values import posix_user, ssh_address

API_KEY_ENV = "VLLM_FLEET_API_KEY"
"""ansible-playbook's environment variable holding the API key (never a file, never a command line)."""
SECRET_ENV = ("VLLM_FLEET_SSH_KEY", API_KEY_ENV)
"""Secrets the caller's environment may hold: ansible-playbook gets them blanked (the API key set anew)."""


class _Trusted(str):
    """Written without ``!unsafe``: a template of our own, or a value checked to hold no template syntax."""


TRUSTED_TEMPLATES: dict[str, _Trusted] = {
    # The node's API key, read from ansible-playbook's environment when a task uses it.
    "vllm_service_api_key": _Trusted("{{ lookup('ansible.builtin.env', '" + API_KEY_ENV + "') }}"),
}
"""The only templates in the extra vars, all of them ours (the API key's only when there is one)."""

CALLER_ENV = ("HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR")
"""What ``playbook_env`` takes from the caller's environment, with the locale (``LC_*``) and PATH: nothing else."""

RESERVED_VARS = ("vllm_fleet_python",)
"""Extra vars run_playbook sets itself; with ``ansible_*`` (connection, interpreter, become…) refused from callers."""


@dataclass(frozen=True)
class InventoryHost:
    """How Ansible reaches one host."""

    name: str
    address: str
    user: str = "root"
    port: int = 22
    host_key: str | None = None
    """The host's pinned SSH public key, ``<type> <base64>``; required unless the playbook connects to no host."""
    hostvars: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PlaybookResult:
    rc: int
    status: str
    stats: dict[str, dict[str, int]]
    """ansible-runner's per-category counts: {"ok": {host: n}, "changed": {…}, "failures": {…}, …}."""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.status == "successful"

    def count(self, category: str, host: str | None = None) -> int:
        per_host = self.stats.get(category) or {}
        return per_host.get(host, 0) if host else sum(per_host.values())


def playbook_path(name: str) -> Path:
    """``playbooks/<name>``; an absolute path is taken as it is."""
    return project_root() / "playbooks" / name


class _DataDumper(yaml.SafeDumper):
    """YAML in which every string is ``!unsafe`` (Ansible's "never template this"), except ``_Trusted`` ones."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_unsafe(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    if not data:
        # ansible-core 2.19 reads `!unsafe ""` as null; an empty string holds no template anyway.
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style='"')
    return dumper.represent_scalar("!unsafe", data, style='"')


def _represent_trusted(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style='"')


_DataDumper.add_representer(str, _represent_unsafe)
_DataDumper.add_representer(_Trusted, _represent_trusted)
_DataDumper.add_representer(tuple, yaml.SafeDumper.represent_list)


def data_yaml(data: Any) -> str:
    """``data`` as YAML for Ansible: strings (keys and values, recursively) tagged ``!unsafe``, ``_Trusted`` not."""
    return yaml.dump(data, Dumper=_DataDumper, sort_keys=False, allow_unicode=True, width=1_000_000)


def known_hosts_line(host: InventoryHost) -> str:
    """``<address> <key>``, or ``[<address>]:<port> <key>`` off port 22."""
    assert host.host_key is not None
    where = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
    return f"{where} {host.host_key}"


def ssh_args(known_hosts_file: str | Path) -> str:
    """The one host-key policy: the run's pinned keys only, strict checking, no user or global known_hosts."""
    return (
        f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={shlex.quote(str(known_hosts_file))} "
        "-o GlobalKnownHostsFile=/dev/null"
    )


HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""An inventory host name (so it holds no template syntax, and is safe as a file name)."""


def check_hosts(hosts: Iterable[InventoryHost], connect: bool) -> None:
    """Names, addresses, users and pinned keys are well-formed (so they hold no template syntax either); every
    host has a key when the playbook connects. Messages name the host and the field, never a secret."""
    missing: list[str] = []
    for h in hosts:
        if not HOST_NAME.match(h.name):
            raise ValueError(f"host {h.name!r}: not an inventory host name (letters, digits, '.', '_', '-')")
        for what, value, check in (("address", h.address, ssh_address), ("user", h.user, posix_user)):
            try:
                check(value)
            except ValueError as err:
                raise ValueError(f"host {h.name}: {what}: {err}") from None
        if not 1 <= h.port <= 65535:
            raise ValueError(f"host {h.name}: port {h.port} is not a TCP port (1-65535)")
        if h.host_key is None:
            missing.append(h.name)
            continue
        try:
            check_host_key(h.host_key)
        except ValueError as err:
            raise ValueError(f"host {h.name}: host_key: {err}") from None
    if missing and connect:
        raise ValueError(
            f"no pinned SSH host key for {', '.join(missing)}: give each host its host_key "
            "(`ssh-keyscan -t ed25519 <address>`, the last two fields); host keys are never learned on first use"
        )


def check_extravars(extravars: Mapping[str, Any]) -> None:
    """Callers' extra vars (a fleet's role_vars among them) cannot set connection or interpreter variables."""
    bad = sorted(k for k in extravars if str(k).startswith("ansible_") or k in RESERVED_VARS)
    if bad:
        raise ValueError(
            f"extra variable(s) {', '.join(bad)} cannot be set here: connection, interpreter and controller "
            "settings are vllm-fleet's own (one SSH host-key policy; nothing from a fleet spec runs on the controller)"
        )


def inventory(hosts: list[InventoryHost], group: str = "vllm_nodes") -> Any:
    """The inventory as data, to dump with ``data_yaml``: names and connection fields as checked by
    ``check_hosts`` (plain strings, so ``ansible-inventory --list`` shows them as they are), hostvars ``!unsafe``."""
    return {
        _Trusted("all"): {
            _Trusted("children"): {
                _Trusted(group): {
                    _Trusted("hosts"): {
                        _Trusted(h.name): {
                            **h.hostvars,
                            _Trusted("ansible_host"): _Trusted(h.address),
                            _Trusted("ansible_user"): _Trusted(h.user),
                            _Trusted("ansible_port"): h.port,
                        }
                        for h in hosts
                    }
                }
            }
        }
    }


def ansible_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The project's Ansible settings, and PATH with this venv's ansible-playbook first: those of every run."""
    environ = os.environ if environ is None else environ
    root = project_root()
    return {
        # ansible-playbook of this venv, not whatever else is first on PATH.
        "PATH": f"{Path(sys.executable).parent}:{environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(root / "roles"),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_NOCOLOR": "1",
    }


def playbook_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of an ansible-playbook started here: ``CALLER_ENV`` and ``LC_*`` from ``environ``
    (default: this process's), then ``ansible_settings``. Nothing else is passed: not a Pulumi passphrase, a cloud
    token or an API key the operator's shell holds, nor an ``ANSIBLE_*`` setting of theirs."""
    environ = os.environ if environ is None else environ
    kept = {name: value for name, value in environ.items() if name in CALLER_ENV or name.startswith("LC_")}
    return {**kept, **ansible_settings(environ)}


def run_local_playbook(
    playbook: str, inventory_file: Path, *, timeout_s: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run ``playbooks/<playbook>`` with ansible-playbook itself, for hosts ``inventory_file`` reaches without SSH
    (``ansible_connection: local``), in ``playbook_env`` alone; stdout and stderr captured, the exit code returned."""
    ansible_playbook = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run(
        [str(ansible_playbook), "-i", str(inventory_file), str(playbook_path(playbook))],
        cwd=project_root(),
        env=playbook_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def run_playbook(
    playbook: str,
    hosts: list[InventoryHost],
    extravars: dict[str, Any] | None = None,
    *,
    private_key: str | None = None,
    api_key: str | None = None,
    connect: bool = True,
    limit: str | None = None,
    check: bool = False,
    quiet: bool = False,
    event_handler: Callable[[dict[str, Any]], bool] | None = None,
) -> PlaybookResult:
    """Run ``playbooks/<playbook>`` against ``hosts``, in a private dir removed even if this process is killed.

    ``private_key``: held by an ssh-agent of the run (None: the controller's own keys / agent). ``api_key``: in
    ansible-playbook's environment, read through ``vllm_service_api_key``'s lookup. ``connect=False``: the
    playbook contacts no host (validate.yml), so hosts may lack a pinned key. Raises ``ValueError`` for a host
    without a pinned key (connect=True), a malformed address or key, or a reserved extra variable."""
    import ansible_runner

    check_hosts(hosts, connect)
    check_extravars(extravars or {})
    root = project_root()
    with PrivateDir() as private:
        known_hosts = private.file("known_hosts", "".join(known_hosts_line(h) + "\n" for h in hosts if h.host_key))
        inv = private.file("inventory.yml", data_yaml(inventory(hosts)))
        ours: dict[str, Any] = {
            # The controller-side tasks (profile rendering, the smoke hook) run with this very interpreter.
            "vllm_fleet_python": sys.executable,
            # An extra var outranks every other variable: no hostvar, group_vars file or play loosens it.
            "ansible_ssh_common_args": ssh_args(known_hosts),
        }
        if api_key:
            ours["vllm_service_api_key"] = TRUSTED_TEMPLATES["vllm_service_api_key"]
        extra = private.file("extravars.yml", data_yaml({**(extravars or {}), **ours}))
        (private.path / "tmp").mkdir(mode=0o700)
        env = {
            **ansible_settings(),
            # The controller's scratch files (a `copy: content=` is staged there) and ssh's control sockets.
            "ANSIBLE_LOCAL_TEMP": str(private.path / "tmp"),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(private.path / "cp"),
            **{name: "" for name in SECRET_ENV},
            **private.marker,
        }
        if private_key is not None:
            env.update(private.start_agent(private_key))
        if api_key:
            env[API_KEY_ENV] = api_key
        cmdline = f"-e @{shlex.quote(str(extra))}" + (" --check --diff" if check else "")
        runner = ansible_runner.run(
            private_data_dir=str(private.path),
            project_dir=str(root),
            playbook=str(playbook_path(playbook)),
            inventory=str(inv),
            limit=limit,
            cmdline=cmdline,
            quiet=quiet,
            # Kept in memory: ansible-runner would otherwise write them to env/ (the environment with the key).
            envvars=env,
            suppress_env_files=True,
            event_handler=event_handler,
            settings={"suppress_ansible_output": quiet},
        )
        stats: dict[str, dict[str, int]] = dict(runner.stats or {})
        # No rc at all: ansible-playbook was killed (a signal, not an exit); that is a failed run, not a crash here.
        rc = int(runner.rc) if runner.rc is not None else -1
        return PlaybookResult(rc=rc, status=str(runner.status), stats=stats)
