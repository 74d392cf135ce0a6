"""SSH between the controller and the lab hosts, with host-key checking ON.

Every host gets a fresh ed25519 host key when it is created; the controller writes their
public halves into a known_hosts file of its own, and one controller key (ed25519) is
authorised for root on every host.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from vllm_fleet.lab.system import LabError, run


def ensure_controller_key(path: Path) -> Path:
    """An ed25519 key pair for the controller (kept across ``lab down``)."""
    if not (path.is_file() and path.with_suffix(".pub").is_file()):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for p in (path, path.with_suffix(".pub")):
            p.unlink(missing_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vllm-fleet-lab-controller", "-f", path])
    path.chmod(0o600)
    return path


def generate_host_key(path: Path, comment: str) -> str:
    """Write a fresh ed25519 host key to ``path`` (+ ``.pub``); return the public key line."""
    for p in (path, Path(f"{path}.pub")):
        p.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path])
    return Path(f"{path}.pub").read_text().strip()


def known_hosts_line(names: Sequence[str], pubkey_line: str) -> str:
    keytype, key = pubkey_line.split()[:2]
    return f"{','.join(names)} {keytype} {key}"


def ssh_options(key: Path, known_hosts: Path, connect_timeout: int = 3) -> list[str]:
    return [
        "-i",
        str(key),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={connect_timeout}",
        "-o",
        "LogLevel=ERROR",
    ]


def ssh_argv(ip: str, key: Path, known_hosts: Path, command: str, connect_timeout: int = 3) -> list[str]:
    return ["ssh", *ssh_options(key, known_hosts, connect_timeout), f"root@{ip}", command]


def ssh_run(
    ip: str, key: Path, known_hosts: Path, command: str, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    try:
        return run(ssh_argv(ip, key, known_hosts, command), check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([], 255, "", f"ssh to {ip} timed out after {timeout}s")


def wait_for_ssh(ip: str, key: Path, known_hosts: Path, timeout: float = 90.0) -> float:
    """Poll until ``ssh root@ip true`` succeeds with strict host-key checking; return seconds waited."""
    start = time.monotonic()
    last = ""
    while True:
        proc = ssh_run(ip, key, known_hosts, "true", timeout=10)
        if proc.returncode == 0:
            return time.monotonic() - start
        last = (proc.stderr or proc.stdout).strip()
        if time.monotonic() - start > timeout:
            raise LabError(f"sshd on {ip} did not answer within {timeout:.0f}s: {last}")
        time.sleep(0.2)
