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
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Desired:
    """What one host should run: the exact config file, the pins, the paths the role writes."""

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
    venv: str = "/opt/vllm"
    port: int = 8000
    driver_version: str | None = None
    """The pinned NVIDIA driver (None: the host runs no driver role)."""
    cuda_version: str | None = None
    max_exposure: float = 2.5
    """Highest `systemd-analyze security` exposure the hardened unit may show."""


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
    """An evidence bundle that is incomplete or was changed after it was written."""


def read_bundle(root: Path) -> list[tuple[Desired, HostEvidence, dict[str, str]]]:
    """Every host of a bundle, each file checked against the manifest; (desired, evidence, manifest of the host).

    Linear in the bundle: the manifest is grouped by host once, and each file is read once (checked, then used)."""
    try:
        manifest: dict[str, str] = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BundleError(f"{root}: no readable {MANIFEST}: {err}") from None
    by_host: dict[str, dict[str, str]] = {}
    texts: dict[str, str] = {}
    for rel, digest in manifest.items():
        path = root / rel
        text = path.read_text(encoding="utf-8", errors="surrogateescape") if path.is_file() else None
        if text is None or sha256_text(text) != digest:
            raise BundleError(f"{root}/{rel}: missing or changed since the audit (sha256 differs from {MANIFEST})")
        if "/" in rel:
            by_host.setdefault(rel.split("/", 1)[0], {})[rel] = digest
            texts[rel] = text
    out = []
    for host in sorted(by_host):
        desired = Desired(**json.loads(texts.get(f"{host}/desired.json") or _read(root / host / "desired.json")))
        meta = json.loads(texts.get(f"{host}/meta.json") or _read(root / host / "meta.json"))
        http_meta: dict[str, dict[str, Any]] = meta.pop("http", {})
        ev = HostEvidence(**meta)
        for rel in by_host[host]:
            parts = rel.split("/")
            if len(parts) > 2 and parts[1] == "remote":
                ev.remote[parts[2]] = texts[rel]
        for endpoint, result in http_meta.items():
            rel = f"{host}/http/{_http_name(endpoint)}"
            body = texts.get(rel)
            if body is None and (root / rel).is_file():  # a body the manifest does not list (as before: read)
                body = _read(root / rel)
            ev.http[endpoint] = {**result, **({"body": body} if body is not None else {})}
        out.append((desired, ev, by_host[host]))
    return out


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="surrogateescape")
