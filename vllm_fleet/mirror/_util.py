"""Small helpers shared by the mirror modules: running commands, tool installs, atomic swaps, locks."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from vllm_fleet.mirror import MirrorError

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}


def run(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    input_bytes: bytes | None = None,
    timeout: float | None = 600,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run a command (never through a shell); raise :class:`MirrorError` with its output on failure."""
    args = [str(a) for a in argv]
    proc = subprocess.run(
        args,
        check=False,
        capture_output=True,
        env={**os.environ, **env} if env else None,
        cwd=cwd,
        input=input_bytes,
        stdin=None if input_bytes is not None else subprocess.DEVNULL,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).decode(errors="replace").strip()
        raise MirrorError(f"command failed ({proc.returncode}): {' '.join(args)}\n{detail}".rstrip())
    return proc


def ensure_commands(commands_to_packages: Mapping[str, str]) -> list[str]:
    """Install (apt-get) the Debian packages providing missing commands; return what was installed."""
    missing = [c for c in commands_to_packages if shutil.which(c) is None]
    packages = sorted({commands_to_packages[c] for c in missing})
    if not packages:
        return []
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise MirrorError(
            f"missing {', '.join(missing)}: install the Debian package(s) {', '.join(packages)} (as root)"
        )
    print(f"mirror: installing {' '.join(packages)} (provides {', '.join(missing)}) with apt-get", flush=True)
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    if run(install, env=APT_ENV, timeout=1800, check=False).returncode != 0:
        run(["apt-get", "update", "-q"], env=APT_ENV, timeout=900)
        run(install, env=APT_ENV, timeout=1800)
    still = [c for c in missing if shutil.which(c) is None]
    if still:
        raise MirrorError(f"apt-get installed {' '.join(packages)} but {', '.join(still)} is still missing")
    return packages


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if needed) for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def replace_dir(new: Path, dest: Path) -> None:
    """Put the finished directory ``new`` at ``dest`` (renames: a reader sees old or new, briefly nothing)."""
    trash = dest.with_name(f".{dest.name}.old")
    if trash.exists() or trash.is_symlink():
        remove_tree(trash)
    if dest.exists() or dest.is_symlink():
        dest.rename(trash)
    new.rename(dest)
    if trash.exists() or trash.is_symlink():
        remove_tree(trash)


def remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def fresh_dir(path: Path) -> Path:
    remove_tree(path)
    path.mkdir(parents=True)
    return path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
