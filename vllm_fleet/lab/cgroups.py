"""A cgroup of its own for every lab host, in whatever cgroup layout the controller has.

systemd-nspawn with ``--keep-unit --register=no`` runs the container in the cgroup it was
started in (it splits it into ``supervisor/`` and ``payload/``), so each host needs its own:
``vfleet/<host>`` under every hierarchy systemd uses. Which hierarchies those are depends on
the controller:

* unified (cgroup v2 at /sys/fs/cgroup): ``/sys/fs/cgroup``
* hybrid (v1 + v2 at /sys/fs/cgroup/unified): ``/sys/fs/cgroup/unified`` and ``/sys/fs/cgroup/systemd``
* legacy (v1 only): ``/sys/fs/cgroup/systemd``

The cgroup is also how ``lab down`` makes sure nothing of a host survives: it kills every
process in it (``cgroup.kill`` where the kernel has it) and removes the tree bottom-up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from vllm_fleet.lab import config
from vllm_fleet.lab.system import mount_fstype

CGROUP_FS = Path("/sys/fs/cgroup")


def lab_group() -> str:
    """The cgroup under which this lab's hosts live (``vfleet`` for the main lab, ``vftest`` for the tests')."""
    return config.lab_net().cgroup_group


def _is_cgroup2(path: Path) -> bool:
    return mount_fstype(path) == "cgroup2"


def hierarchy_roots() -> list[Path]:
    """The cgroup hierarchies a host's cgroup must exist in (the first one is the unified one
    when there is one)."""
    if _is_cgroup2(CGROUP_FS):
        return [CGROUP_FS]
    roots: list[Path] = []
    if _is_cgroup2(CGROUP_FS / "unified"):
        roots.append(CGROUP_FS / "unified")
    if (CGROUP_FS / "systemd" / "cgroup.procs").exists():
        roots.append(CGROUP_FS / "systemd")
    if not roots:
        raise RuntimeError("no usable cgroup hierarchy under /sys/fs/cgroup")
    return roots


def host_cgroup(host: str) -> str:
    return f"{lab_group()}/{host}"


def create(relpath: str, roots: list[Path]) -> list[Path]:
    dirs = [root / relpath for root in roots]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def procs(relpath: str, roots: list[Path]) -> set[int]:
    """Every process in the cgroup or below it, in any of the hierarchies."""
    found: set[int] = set()
    for root in roots:
        base = root / relpath
        if not base.is_dir():
            continue
        for dirpath, _dirs, _files in os.walk(base):
            try:
                text = (Path(dirpath) / "cgroup.procs").read_text()
            except OSError:
                continue
            found.update(int(p) for p in text.split())
    return found


def kill_all(relpath: str, roots: list[Path], timeout: float = 60.0) -> None:
    """SIGKILL everything in the cgroup tree and wait until it is empty. A killed process leaves only when the
    kernel has freed it (its memory, its I/O in flight): one took over 10 s on a busy 2-core machine
    (bench/provision.py's teardown, 2026-12-03; which process it was is not known), so the wait is a minute."""
    deadline = time.monotonic() + timeout
    while True:
        pids = procs(relpath, roots)
        if not pids:
            return
        for root in roots:
            kill_file = root / relpath / "cgroup.kill"
            if kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {sorted(pids)} survive SIGKILL in cgroup {relpath}")
        time.sleep(0.1)


def remove(relpath: str, roots: list[Path]) -> None:
    """rmdir the cgroup tree bottom-up (cgroup directories can only be removed when empty)."""
    for root in roots:
        base = root / relpath
        if not base.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(base), key=lambda t: -len(t[0])):
            _rmdir_retry(Path(dirpath))


def _rmdir_retry(path: Path, attempts: int = 50) -> None:
    for i in range(attempts):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if i == attempts - 1:
                raise
            time.sleep(0.1)  # a just-killed process may still be leaving the cgroup


def remove_lab_group_if_empty(roots: list[Path]) -> None:
    for root in roots:
        group = root / lab_group()
        if group.is_dir() and not any(p.is_dir() for p in group.iterdir()):
            _rmdir_retry(group)


def lab_cgroups(roots: list[Path]) -> list[Path]:
    """Every lab cgroup that exists (for verifying a clean ``down``)."""
    return [root / lab_group() for root in roots if (root / lab_group()).exists()]
