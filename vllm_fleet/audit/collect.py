"""Collect what each host really runs: one read-only script over SSH (pinned host key) and the live endpoints.

Nothing on a host is changed: the script only reads (``systemctl show``, ``/proc``, files, package database,
apt preferences, ``systemd-analyze security``). Hosts are collected in parallel; a host that cannot be reached
is recorded with its error and the others are still collected.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_fleet.audit.evidence import Desired, HostEvidence
from vllm_fleet.deploy.ansible import InventoryHost, check_hosts, known_hosts_line, ssh_args
from vllm_fleet.deploy.private_dir import PrivateDir
from vllm_fleet.project.paths import project_root
from vllm_fleet.trust.node_reads import DEFAULT_BOUNDS, NodeReadError, ReadBounds, get, run_bounded, run_sync
from vllm_fleet.trust.node_reads import client as node_client

MARK = "@@vllm-fleet-audit "
ENDPOINTS = ("/version", "/v1/models", "/metrics")
WORKERS = 32
"""Hosts collected at once."""

# Read-only. Each section starts with MARK<name>; files are base64 so their bytes are kept exactly.
SCRIPT = r"""set -u
unit=$1 config=$2 lkg=$3 venv=$4 journal=${5:-} model=${6:-} cordon=${7:-}
sec() { printf '\n@@vllm-fleet-audit %s\n' "$1"; }
sec now; date +%s.%N
sec systemctl; systemctl show "$unit" -p MainPID -p ActiveState -p SubState -p NRestarts -p LoadState \
  -p FragmentPath -p DropInPaths -p NeedDaemonReload -p ExecMainStartTimestamp --timestamp=us+utc 2>&1
pid=$(systemctl show "$unit" -p MainPID --value 2>/dev/null || echo 0)
sec cmdline; [ "${pid:-0}" != 0 ] && tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null
sec config; base64 -w0 "$config" 2>/dev/null
sec config_mtime; stat -c %.9Y "$config" 2>/dev/null
frag=$(systemctl show "$unit" -p FragmentPath --value 2>/dev/null)
sec unit; [ -n "$frag" ] && base64 -w0 "$frag" 2>/dev/null
sec unit_mtime; [ -n "$frag" ] && stat -c %.9Y "$frag" 2>/dev/null
sec unit_lkg; base64 -w0 "$lkg" 2>/dev/null
sec dropins; for d in $(systemctl show "$unit" -p DropInPaths --value 2>/dev/null); do
  printf '%s\n' "$d"; base64 -w0 "$d" 2>/dev/null; echo; done
sec vllm_installed; for m in "$venv"/lib/python3*/site-packages/vllm*.dist-info/METADATA; do
  [ -f "$m" ] && sed -n '1,12{s/^Name: //p;s/^Version: //p}' "$m" | paste -sd' '; done
sec driver; nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -1
sec cuda; for n in /usr/local/cuda/bin/nvcc nvcc; do
  command -v "$n" >/dev/null 2>&1 && { "$n" --version 2>&1 | tail -2; break; }; done
sec holds; apt-mark showhold 2>/dev/null
sec packages; dpkg-query -W -f '${Package} ${Version}\n' 'nvidia-*' 'cuda-toolkit-*' 'libnvidia-*' 2>/dev/null
sec installed; dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\n' 'nvidia-*' 'cuda-toolkit-*' \
  'libnvidia-*' 2>/dev/null | awk '$1 ~ /^.i/ {print $2, $3}'
