"""The evidence of an audit: what was collected from each host, kept as files with a sha256 manifest.

The audit's verdict is computed from this bundle and nothing else (``reconcile.judge``), so an auditor who
re-runs ``vllm-fleet audit --evidence DIR`` offline gets the same findings. Layout::

    DIR/manifest.json               {relative path: sha256} of every other file
    DIR/<host>/desired.json         what the host should run (rendered from its profile for its pinned release)
    DIR/<host>/meta.json            address, collection times, the error if the host could not be read
    DIR/<host>/remote/<section>     what the read-only script printed (files base64 in, as they are on disk)
    DIR/<host>/http/<endpoint>      /version, /v1/models, /metrics as the node answered
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import json
import os
import re
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

MANIFEST = "manifest.json"
WAIVERS = "waivers.yaml"
"""The waivers the audit was run with, when it was: listed and hashed in the manifest like every file."""


@dataclass(frozen=True)
class Desired:
    """What one host should run: the exact config file, the pins, the paths the role writes."""

    __pydantic_config__ = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)  # desired.json's schema
    host: str
    address: str
    profile: str
    profile_data: dict[str, Any]
    vllm_version: str
    config_text: str
    """The exact ``vllm serve --config`` file (templates/vllm-config.yaml.j2, as the role renders it)."""
    config_path: str = "/etc/vllm/main.yaml"
    unit: str = "vllm-main.service"
    unit_lkg_path: str = "/etc/vllm/main.service.lkg"
    journal_path: str = "/var/lib/vllm-fleet/main.rollout.json"
    """The role's rollout journal (docs/rollouts.md): read for the rollout report, not judged by the audit."""
    cordon_path: str = "/etc/vllm/main.cordon"
    """The cordon file a person writes (playbooks/cordon.yml): its presence takes the node out of service."""
    venv: str = "/opt/vllm"
    port: int = 8000
    driver_version: str | None = None
    """The pinned NVIDIA driver (None: the host runs no driver role)."""
    cuda_version: str | None = None
    max_exposure: float = 2.5
    """Highest `systemd-analyze security` exposure the hardened unit may show."""
    model_dir: str | None = None
    """The directory the server serves when ``vllm_models`` stages it (None: a model vllm-fleet does not stage)."""
    model_manifest_sha256: str | None = None
    """The digest of the manifest the stack names for that model (None: staged ``unverified``, or not staged)."""


@dataclass
class HostEvidence:
    host: str
    address: str
    started_at: float
    finished_at: float = 0.0
    error: str | None = None
    """Why the host could not be read (unreachable, SSH refused): nothing else is known."""
    remote: dict[str, str] = field(default_factory=dict)
    http: dict[str, dict[str, Any]] = field(default_factory=dict)
    """endpoint -> {"status": int, "body": str} or {"error": str}."""


def b64_file(text: str) -> str | None:
    """A file the collection script sent base64-encoded (bytes kept exactly); None: absent or not base64."""
    try:
        return (
            base64.b64decode(text.strip(), validate=True).decode("utf-8", "surrogateescape") if text.strip() else None
        )
    except (binascii.Error, ValueError):
        return None


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _http_name(endpoint: str) -> str:
    return endpoint.strip("/").replace("/", "_") or "root"


