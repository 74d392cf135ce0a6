"""Thin, explicit wrappers around the commands the lab runs on the controller."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}


class LabError(RuntimeError):
    """Something the lab needs is missing or a lab step failed; the message says what to do."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError(
            "the lab needs root (network namespaces, bridges, overlay mounts, systemd-nspawn); "
            "run it with sudo or as root"
        )


def run(
    argv: Sequence[str | Path],
    *,
    check: bool = True,
    capture: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command (never through a shell); raise :class:`LabError` with its stderr on failure."""
    args = [str(a) for a in argv]
    full_env = {**os.environ, **env} if env else None
    proc = subprocess.run(
        args,
        check=False,
        capture_output=capture,
        text=True,
        env=full_env,
        timeout=timeout,
        input=input_text,
        stdin=None if input_text is not None else subprocess.DEVNULL,
    )
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout or "").strip() if capture else ""
        raise LabError(f"command failed ({proc.returncode}): {' '.join(args)}\n{detail}".rstrip())
    return proc


def missing_commands(commands: Iterable[str]) -> list[str]:
    return [c for c in commands if shutil.which(c) is None]


def ensure_debian_packages(commands_to_packages: Mapping[str, str]) -> list[str]:
    """Install the Debian packages that provide missing commands; return what was installed.

    CI starts from a fresh machine, so the lab installs its own tools with apt-get.
    """
    missing = missing_commands(commands_to_packages)
    packages = sorted({commands_to_packages[c] for c in missing})
    if not packages:
        return []
    if shutil.which("apt-get") is None:
        raise LabError(f"missing {', '.join(missing)} and no apt-get to install {', '.join(packages)}")
    print(f"lab: installing {' '.join(packages)} (provides {', '.join(missing)}) with apt-get", flush=True)
    update = run(["apt-get", "update", "-q"], check=False, env=APT_ENV, timeout=900)
    if update.returncode != 0:  # a stale or unreachable extra source: try the install anyway
        print(f"lab: apt-get update failed ({update.returncode}); trying the install anyway", flush=True)
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], env=APT_ENV, timeout=1800)
    still = missing_commands(missing)
    if still:
        raise LabError(f"apt-get installed {' '.join(packages)} but {', '.join(still)} is still missing")
    return packages


def write_file(path: Path, content: str | bytes, mode: int = 0o644) -> None:
    """Write a file atomically-enough for config files (create parents, then chmod)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    path.chmod(mode)


def unescape_mount_path(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(esc, ch)
    return field


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """(mount point, filesystem type) for each line of /proc/<pid>/mountinfo."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) >= 5 and right:
            out.append((unescape_mount_path(fields[4]), right.split()[0]))
    return out


def mount_table() -> list[tuple[str, str]]:
    return parse_mountinfo(Path("/proc/self/mountinfo").read_text())


def mount_fstype(path: Path) -> str | None:
    """The filesystem type mounted exactly at ``path`` (the topmost mount), or None."""
    found = None
    for mnt, fstype in mount_table():
        if mnt == str(path):
            found = fstype
    return found


def mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/") + "/"
    return [mnt for mnt, _ in mount_table() if mnt == str(path) or mnt.startswith(prefix)]
