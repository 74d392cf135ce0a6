"""Collect what each host really runs: one read-only script over SSH (pinned host key) and the live endpoints.

Nothing on a host is changed: the script only reads (``systemctl show``, ``/proc``, files, package database,
apt preferences, ``systemd-analyze security``). Hosts are collected in parallel; a host that cannot be reached
is recorded with its error and the others are still collected.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from vllm_fleet.ansible import InventoryHost, check_hosts, known_hosts_line, ssh_args
from vllm_fleet.audit.evidence import Desired, HostEvidence
from vllm_fleet.private_dir import PrivateDir

MARK = "@@vllm-fleet-audit "
ENDPOINTS = ("/version", "/v1/models", "/metrics")

# Read-only. Each section starts with MARK<name>; files are base64 so their bytes are kept exactly.
SCRIPT = r"""set -u
unit=$1 config=$2 lkg=$3 venv=$4 journal=${5:-}
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
sec security; systemd-analyze security "$unit" --no-pager 2>&1 | tail -1
"""


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


def _collect_remote(target: Target, env: dict[str, str], known_hosts: Path, timeout: float) -> dict[str, str]:
    d = target.desired
    args = [d.unit, d.config_path, d.unit_lkg_path, d.venv, d.journal_path]
    argv = [
        "ssh",
        *shlex.split(ssh_args(known_hosts)),
        "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", str(target.ssh_port),
        "--", f"{target.ssh_user}@{d.address}",
        "sh -s -- " + " ".join(shlex.quote(a) for a in args),
    ]  # fmt: skip
    proc = subprocess.run(argv, input=SCRIPT, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if proc.returncode == 255 or MARK not in proc.stdout:
        detail = " ".join((proc.stderr or "no output").split())[-300:]
        raise ConnectionError(f"ssh {target.ssh_user}@{d.address}:{target.ssh_port}: {detail}")
    return parse_sections(proc.stdout)


def _collect_http(desired: Desired, api_key: str | None, timeout: float) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    base = f"http://{desired.address}:{desired.port}"
    with httpx.Client(base_url=base, timeout=timeout, headers=headers) as client:
        for endpoint in ENDPOINTS:
            try:
                r = client.get(endpoint)
                out[endpoint] = {"status": r.status_code, "body": r.text}
            except httpx.HTTPError as err:
                out[endpoint] = {"error": f"{type(err).__name__}: {err}"}
    return out


def collect(
    targets: list[Target],
    *,
    private_key: str | None = None,
    api_key: str | None = None,
    timeout: float = 60.0,
    on_host: Callable[[HostEvidence], None] | None = None,
) -> list[HostEvidence]:
    """Every host's evidence, in the order of ``targets``; collected in parallel."""
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
            ev = HostEvidence(target.desired.host, target.desired.address, started_at=time.time())
            # The live endpoints are read while the SSH script runs: a host's audit costs its slower half.
            http = pool.submit(_collect_http, target.desired, api_key, 10.0)
            try:
                ev.remote = _collect_remote(target, env, known_hosts, timeout)
            except (ConnectionError, subprocess.TimeoutExpired) as err:
                ev.error = str(err)
            answers = http.result()
            if ev.error is None:  # an unreachable host's endpoints are not evidence of anything
                ev.http = answers
            ev.finished_at = time.time()
            if on_host:
                on_host(ev)
            return ev

        workers = min(32, max(1, len(targets)))
        with ThreadPoolExecutor(max_workers=workers) as hosts, ThreadPoolExecutor(max_workers=workers) as pool:
            return list(hosts.map(one, targets))
