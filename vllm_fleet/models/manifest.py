"""A model's manifest: every file of a model directory (relative path, size, sha256), made once where the model
enters the site, and the one rule that says whether a directory on a node holds exactly what it lists.

The manifest is a JSON file (``FORMAT``); its **digest** is the sha256 of its bytes, and that digest is what a
stack names (``vllm_models[].manifest_sha256``). The same rule judges a node at staging and before every server
restart (the ``vllm`` role, through the ``model_file_problems`` filter) and in the audit (``VF-MODEL-FILES``):
:func:`file_problems` over the manifest and the node's **listing**, which ``roles/vllm/files/model-files.sh``
prints (base64 of NUL-ended records: ``TYPE SIZE PATH`` for every entry that is not a directory, then
``@@sha256``, then ``SHA256  PATH`` for every regular file). Everything a node prints is data: bounded, parsed,
never trusted to be well-formed, and shown escaped.

vllm-fleet's own files at the top of a model directory (``.vllm-fleet-*``: the staging marker, the host's copy of
the manifest) are neither listed nor checked.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from vllm_fleet.trust.node_text import printable

FORMAT = "vllm-fleet/model-manifest/1"
OWN_PREFIX = ".vllm-fleet-"
"""vllm-fleet's own files at the top of a model directory: never in a manifest, never checked."""
HOST_COPY = ".vllm-fleet-manifest.json"
"""Where the ``vllm`` role keeps the manifest it verified a model against, inside the model's directory."""
MAX_FILES = 100_000
MAX_MANIFEST_BYTES = 32 * 1024 * 1024
MAX_LISTING_BYTES = 64 * 1024 * 1024
SHOWN = 10
"""Problems named one by one; the rest are counted."""
_HASHES = "@@sha256"
_CHUNK = 1024 * 1024

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class ManifestError(ValueError):
    """A manifest that cannot be made, read or trusted; the message names the file and the fix."""


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot be a manifest entry (None: it can): relative, POSIX, no ``..``, no control character."""
    if not path or len(path.encode("utf-8", "surrogateescape")) > 4096:
        return "is empty or longer than 4096 bytes"
    if printable(path) != path or "\\" in path:
        return "holds a control character, an undecodable byte or a backslash"
    parts = PurePosixPath(path).parts
    if path.startswith("/") or path != "/".join(parts) or any(p in (".", "..") for p in parts):
        return "is not a plain relative path (no leading /, no . or .., no empty part)"
    if parts[0].startswith(OWN_PREFIX):
        return f"is vllm-fleet's own ({OWN_PREFIX}*), never part of a model"
    return None


class ManifestFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    path: str
    size: int = Field(ge=0)
    sha256: Sha256

    @field_validator("path")
    @classmethod
    def _plain_path(cls, value: str) -> str:
        problem = path_problem(value)
        if problem:
            raise ValueError(f"{printable(value)!r} {problem}")
        return value


class ModelManifest(BaseModel):
    """Every file of one model: sorted by path, each once."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    format: Literal["vllm-fleet/model-manifest/1"] = "vllm-fleet/model-manifest/1"
    files: tuple[ManifestFile, ...] = Field(min_length=1, max_length=MAX_FILES)

    @model_validator(mode="after")
    def _sorted_once(self) -> ModelManifest:
        paths = [f.path for f in self.files]
        if paths != sorted(set(paths)):
            raise ValueError("files must be sorted by path, each path once")
        return self

    def to_bytes(self) -> bytes:
        """The manifest as written: stable JSON, one file per line, so a diff of two manifests reads."""
        lines = ",\n".join("  " + json.dumps(f.model_dump(), sort_keys=True) for f in self.files)
        return f'{{"format": {json.dumps(self.format)}, "files": [\n{lines}\n]}}\n'.encode()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def make_manifest(directory: Path, workers: int | None = None) -> ModelManifest:
    """The manifest of ``directory``: every regular file under it (hashed ``workers`` at once; hashlib releases
    the GIL). Raises ManifestError for what a manifest cannot hold: a symlink, a device or pipe, a name that is
    not a plain path, an empty directory."""
    if not directory.is_dir():
        raise ManifestError(f"{directory}: not a directory; give the model's directory (config.json, *.safetensors)")
    found: list[tuple[str, Path, int]] = []
    for root, dirs, names in os.walk(directory):
        here = Path(root)
        for name in sorted(dirs + names):
            full = here / name
            rel = full.relative_to(directory).as_posix()
            if here == directory and name.startswith(OWN_PREFIX):
                if name in dirs:
                    dirs.remove(name)
                continue
            mode = full.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise ManifestError(
                    f"{full}: not a regular file (a symlink, pipe or device); copy the file it stands for into "
                    "the directory, or remove it"
                )
            problem = path_problem(rel)
            if problem:
                raise ManifestError(f"{printable(str(full))}: the name {problem}; rename it")
            found.append((rel, full, full.stat().st_size))
    if not found:
        raise ManifestError(f"{directory}: no files; give the model's directory")
    if len(found) > MAX_FILES:
        raise ManifestError(f"{directory}: more than {MAX_FILES} files; a model directory has far fewer")
    found.sort()
    with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
        hashes = list(pool.map(_sha256_file, (full for _, full, _ in found)))
    files = tuple(ManifestFile(path=r, size=s, sha256=h) for (r, _, s), h in zip(found, hashes, strict=True))
    return ModelManifest(files=files)


