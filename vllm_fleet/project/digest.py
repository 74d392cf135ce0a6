"""Content hashes for change detection: of JSON-able data, and of files (relative path + bytes)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def json_digest(obj: Any) -> str:
    """sha256 of ``obj`` as canonical JSON (sorted keys; non-JSON values as ``str``)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def update_with_files(digest: Any, base: Path, paths: Iterable[Path]) -> None:
    """Feed each file's path relative to ``base`` and its bytes into ``digest`` (a hashlib object)."""
    for path in paths:
        digest.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes() + b"\0")


def tree_files(root: Path, suffixes: set[str] | None = None) -> list[Path]:
    """Files under ``root`` in sorted path order, ``__pycache__`` skipped; only ``suffixes`` if given."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        found += [Path(dirpath) / n for n in filenames if suffixes is None or Path(n).suffix in suffixes]
    return sorted(found)
