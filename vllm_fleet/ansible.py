"""The one place that runs Ansible: playbooks through ansible-runner, with a throw-away private data dir."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_fleet.paths import project_root


@dataclass(frozen=True)
class InventoryHost:
    """How Ansible reaches one host."""

    name: str
    address: str
    user: str = "root"
    port: int = 22
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
    return project_root() / "playbooks" / name


def inventory(hosts: list[InventoryHost], group: str = "vllm_nodes") -> dict[str, Any]:
    return {
        "all": {
            "children": {
                group: {
                    "hosts": {
                        h.name: {
                            "ansible_host": h.address,
                            "ansible_user": h.user,
                            "ansible_port": h.port,
                            **h.hostvars,
                        }
                        for h in hosts
                    }
                }
            }
        }
    }


def ssh_args(known_hosts_file: str | None) -> str:
    """Host-key checking stays ON: against the lab's generated known_hosts, or the user's own."""
    if known_hosts_file:
        return f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={known_hosts_file}"
    return "-o StrictHostKeyChecking=yes"


def run_playbook(
    playbook: str,
    hosts: list[InventoryHost],
    extravars: dict[str, Any] | None = None,
    *,
    private_key: str | None = None,
    known_hosts_file: str | None = None,
    limit: str | None = None,
    check: bool = False,
    quiet: bool = False,
    event_handler: Callable[[dict[str, Any]], bool] | None = None,
) -> PlaybookResult:
    """Run ``playbooks/<playbook>`` against ``hosts``. The private key, if given, lives only in a 0700 temp dir."""
    import ansible_runner

    root = project_root()
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-ansible-") as tmp:
        private = Path(tmp)
        hostvars: dict[str, Any] = {"ansible_ssh_common_args": ssh_args(known_hosts_file)}
        if private_key is not None:
            key = private / "ssh_key"
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(private_key if private_key.endswith("\n") else private_key + "\n")
            hostvars["ansible_ssh_private_key_file"] = str(key)
        inv = inventory([InventoryHost(h.name, h.address, h.user, h.port, {**hostvars, **h.hostvars}) for h in hosts])
        cmdline = "--check --diff" if check else None
        runner = ansible_runner.run(
            private_data_dir=str(private),
            project_dir=str(root),
            playbook=str(playbook_path(playbook)),
            inventory=inv,
            # The controller-side tasks (profile rendering, the smoke hook) run with this very interpreter.
            extravars={"vllm_fleet_python": sys.executable, **(extravars or {})},
            limit=limit,
            cmdline=cmdline,
            quiet=quiet,
            envvars={
                # ansible-playbook of this venv, not whatever else is first on PATH.
                "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
                "ANSIBLE_ROLES_PATH": str(root / "roles"),
                "ANSIBLE_HOST_KEY_CHECKING": "True",
                "ANSIBLE_NOCOLOR": "1",
            },
            event_handler=event_handler,
            settings={"suppress_ansible_output": quiet},
        )
        stats: dict[str, dict[str, int]] = dict(runner.stats or {})
        return PlaybookResult(rc=int(runner.rc), status=str(runner.status), stats=stats)
