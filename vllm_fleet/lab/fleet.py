"""The main job on the local lab: lab site up, then `pulumi up` of the `lab` stack with the real engine."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from vllm_fleet.deploy import configure, ensure_engine, stack, up
from vllm_fleet.lab.hosts import Log
from vllm_fleet.lab.site import site_up
from vllm_fleet.lab.stack import lab_fleet
from vllm_fleet.paths import cache_dir


def lab_api_key() -> str:
    """The lab fleet's API key, generated once (0600, in the cache); Pulumi keeps it as a secret."""
    path = cache_dir() / "lab-api-key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("sk-lab-" + secrets.token_hex(16))
    return path.read_text().strip()


def lab_fleet_up(hosts: int | None, stack_name: str = "lab", *, log: Log = print) -> list[dict[str, Any]]:
    """Bring the lab up and run `pulumi up` on it; return the stack's node table."""
    site = site_up(hosts, log=log)
    engine = ensure_engine(log)
    st = stack(engine, stack_name)
    configure(
        st,
        lab_fleet(site.state, site.model_dir),
        Path(site.state.ssh_key).read_text(),
        lab_api_key(),
    )
    # vllm-fleet 0.1's lab stacks carried a knownHostsFile; the pinned host_key per host is the one policy now.
    if "vllm-fleet:knownHostsFile" in st.get_all_config():
        st.remove_config("vllm-fleet:knownHostsFile")
    outputs = up(st, on_output=lambda line: log(line.rstrip("\n")))
    nodes: list[dict[str, Any]] = outputs.get("nodes", [])
    return nodes
