"""The end of the main job (`vllm-fleet up`): the nodes, and what a newcomer types next.

Beside the table of nodes: where the API key is (its file on the controller, never the key), one ready
`vllm-fleet smoke …` line per node that passes the key and the node's profile as the stack has it, and the
Prometheus address when the lab runs one. Lines to paste are printed whole (no wrapping, whatever the width).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from vllm_fleet.lab.config import lab_api_key_path
from vllm_fleet.project.tables import print_table, table

"""The lab key's file name in the cache (``vllm_fleet.lab.fleet.lab_api_key`` writes it)."""


def lab_api_key_file() -> Path:
    return lab_api_key_path()


def program() -> str:
    """How to run this vllm-fleet from any directory: the venv's script by its absolute path when there is one
    (``sudo`` does not keep the venv on PATH), else ``vllm-fleet``."""
    script = Path(sys.executable).parent / "vllm-fleet"
    return str(script) if script.is_file() else "vllm-fleet"


def needs_sudo() -> bool:
    """Whether this run was started with sudo (the key file in root's cache is then readable by root only)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0 and bool(os.environ.get("SUDO_USER"))


def smoke_line(endpoint: str, profile: str, api_key_file: Path | None, *, sudo: bool = False) -> str:
    """A `vllm-fleet smoke` command line for one node, every word shell-quoted."""
    words = [program(), "smoke", endpoint, "--profile", profile]
    if api_key_file is not None:
        words += ["--api-key-file", str(api_key_file)]
    return ("sudo " if sudo else "") + shlex.join(words)


def print_up_report(
    console: Console,
    nodes: Sequence[Mapping[str, Any]],
    stack_name: str,
    *,
    profile_refs: Mapping[str, str],
    api_key_file: Path | None,
    prometheus_url: str | None = None,
) -> None:
    """The nodes' table, then the API key's file, a smoke line per node and Prometheus (when given).

    ``profile_refs``: host -> the profile as the stack names it (a built-in name or a file path), which `smoke
    --profile` takes; a node without one falls back to its profile's name."""
    fleet = table("host", "endpoint", "hardware", "profile", "vLLM", "config", title=f"fleet: stack {stack_name}")
    for n in nodes:
        fleet.add_row(n["host"], n["endpoint"], n["hardware"], n["profile"], n["vllm_version"], n["config_hash"])
    print_table(console, fleet)

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    if api_key_file is not None:
        say(f"API key: {api_key_file} (on this controller, mode 0600; the nodes' bearer token for /v1)")
    if nodes:
        say("smoke each node:")
        sudo = needs_sudo()
        for n in nodes:
            ref = profile_refs.get(n["host"], n["profile"])
            say("  " + smoke_line(n["endpoint"], ref, api_key_file, sudo=sudo))
    if prometheus_url:
        say(f"Prometheus: {prometheus_url} (alerts: {prometheus_url.rstrip('/')}/alerts)")
