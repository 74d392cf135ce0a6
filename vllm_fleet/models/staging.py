"""The ``vllm_models`` entries the ``vllm`` role stages, as data: the one rule the validator, the preflight and the
role itself apply (the role through the ``role_value_problems`` filter), and where each staged model lives.

An entry is a model directory name and exactly one source (``src``: a directory on the controller; ``url``: a tar
archive on a mirror), with the model's manifest (``manifest``: a file on the controller or a URL on the mirror;
``manifest_sha256``: the sha256 that ``vllm-fleet model manifest`` printed for it), or ``unverified: true`` for a
model staged with no manifest at all (the plan and ``validate`` say so for each one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
CHECKSUM = re.compile(r"^sha(1|224|256|384|512):[0-9a-f]+$")
URL = re.compile(r"^(https?|file)://[^\s]+$")
KEYS = ("name", "src", "url", "checksum", "strip_components", "required", "manifest", "manifest_sha256", "unverified")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def entry_problems(i: int, entry: Any) -> list[tuple[str, str]]:
    """(field, message) for each problem of ``vllm_models[i]``; the field is relative to the list."""
    at = f"[{i}]"
    if not isinstance(entry, Mapping):
        return [(at, "is not a mapping; give name and src or url, with manifest and manifest_sha256")]
    problems: list[tuple[str, str]] = []
    for key in entry:
        if key not in KEYS:
            problems.append((f"{at}.{key}", f"unknown; an entry has {', '.join(KEYS)}"))
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.match(name) or len(name) > 200:
        problems.append((f"{at}.name", "missing or not a plain directory name (letters, digits, . _ -)"))
    src, url = _text(entry.get("src")), _text(entry.get("url"))
    if bool(src) == bool(url):
        problems.append(
            (at, "give exactly one source: src (a directory on the controller) or url (a tar archive on a mirror)")
        )
    if url and not URL.match(url):
        problems.append((f"{at}.url", "not an http(s):// or file:// URL"))
    if "checksum" in entry and not CHECKSUM.match(_text(entry.get("checksum"))):
        problems.append((f"{at}.checksum", 'not "sha256:<hex>" (the archive\'s digest, as get_url checks it)'))
    unverified = entry.get("unverified", False)
    if not isinstance(unverified, bool):
        problems.append((f"{at}.unverified", "not true or false"))
    manifest, digest = entry.get("manifest"), entry.get("manifest_sha256")
    if unverified is True:
        if manifest is not None or digest is not None:
            problems.append((f"{at}.unverified", "set with a manifest; drop unverified: true to verify the files"))
    else:
        if not _text(manifest):
            problems.append(
                (
                    f"{at}.manifest",
                    "missing: every staged model is checked against its manifest; make one with `vllm-fleet model "
                    "manifest DIR` and give its path (or its URL on the mirror) and manifest_sha256, or set "
                    "unverified: true to stage this model unchecked",
                )
            )
        elif not (URL.match(_text(manifest)) or _text(manifest).startswith("/")):
            problems.append(
                (f"{at}.manifest", "not an absolute path on the controller or an http(s):// or file:// URL")
            )
        if not SHA256.match(_text(digest)):
            problems.append(
                (
                    f"{at}.manifest_sha256",
                    "missing or not 64 lower-case hex digits; set what `vllm-fleet model manifest` printed",
                )
            )
    return problems


def models_problems(entries: Any) -> list[tuple[str, str]]:
    """Every problem of a ``vllm_models`` list (its type is the role schema's business), and names staged twice."""
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        return []
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        problems += entry_problems(i, entry)
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(name, str):
            if name in seen:
                problems.append((f"[{i}].name", f"{name} is staged twice; give each model one entry"))
            seen.add(name)
    return problems


def unverified(entries: Any) -> list[tuple[int, str]]:
    """(index, name) of each model staged without a manifest (``unverified: true``)."""
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        return []
    return [
        (i, str(e.get("name"))) for i, e in enumerate(entries) if isinstance(e, Mapping) and e.get("unverified") is True
    ]


def verified(entries: Any) -> list[Mapping[str, Any]]:
    """The entries staged with a manifest (all but ``unverified: true``): the models checked before each start."""
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        return []
    return [e for e in entries if isinstance(e, Mapping) and e.get("unverified") is not True]


def manifest_source(entry: Any) -> str:
    """Where the role takes an entry's manifest from: ``none`` (``unverified: true``), ``mirror`` (an http(s):// or
    file:// URL, fetched by the host) or ``controller`` (a path, checked and copied from the controller)."""
    if not isinstance(entry, Mapping) or entry.get("unverified") is True:
        return "none"
    return "mirror" if URL.match(_text(entry.get("manifest"))) else "controller"


def served_entry(entries: Any, models_dir: str, served: str) -> Mapping[str, Any] | None:
    """The entry that stages the directory a server serves (``<models_dir>/<name>``), if one does."""
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        return None
    want = served.rstrip("/")
    for e in entries:
        if isinstance(e, Mapping) and f"{models_dir.rstrip('/')}/{e.get('name')}" == want:
            return e
    return None
