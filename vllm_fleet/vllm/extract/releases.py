"""vLLM releases on PyPI: versions, artefacts, and the cached ``vllm/**.py`` of each release.

For each release the artefact is the sdist (the x86_64 wheel when a release has none); only its ``vllm/**.py``
members are kept, one zip per version under ``${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}/vllm-src/py/``
(``dist/`` holds the downloaded sdists; a wheel is read through HTTP range requests, its compiled extensions
never downloaded). ``offline`` means the cache only: a missing release is an error, never a download.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from vllm_fleet.vllm.extract.pysource import ARTEFACT_MEMBER, dump_json

PYPI_JSON = os.environ.get("VLLM_FLEET_PYPI_JSON", "https://pypi.org/pypi/vllm/json")


USER_AGENT = "vllm-fleet-extract/1 (+vllm_fleet/vllm/extract)"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Versions (stdlib only: final releases and .postN, no pre-releases)
# --------------------------------------------------------------------------

_VERSION_RE = re.compile(r"^(\d+(?:\.\d+)*)(?:\.post(\d+))?$")


def version_key(version: str) -> tuple[int, ...]:
    """Sort key for final releases (``0.9.0.1``, ``0.8.5.post1``)."""
    m = _VERSION_RE.match(version)
    if m is None:
        raise ValueError(f"not a final release version: {version!r}")
    release = [int(p) for p in m.group(1).split(".")]
    release += [0] * (5 - len(release))
    return (*release, int(m.group(2) or 0))


def table_versions(path: Path) -> list[str]:
    """The releases a committed table holds (``versions``), oldest first: the range the companion readers follow."""
    versions: list[str] = json.loads(path.read_text())["versions"]
    return versions


def between(versions: list[str], vmin: str | None, vmax: str | None) -> list[str]:
    """``versions`` from ``vmin`` to ``vmax`` (either open when None)."""
    lo = version_key(vmin) if vmin else None
    hi = version_key(vmax) if vmax else None
    return [v for v in versions if (lo is None or version_key(v) >= lo) and (hi is None or version_key(v) <= hi)]


def is_final_release(version: str) -> bool:
    return _VERSION_RE.match(version) is not None


def is_minor_release(version: str) -> bool:
    """True for ``x.y.0`` releases."""
    parts = version.split(".")
    return len(parts) == 3 and parts[2] == "0"


# --------------------------------------------------------------------------
# Download + cache
# --------------------------------------------------------------------------


def cache_root() -> Path:
    base = os.environ.get("VLLM_FLEET_CACHE") or str(Path.home() / ".cache" / "vllm-fleet")
    return Path(base) / "vllm-src"


def http_get(url: str, headers: dict[str, str] | None = None, retries: int = 3) -> bytes:
    hdrs = {"User-Agent": USER_AGENT, **(headers or {})}
    last: Exception | None = None
    for attempt in range(retries):
        try:
            req = urllib.request.Request(url, headers=hdrs)  # noqa: S310 - https PyPI URLs only
            with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310
                data: bytes = r.read()
                return data
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            last = exc
            time.sleep(1 + attempt * 2)
    raise RuntimeError(f"GET {url} failed: {last}")


def load_index(cache: Path, offline: bool) -> dict[str, Any]:
    """PyPI JSON API document for vllm (cached copy used when offline)."""
    path = cache / "pypi-vllm.json"
    if not offline:
        try:
            data = http_get(PYPI_JSON)
            cache.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        except RuntimeError as exc:
            if not path.exists():
                raise
            log(f"warning: {exc}; using cached index {path}")
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


@dataclass(frozen=True)
class Artefact:
    version: str
    filename: str
    url: str
    sha256: str
    kind: str  # "sdist" | "wheel"
    size: int


def pick_artefact(version: str, files: list[dict[str, Any]]) -> Artefact | None:
    live = [f for f in files if not f.get("yanked")] or files
    sdists = [f for f in live if f.get("packagetype") == "sdist"]
    wheels = [f for f in live if f.get("packagetype") == "bdist_wheel"]
    wheels.sort(key=lambda f: ("x86_64" not in f["filename"], f.get("size", 0)))
    chosen = sdists[0] if sdists else (wheels[0] if wheels else None)
    if chosen is None:
        return None
    return Artefact(
        version=version,
        filename=chosen["filename"],
        url=urljoin(PYPI_JSON, chosen["url"]),
        sha256=chosen.get("digests", {}).get("sha256", ""),
        kind="sdist" if chosen in sdists else "wheel",
        size=int(chosen.get("size", 0)),
    )


def _wanted_member(rel: str) -> bool:
    """``rel`` is a path relative to the top of the source tree."""
    if not rel.startswith("vllm/") or not rel.endswith(".py"):
        return False
    return "/tests/" not in rel


class HttpRangeFile(io.RawIOBase):
    """Seekable read-only file over HTTP range requests (block cached).

    Lets ``zipfile`` read the handful of ``.py`` members of a 500 MB wheel
    without downloading the compiled extensions.
    """

    BLOCK = 4 * 1024 * 1024

    def __init__(self, url: str, size: int) -> None:
        super().__init__()
        self.url = url
        self.size = size
        self.pos = 0
        self.blocks: dict[int, bytes] = {}
        self.fetched = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self.pos = offset
        elif whence == io.SEEK_CUR:
            self.pos += offset
        else:
            self.pos = self.size + offset
        return self.pos

    def _block(self, idx: int) -> bytes:
        if idx not in self.blocks:
            start = idx * self.BLOCK
            end = min(self.size, start + self.BLOCK) - 1
            data = http_get(self.url, {"Range": f"bytes={start}-{end}"})
            if len(data) != end - start + 1:
                raise RuntimeError(f"range request to {self.url} not honoured")
            self.blocks[idx] = data
            self.fetched += len(data)
        return self.blocks[idx]

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self.size - self.pos
        n = max(0, min(n, self.size - self.pos))
        out = bytearray()
        while n > 0:
            idx, off = divmod(self.pos, self.BLOCK)
            chunk = self._block(idx)[off : off + n]
            out += chunk
            self.pos += len(chunk)
            n -= len(chunk)
        return bytes(out)

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def ensure_sources(art: Artefact, cache: Path, offline: bool) -> Path:
    """Return the path of ``py/<version>.zip`` (vllm/**.py of that release)."""
    py_dir = cache / "py"
    out = py_dir / f"{art.version}.zip"
    if out.exists():
        return out
    if offline:
        raise RuntimeError(f"{art.version}: not cached and --offline given")
    py_dir.mkdir(parents=True, exist_ok=True)
    members: dict[str, bytes] = {}
    if art.kind == "sdist":
        dist = cache / "dist" / art.filename
        if not dist.exists():
            dist.parent.mkdir(parents=True, exist_ok=True)
            data = http_get(art.url)
            if art.sha256 and hashlib.sha256(data).hexdigest() != art.sha256:
                raise RuntimeError(f"sha256 mismatch for {art.filename}")
            tmp = dist.with_suffix(".part")
            tmp.write_bytes(data)
            tmp.replace(dist)
        with tarfile.open(dist) as tar:
            for m in tar:
                if not m.isfile():
                    continue
                rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
                if _wanted_member(rel):
                    fh = tar.extractfile(m)
                    if fh is not None:
                        members[rel] = fh.read()
    else:
        raw = HttpRangeFile(art.url, art.size)
        with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=1 << 20)) as zf:
            infos = sorted(
                (i for i in zf.infolist() if _wanted_member(i.filename)),
                key=lambda i: i.header_offset,
            )
            for info in infos:
                members[info.filename] = zf.read(info)
        log(f"  {art.filename}: read {raw.fetched / 1e6:.1f} MB of {art.size / 1e6:.0f} MB via ranges")
    if not members:
        raise RuntimeError(f"{art.filename}: no vllm/*.py members found")
    tmp = out.with_suffix(".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(members):
            zf.writestr(name, members[name])
        zf.writestr(ARTEFACT_MEMBER, json.dumps({"filename": art.filename, "sha256": art.sha256}))
    tmp.replace(out)
    return out


def select_versions(index: dict[str, Any], vmin: str, vmax: str, minors_only: bool) -> list[Artefact]:
    lo, hi = version_key(vmin), version_key(vmax)
    out: list[Artefact] = []
    for v, files in index["releases"].items():
        if not is_final_release(v) or not files:
            continue
        if not lo <= version_key(v) <= hi:
            continue
        if all(f.get("yanked") for f in files):
            continue
        if minors_only and not (is_minor_release(v) or v == vmin):
            continue
        art = pick_artefact(v, files)
        if art is not None:
            out.append(art)
    out.sort(key=lambda a: version_key(a.version))
    return out


def source_zip(
    version: str, cache: Path, offline: bool, index: dict[str, Any] | None
) -> tuple[Path, dict[str, Any] | None]:
    """The cached zip of ``version`` (downloaded unless ``offline``), and the PyPI index if it had to be read."""
    path = cache / "py" / f"{version}.zip"
    if path.exists():
        return path, index
    if index is None:
        index = load_index(cache, offline)
    art = pick_artefact(version, index["releases"].get(version, []))
    if art is None:
        raise SystemExit(f"{version}: no artefact on PyPI")
    return ensure_sources(art, cache, offline), index


def print_warnings(warnings_by_version: dict[str, list[str]], limit: int) -> None:
    """The end of an extractor's report: each release's analysis warnings, at most ``limit`` of them."""
    if not warnings_by_version:
        return
    print("\nAnalysis warnings (best-effort static interpretation):")
    for version, warnings in warnings_by_version.items():
        for w in warnings[:limit]:
            print(f"  {version}: {w}")
        if len(warnings) > limit:
            print(f"  {version}: ... {len(warnings) - limit} more")


def write_table(path: Path, table: dict[str, Any], *, dry_run: bool = False) -> None:
    """Write a table as committed (``dump_json`` and a final newline); ``dry_run`` writes nothing."""
    if dry_run:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_json(table) + "\n")
    log(f"wrote {path}")
