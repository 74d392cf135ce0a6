"""apt's version pins, evaluated from the preference files as apt reads them (pure; apt_preferences(5)).

`apt-cache policy` would say the same, but it evaluates every glob pin against every package of the host's
lists (half a second of CPU per host on a full Debian mirror): the audit reads the files instead.

Rules kept from apt: ``/etc/apt/preferences`` first, then ``preferences.d/`` in file-name order, only files
without an extension or ending in ``.pref`` whose names are ``[A-Za-z0-9_.-]``; records separated by blank
lines; ``Package:`` lists names, globs (``nvidia-*``) or ``/regex/``; for a package's version the first record
that matches both the package and the version decides its priority. Only ``Pin: version ...`` records fix a
version; ``release``/``origin`` pins depend on repository data and are left out (they do not fix one).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Pin:
    file: str
    packages: tuple[str, ...]
    version: str
    priority: int


def _read_by_apt(path: str) -> bool:
    name = PurePosixPath(path).name
    if path == "/etc/apt/preferences":
        return True
    return bool(_NAME.fullmatch(name)) and ("." not in name or name.endswith(".pref"))


def _order(path: str) -> tuple[int, str]:
    return (0, "") if path == "/etc/apt/preferences" else (1, PurePosixPath(path).name)


def parse(files: dict[str, str]) -> list[Pin]:
    """Version pins of ``{path: text}``, in the order apt reads them."""
    pins: list[Pin] = []
    for path in sorted((p for p in files if _read_by_apt(p)), key=_order):
        for record in re.split(r"\n\s*\n", files[path]):
            fields: dict[str, str] = {}
            for line in record.splitlines():
                if line.startswith("#") or ":" not in line:
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            pin = fields.get("pin", "").split(None, 1)
            if len(pin) != 2 or pin[0] != "version" or not fields.get("package"):
                continue
            try:
                priority = int(fields.get("pin-priority", ""))
            except ValueError:
                continue
            pins.append(Pin(path, tuple(fields["package"].split()), pin[1].strip(), priority))
    return pins


def _matches(pattern: str, name: str) -> bool:
    if len(pattern) > 1 and pattern.startswith("/") and pattern.endswith("/"):
        try:
            return re.search(pattern[1:-1], name) is not None
        except re.error:
            return False
    return fnmatch.fnmatchcase(name, pattern)


def priority(pins: list[Pin], package: str, version: str) -> tuple[int, Pin | None]:
    """The pin priority apt gives ``package`` at ``version`` (500-ish default when no version pin matches: 0)."""
    for pin in pins:
        if any(_matches(p, package) for p in pin.packages) and _matches(pin.version, version):
            return pin.priority, pin
    return 0, None
