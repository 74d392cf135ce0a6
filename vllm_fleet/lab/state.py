"""The lab's state file (``<state dir>/state.json``): what ``up`` made, for ``status`` and ``down``."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from vllm_fleet.lab import config

STATE_FILE = "state.json"
STATE_VERSION = 1


class HostState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    index: int
    ip: str
    netns: str
    veth: str
    dir: Path
    cgroup: str = Field(description="path of the host's cgroup, relative to each hierarchy root")
    machine_id: str
    supervisor_pid: int | None = None
    started_at: float | None = None

    @property
    def merged(self) -> Path:
        return self.dir / "merged"

    @property
    def upper(self) -> Path:
        return self.dir / "upper"

    @property
    def work(self) -> Path:
        return self.dir / "work"

    @property
    def host_key_pub(self) -> Path:
        return self.dir / "ssh_host_ed25519_key.pub"

    @property
    def host_key(self) -> str:
        """The host's public key as a fleet spec pins it: ``ssh-ed25519 <base64>`` (no comment)."""
        return " ".join(self.host_key_pub.read_text().split()[:2])

    @property
    def log(self) -> Path:
        return self.dir / "console.log"


class LabState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = STATE_VERSION
    state_dir: Path
    rootfs: Path
    net: str = Field(default_factory=lambda: config.lab_net().key, description="the LabNet this lab was made with")
    subnet: str = Field(default_factory=lambda: config.lab_net().subnet)
    bridge: str = Field(default_factory=lambda: config.lab_net().bridge)
    bridge_ip: str = Field(default_factory=lambda: config.lab_net().bridge_ip)
    mirror_url: str = Field(default_factory=config.mirror_url)
    ssh_key: Path
    known_hosts: Path
    cgroup_roots: list[Path]
    nspawn_tmpfs: Path | None = Field(
        default=None, description="the tmpfs the lab mounted on /run/systemd/nspawn, to unmount on down"
    )
    inventory: Path | None = None
    hosts: list[HostState] = Field(default_factory=list)
    last_up_started: list[str] = Field(
        default_factory=list, description="hosts the last `lab up` (re)started; empty when it was a no-op"
    )

    def host(self, name: str) -> HostState:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def load_state(state_dir: Path) -> LabState | None:
    path = state_path(state_dir)
    if not path.is_file():
        return None
    return LabState.model_validate(json.loads(path.read_text()))


def save_state(state: LabState) -> Path:
    path = state_path(state.state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(state.model_dump_json(indent=2) + "\n")
    tmp.replace(path)
    return path
