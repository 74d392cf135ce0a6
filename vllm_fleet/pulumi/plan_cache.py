"""Memoised fleet plans: an unchanged fleet skips importing and running the core on `pulumi up`.

``plan_fleet`` is a pure function of the stack's fleet config, the profile files it names, and the code
and data it runs (this package, the templates, the interpreter and the libraries it uses). The key hashes
all of those; a hit returns the very plan (JSON) computed last time, a miss computes it — validation
errors included, which are never stored — and stores it. Entries live under ``<cache>/fleet-plans``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from vllm_fleet.fleet.plan import FleetPlan
from vllm_fleet.project.digest import json_digest, tree_files, update_with_files
from vllm_fleet.project.paths import cache_dir, templates_dir

KEEP = 16
"""Entries kept (newest used first); older ones are pruned on store."""
_LIBRARIES = ("pydantic", "pydantic_core", "jinja2", "yaml", "packaging")
_SUFFIXES = {".py", ".yaml", ".yml", ".json", ".j2"}


def code_fingerprint() -> str:
    """The package's sources and data, the templates, the interpreter, the versions of the libraries used."""
    digest = hashlib.sha256(sys.version.encode())
    package = Path(__file__).resolve().parent.parent
    for root in (package, templates_dir()):
        update_with_files(digest, root.parent, tree_files(root, _SUFFIXES))
    for name in _LIBRARIES:
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin) if spec and spec.origin else None
        # The installed distribution's directory changes with every (re)install of another version.
        stamp = f"{origin}:{origin.stat().st_mtime_ns}" if origin and origin.exists() else "absent"
        digest.update(f"{name}={stamp}\0".encode())
    return digest.hexdigest()


def _profile_files(raw: Any) -> list[str]:
    """Contents of the profile YAML files the hosts name (built-in names are covered by the package)."""
    out: list[str] = []
    hosts = raw.get("hosts") if isinstance(raw, dict) else None
    for host in hosts if isinstance(hosts, list) else []:
        ref = host.get("profile") if isinstance(host, dict) else None
        if isinstance(ref, str) and Path(ref).is_file():
            out.append(f"{ref}\0{hashlib.sha256(Path(ref).read_bytes()).hexdigest()}")
    return out


def plan_key(raw: Any) -> str:
    return json_digest([raw, _profile_files(raw), code_fingerprint()])


def cached_plan(raw: Any, directory: Path | None = None) -> tuple[FleetPlan, bool]:
    """The fleet plan for ``raw`` and whether it came from the cache; FleetError if the fleet is invalid."""
    directory = directory or cache_dir() / "fleet-plans"
    entry = directory / f"{plan_key(raw)}.json"
    try:
        text = entry.read_text(encoding="utf-8")
        os.utime(entry)
        return FleetPlan.from_json(text), True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from vllm_fleet.fleet.spec import plan_fleet  # the core: pydantic, catalogs, planner, renderer

    result = plan_fleet(raw)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(result.to_json(), encoding="utf-8")
        tmp.replace(entry)
        _prune(directory)
    except OSError:
        pass  # a read-only cache costs time, not correctness
    return result, False


def _prune(directory: Path) -> None:
    entries = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in entries[KEEP:]:
        old.unlink(missing_ok=True)