def write_bundle(
    out: Path, items: list[tuple[Desired, HostEvidence]], extra: dict[str, str] | None = None
) -> dict[str, str]:
    """Write every host's evidence (and ``extra`` files at the top, e.g. the waivers) under ``out``; return (and
    write) the manifest."""
    files: dict[str, str] = {}

    def put(rel: str, text: str) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        files[rel] = sha256_text(text)

    for name, text in (extra or {}).items():
        put(name, text)
    for desired, ev in items:
        put(f"{ev.host}/desired.json", json.dumps(asdict(desired), indent=2, sort_keys=True) + "\n")
        meta = {k: v for k, v in asdict(ev).items() if k not in ("remote", "http")}
        meta["http"] = {ep: {k: v for k, v in r.items() if k != "body"} for ep, r in ev.http.items()}
        put(f"{ev.host}/meta.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
        for section, text in sorted(ev.remote.items()):
            put(f"{ev.host}/remote/{section}", text)
        for endpoint, result in sorted(ev.http.items()):
            if "body" in result:
                put(f"{ev.host}/http/{_http_name(endpoint)}", result["body"])
    (out / MANIFEST).write_text(json.dumps(files, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return files


class BundleError(ValueError):
    """An evidence bundle that cannot be judged: incomplete, changed after it was written, or not a bundle."""


MAX_FILE_BYTES = 64 * 1024 * 1024
"""One file of a bundle (a node's ``/metrics`` is bounded at 32 MiB when collected)."""
MAX_BUNDLE_BYTES = 4 * 1024 * 1024 * 1024
MAX_FILES = 100_000
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@:-]{0,252}")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class _HttpMeta(BaseModel):
    model_config = _STRICT
    status: int | None = None
    error: str | None = None


class _Meta(BaseModel):
    """meta.json: who the host is, when it was read, why it could not be."""

    model_config = _STRICT
    host: str
    address: str
    started_at: float
    finished_at: float
    error: str | None = None
    http: dict[str, _HttpMeta] = {}


_DESIRED = TypeAdapter(Desired)


def _manifest_path(rel: Any) -> str | None:
    """Why ``rel`` is not a path a bundle may list (None: it may). Confined: relative, no ``..``, nothing but the
    bundle's own layout."""
    if not isinstance(rel, str):
        return "not a string"
    parts = rel.split("/")
    if rel == WAIVERS:
        return None
    if len(parts) == 2 and parts[1] in ("desired.json", "meta.json") and _HOST.fullmatch(parts[0]):
        return None
    if len(parts) == 3 and parts[1] in ("remote", "http") and _HOST.fullmatch(parts[0]) and _NAME.fullmatch(parts[2]):
        return None
    if rel.startswith("/") or ".." in parts:
        return "outside the bundle (absolute or ..)"
    return f"not a file of the bundle's layout ({WAIVERS}, <host>/desired.json, meta.json, remote/<x>, http/<x>)"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BundleError(f"{MANIFEST}: {key!r} listed twice")
        out[key] = value
    return out


def parse_manifest(raw: bytes, where: str) -> dict[str, str]:
    """The manifest's {path: sha256}, every path confined to the bundle's layout; BundleError naming what is wrong."""
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as err:
        if isinstance(err, BundleError):
            raise BundleError(f"{where}/{err}") from None
        raise BundleError(f"{where}/{MANIFEST}: not JSON ({err}); the bundle is damaged") from None
    if not isinstance(data, dict):
        raise BundleError(f"{where}/{MANIFEST}: a {{path: sha256}} object expected, got {type(data).__name__}")
    if len(data) > MAX_FILES:
        raise BundleError(f"{where}/{MANIFEST}: lists {len(data)} files, more than {MAX_FILES}")
    hosts: dict[str, str] = {}
    for rel, digest in data.items():
        if (why := _manifest_path(rel)) is not None:
            raise BundleError(f"{where}/{MANIFEST}: path {rel!r}: {why}")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise BundleError(f"{where}/{MANIFEST}: {rel}: {digest!r} is not a sha256 hex digest")
        if "/" in rel:
            host = rel.split("/", 1)[0]
            if hosts.setdefault(host.casefold(), host) != host:
                raise BundleError(
                    f"{where}/{MANIFEST}: hosts {hosts[host.casefold()]!r} and {host!r} differ in case only"
                )
    names = {rel.split("/", 1)[0] for rel in data if "/" in rel}
    if not names:
        raise BundleError(f"{where}/{MANIFEST}: lists no host: an empty bundle proves nothing")
    for host in sorted(names):
        for need in ("desired.json", "meta.json"):
            if f"{host}/{need}" not in data:
                raise BundleError(f"{where}/{MANIFEST}: host {host!r} has no {need}")
    return data


def read_confined(root: Path, rel: str, cap: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``root/rel``, opened component by component without following a symlink, a regular file only,
    at most ``cap`` bytes; BundleError otherwise."""
    parts = rel.split("/")
    fds: list[int] = []
    try:
        fds.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY))
        for part in parts[:-1]:
            fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
        fds.append(os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fds[-1]))
        st = os.fstat(fds[-1])
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{root}/{rel}: not a regular file")
        if st.st_size > cap:
            raise BundleError(f"{root}/{rel}: {st.st_size} bytes, more than the {cap} bytes a bundle file may have")
        with os.fdopen(os.dup(fds[-1]), "rb") as f:
            data = f.read(cap + 1)
        if len(data) > cap:
            raise BundleError(f"{root}/{rel}: more than the {cap} bytes a bundle file may have")
        return data
    except OSError as err:
        if err.errno == errno.ENOENT:
            raise BundleError(f"{root}/{rel}: missing (the manifest lists it)") from None
        why = "a symlink (a bundle holds files only)" if err.errno == errno.ELOOP else (err.strerror or str(err))
        raise BundleError(f"{root}/{rel}: cannot read: {why}") from None
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _schema_error(rel: str, err: ValidationError) -> BundleError:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(file)"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return BundleError(f"{rel}: {where}: {first['msg']}{more}")


def _desired(rel: str, raw: bytes, host: str) -> Desired:
    from vllm_fleet.profiles.model import DecodeProfile
    from vllm_fleet.vllm.flags import resolve_version

    try:
        desired = _DESIRED.validate_json(raw)
        DecodeProfile.model_validate(desired.profile_data)
    except ValidationError as err:
        raise _schema_error(rel, err) from None
    try:
        resolve_version(desired.vllm_version)
    except ValueError as err:
        raise BundleError(f"{rel}: vllm_version: {err}") from None
    if desired.host != host:
        raise BundleError(f"{rel}: host: {desired.host!r}, but the file is under {host!r}/")
    return desired


def _meta(rel: str, raw: bytes, host: str) -> _Meta:
    try:
        meta = _Meta.model_validate_json(raw)
    except ValidationError as err:
        raise _schema_error(rel, err) from None
    if meta.host != host:
        raise BundleError(f"{rel}: host: {meta.host!r}, but the file is under {host!r}/")
    return meta


@dataclass(frozen=True)
class Bundle:
    """A bundle as read: its hosts, its manifest's bytes (what the signature covers) and its waivers file."""

    hosts: list[tuple[Desired, HostEvidence, dict[str, str]]]
    manifest_bytes: bytes
    waivers_text: str | None


def load_bundle(root: Path) -> Bundle:
    """Every host of a bundle, read from the files its manifest lists and nothing else, each one's sha256 checked,
    each path confined to the bundle (no absolute path, ``..`` or symlink), each file checked against its schema.

    Linear in the bundle: the manifest is grouped by host once, and each file is read once (checked, then used)."""
    if not root.is_dir():
        raise BundleError(f"{root}: not a directory (an evidence bundle is the evidence/ folder of an audit)")
    raw_manifest = read_confined(root, MANIFEST, 16 * 1024 * 1024)
    manifest = parse_manifest(raw_manifest, str(root))
    by_host: dict[str, dict[str, str]] = {}
    texts: dict[str, bytes] = {}
    total = 0
    for rel, digest in manifest.items():
        raw = read_confined(root, rel)
        total += len(raw)
        if total > MAX_BUNDLE_BYTES:
            raise BundleError(f"{root}: more than {MAX_BUNDLE_BYTES} bytes in all")
        if hashlib.sha256(raw).hexdigest() != digest:
            raise BundleError(f"{root}/{rel}: changed since the audit (its sha256 differs from {MANIFEST})")
        texts[rel] = raw
        if "/" in rel:
            by_host.setdefault(rel.split("/", 1)[0], {})[rel] = digest
    out = []
    for host in sorted(by_host):
        desired = _desired(f"{host}/desired.json", texts[f"{host}/desired.json"], host)
        meta = _meta(f"{host}/meta.json", texts[f"{host}/meta.json"], host)
        ev = HostEvidence(host, meta.address, meta.started_at, meta.finished_at, meta.error)
        for rel in by_host[host]:
            parts = rel.split("/")
            if parts[1] == "remote":
                ev.remote[parts[2]] = texts[rel].decode("utf-8", "surrogateescape")
        for endpoint, result in meta.http.items():
            body = texts.get(f"{host}/http/{_http_name(endpoint)}")  # a body the manifest lists, or none
            entry: dict[str, Any] = result.model_dump(exclude_none=True)
            if body is not None:
                entry["body"] = body.decode("utf-8", "surrogateescape")
            ev.http[endpoint] = entry
        out.append((desired, ev, by_host[host]))
    waivers = texts.get(WAIVERS)
    return Bundle(out, raw_manifest, None if waivers is None else waivers.decode("utf-8", "surrogateescape"))


def read_bundle(root: Path) -> list[tuple[Desired, HostEvidence, dict[str, str]]]:
    """Every host of a bundle (``load_bundle``): (desired, evidence, manifest of the host)."""
    return load_bundle(root).hosts