sec pins; for f in /etc/apt/preferences /etc/apt/preferences.d/*; do
  [ -f "$f" ] && { printf '%s\n' "$f"; base64 -w0 "$f"; echo; }; done
sec journal; [ -n "$journal" ] && cat "$journal" 2>/dev/null
sec cordon; [ -n "$cordon" ] && [ -e "$cordon" ] && { printf 'cordoned\n'; head -c 1024 "$cordon" 2>&1; }
sec security; systemd-analyze security "$unit" --no-pager 2>&1 | tail -1
sec model_manifest; [ -n "$model" ] && base64 -w0 "$model/.vllm-fleet-manifest.json" 2>/dev/null
sec model_files; [ -n "$model" ] && [ -d "$model" ] && sh -c "$model_files" model-files "$model" 2>/dev/null
"""
MODEL_FILES = project_root() / "roles" / "vllm" / "files" / "model-files.sh"
"""The listing of a model's files: the script the vllm role runs at staging (one script, one format)."""


@functools.cache
def script() -> str:
    """The read-only script sent to each host: SCRIPT, with model-files.sh as ``$model_files`` (read once)."""
    return f"model_files={shlex.quote(MODEL_FILES.read_text())}\n{SCRIPT}"


@dataclass(frozen=True)
class Target:
    """How to reach one host: its pinned key, and the node's API key for /v1/models (None: an open node)."""

    desired: Desired
    ssh_user: str = "root"
    ssh_port: int = 22
    host_key: str | None = None


def parse_sections(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith(MARK):
            if name is not None:
                out[name] = "\n".join(lines).strip("\n") + "\n"
            name, lines = line[len(MARK) :].strip(), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        out[name] = "\n".join(lines).strip("\n") + "\n"
    return out


def _ssh_argv(target: Target, known_hosts: Path) -> list[str]:
    d = target.desired
    args = [d.unit, d.config_path, d.unit_lkg_path, d.venv, d.journal_path, d.model_dir or "", d.cordon_path]
    return [
        "ssh",
        *shlex.split(ssh_args(known_hosts)),
        "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", str(target.ssh_port),
        "--", f"{target.ssh_user}@{d.address}",
        "sh -s -- " + " ".join(shlex.quote(a) for a in args),
    ]  # fmt: skip


async def _collect_remote(target: Target, env: dict[str, str], known_hosts: Path, bounds: ReadBounds) -> dict[str, str]:
    d = target.desired
    where = f"ssh {target.ssh_user}@{d.address}:{target.ssh_port}"
    proc = await run_bounded(
        _ssh_argv(target, known_hosts),
        stdin=script().encode(),
        env=env,
        deadline_s=bounds.ssh_s,
        max_bytes=bounds.ssh_bytes,
        what=where,
    )
    # Bytes, not text: a node printing bytes that are not UTF-8 is kept as it printed them (surrogateescape).
    stdout = proc.stdout.decode("utf-8", "surrogateescape")
    if proc.returncode == 255 or MARK not in stdout:
        stderr = proc.stderr.decode("utf-8", "backslashreplace")
        detail = " ".join((stderr or "no output").split())[-300:]
        raise ConnectionError(f"{where}: {detail}")
    return parse_sections(stdout)


async def _collect_http(desired: Desired, api_key: str | None, bounds: ReadBounds) -> dict[str, dict[str, Any]]:
    """Each endpoint's status and body, or its error; NodeReadError when the node broke a bound (size, deadline)."""
    out: dict[str, dict[str, Any]] = {}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with node_client(f"http://{desired.address}:{desired.port}", headers, bounds) as http:

        async def one(endpoint: str) -> dict[str, Any]:
            try:
                answer = await get(http, endpoint, bounds)
            except NodeReadError as err:
                if err.bound is not None:
                    raise
                return {"error": str(err)}
            return {"status": answer.status, "body": answer.text}

        for endpoint, result in zip(ENDPOINTS, await asyncio.gather(*(one(e) for e in ENDPOINTS)), strict=True):
            out[endpoint] = result
    return out


async def _collect_host(
    target: Target, env: dict[str, str], known_hosts: Path, api_key: str | None, bounds: ReadBounds
) -> HostEvidence:
    """One host: the SSH script and the live endpoints at once, so a host costs its slower half. A host that breaks
    a bound (a dripping or flooding node) is that host's error, naming the bound; nothing else of it is judged."""
    ev = HostEvidence(target.desired.host, target.desired.address, started_at=time.time())
    remote, http = await asyncio.gather(
        _collect_remote(target, env, known_hosts, bounds),
        _collect_http(target.desired, api_key, bounds),
        return_exceptions=True,
    )
    if isinstance(remote, BaseException):
        if not isinstance(remote, ConnectionError | NodeReadError | OSError):
            raise remote
        ev.error = str(remote)
    else:
        ev.remote = remote
    if isinstance(http, NodeReadError):  # a node that broke a bound: named beside any SSH error
        broke = f"{http} (http://{target.desired.address}:{target.desired.port})"
        ev.error = f"{ev.error}; {broke}" if ev.error else broke
    elif isinstance(http, BaseException):
        raise http
    elif ev.error is None:  # an unreachable host's endpoints are not evidence of anything
        ev.http = http
    ev.finished_at = time.time()
    return ev


def collect(
    targets: list[Target],
    *,
    private_key: str | None = None,
    api_key: str | None = None,
    bounds: ReadBounds = DEFAULT_BOUNDS,
    on_host: Callable[[HostEvidence], None] | None = None,
) -> list[HostEvidence]:
    """Every host's evidence, in the order of ``targets``; collected in parallel (``WORKERS`` at a time), each host
    within ``bounds`` (node_reads): a fleet of up to ``WORKERS`` hosts is read within ``bounds.ssh_s``."""
    inventory = [
        InventoryHost(t.desired.host, t.desired.address, t.ssh_user, t.ssh_port, host_key=t.host_key) for t in targets
    ]
    check_hosts(inventory, connect=True)
    with PrivateDir() as private:
        known_hosts = private.file("known_hosts", "".join(known_hosts_line(h) + "\n" for h in inventory))
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(private.path), **private.marker}
        if private_key is not None:
            env.update(private.start_agent(private_key))
        elif os.environ.get("SSH_AUTH_SOCK"):
            # No key given: the controller's own agent, as `--ssh-key`'s help says (HOME is ours: no user config).
            env["SSH_AUTH_SOCK"] = os.environ["SSH_AUTH_SOCK"]

        def one(target: Target) -> HostEvidence:
            ev = run_sync(_collect_host(target, env, known_hosts, api_key, bounds))
            if on_host:
                on_host(ev)
            return ev

        workers = min(WORKERS, max(1, len(targets)))
        with ThreadPoolExecutor(max_workers=workers) as hosts:
            return list(hosts.map(one, targets))