def _first_error(err: ValidationError) -> str:
    e = err.errors(include_url=False)[0]
    where = ".".join(str(p) for p in e["loc"]) or "the manifest"
    return f"{where}: {e['msg']}"


def load_manifest(data: bytes, sha256: str | None = None, where: str = "the manifest") -> ModelManifest:
    """Read a manifest's bytes (bounded), check they are the ones ``sha256`` names, validate the schema."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{where}: larger than {MAX_MANIFEST_BYTES} bytes; not a vllm-fleet model manifest")
    if sha256 is not None:
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            raise ManifestError(
                f"{where}: its sha256 is {got}, the stack names {sha256}; the manifest was changed or is another "
                "model's (make it again with `vllm-fleet model manifest`, and set manifest_sha256 to what it prints)"
            )
    try:
        json.loads(data)
    except (ValueError, RecursionError) as err:
        raise ManifestError(f"{where}: not JSON ({str(err)[:120]})") from None
    try:
        return ModelManifest.model_validate_json(data)
    except ValidationError as err:
        raise ManifestError(f"{where}: {printable(_first_error(err))}") from None


@dataclass(frozen=True)
class Listing:
    """What a node says one model directory holds: every entry but directories, and the hash of each file."""

    entries: dict[str, tuple[str, int]]
    """path -> (find's type letter, size)."""
    hashes: dict[str, str]


class ListingError(ValueError):
    """A listing that is not what model-files.sh prints."""


def parse_listing(text: str) -> Listing:
    """The node's listing (base64, as model-files.sh prints it). Raises ListingError for anything malformed."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ListingError("the listing is not base64") from None
    if len(raw) > MAX_LISTING_BYTES:
        raise ListingError(f"the listing is larger than {MAX_LISTING_BYTES} bytes")
    records = raw.split(b"\0")
    if records and records[-1] == b"":
        records.pop()
    if _HASHES.encode() not in records:
        raise ListingError("the listing has no hash section (the host's hashing did not finish)")
    cut = records.index(_HASHES.encode())
    if cut > MAX_FILES or len(records) - cut - 1 > MAX_FILES:
        raise ListingError(f"the listing names more than {MAX_FILES} files")
    entries: dict[str, tuple[str, int]] = {}
    for record in records[:cut]:
        kind, _, rest = record.partition(b" ")
        size, _, path = rest.partition(b" ")
        if len(kind) != 1 or not size.isdigit() or not path:
            raise ListingError(f"malformed entry {printable(record[:200].decode('utf-8', 'surrogateescape'))!r}")
        entries[path.decode("utf-8", "surrogateescape")] = (kind.decode("ascii", "replace"), int(size))
    hashes: dict[str, str] = {}
    for record in records[cut + 1 :]:
        digest, sep, path = record.partition(b"  ")
        if not sep or len(digest) != 64 or not all(c in b"0123456789abcdef" for c in digest) or not path:
            raise ListingError(f"malformed hash {printable(record[:200].decode('utf-8', 'surrogateescape'))!r}")
        hashes[path.decode("utf-8", "surrogateescape")] = digest.decode()
    return Listing(entries, hashes)


def _shown(path: str) -> str:
    return printable(path)[:200]


def file_problems(manifest: ModelManifest, listing: Listing) -> list[str]:
    """Every way the listed directory differs from the manifest, one line per file (missing, not in the manifest,
    not a regular file, another size, another sha256); empty when it holds exactly the manifest's files."""
    want = {f.path: f for f in manifest.files}
    problems: list[str] = []
    for path, f in want.items():
        kind, size = listing.entries.get(path, ("", -1))
        if not kind:
            problems.append(f"{_shown(path)}: missing")
        elif kind != "f":
            problems.append(f"{_shown(path)}: not a regular file (type {kind!r})")
        elif size != f.size:
            problems.append(f"{_shown(path)}: {size} bytes, the manifest says {f.size}")
        elif listing.hashes.get(path) != f.sha256:
            got = listing.hashes.get(path)
            shown = f"{got[:16]}…" if got else "not computed"
            problems.append(f"{_shown(path)}: sha256 {shown}, the manifest says {f.sha256[:16]}…")
    problems += [f"{_shown(path)}: not in the manifest" for path in sorted(set(listing.entries) - set(want))]
    return problems


def summary(problems: Iterable[str]) -> str:
    """The first ``SHOWN`` problems, then how many more."""
    items = list(problems)
    more = f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return "; ".join(items[:SHOWN]) + more


def model_file_problems(manifest_b64: str, sha256: str, listing_b64: str) -> list[str]:
    """The one rule, for a node: the host's copy of the manifest (base64, as read back from it) must be the one
    ``sha256`` names, and the directory's listing (base64, model-files.sh) must hold exactly its files."""
    try:
        data = base64.b64decode(manifest_b64.strip(), validate=True)
    except (binascii.Error, ValueError):
        return ["the host's copy of the manifest is not base64"]
    try:
        manifest = load_manifest(data, sha256, "the host's copy of the manifest")
        listing = parse_listing(listing_b64)
    except (ManifestError, ListingError) as err:
        return [str(err)]
    return file_problems(manifest, listing)
