"""Stand-in NVIDIA ``.deb`` packages for CPU-only lab hosts, built reproducibly with ``dpkg-deb``.

The definitions are data (``tools/standin_debs/packages.yaml`` + ``files/``): real package
names, versions and Depends/Provides/Conflicts/Replaces of NVIDIA's CUDA repository for one
driver branch and one CUDA toolkit; every package's Description starts with
"vllm-fleet lab stand-in: NOT the NVIDIA ...", and what they install is tiny and harmless.

Reproducible: file mtimes are clamped to ``SOURCE_DATE_EPOCH`` (fixed, from the definitions),
owners are root:root, paths are sorted by dpkg-deb, so the same definitions give the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from vllm_fleet.mirror import MirrorError
from vllm_fleet.mirror._util import ensure_commands, run
from vllm_fleet.project.digest import tree_files, update_with_files
from vllm_fleet.project.paths import project_root

# 2025-10-01T00:00:00Z: a fixed timestamp for every file and ar member (bump with the data).
DEFAULT_SOURCE_DATE_EPOCH = 1759276800
STANDIN_MARKER = "vllm-fleet lab stand-in: NOT the NVIDIA"
SCRIPT_NAMES = ("preinst", "postinst", "prerm", "postrm")
_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_VERSION_RE = re.compile(r"^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~]*(?:-[A-Za-z0-9.+~]+)?$")


def definitions_dir() -> Path:
    return project_root() / "tools" / "standin_debs"


# The stand-ins of NVIDIA's Ubuntu repositories (Ubuntu names and revisions), one tree per Ubuntu release.
UBUNTU_DEFINITIONS = "packages.ubuntu.yaml"


# ---------------------------------------------------------------- the YAML schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileDef(_Strict):
    path: str
    mode: str = "0644"
    source: str | None = None
    content: str | None = None
    conffile: bool = False
    vars: dict[str, str] = Field(default_factory=dict)

    @field_validator("mode")
    @classmethod
    def _octal(cls, v: str) -> str:
        int(v, 8)
        return v


class ScriptDef(_Strict):
    source: str | None = None
    content: str | None = None
    vars: dict[str, str] = Field(default_factory=dict)


class PackageDef(_Strict):
    name: str
    version: str | None = None
    per_driver: bool = False
    architecture: Literal["amd64", "all"] = "amd64"
    section: str = "NVIDIA"
    priority: str = "optional"
    summary: str
    depends: list[str] = Field(default_factory=list)
    provides: list[str] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    replaces: list[str] = Field(default_factory=list)
    breaks: list[str] = Field(default_factory=list)
    files: list[FileDef] = Field(default_factory=list)
    scripts: dict[Literal["preinst", "postinst", "prerm", "postrm"], ScriptDef] = Field(default_factory=dict)


class DriverVersionDef(_Strict):
    version: str
    debian_revision: str = "1"
    cuda_version: str


class Definitions(_Strict):
    schema_: int = Field(alias="schema")
    maintainer: str
    homepage: str | None = None
    standin_note: str
    source_date_epoch: int = DEFAULT_SOURCE_DATE_EPOCH
    variables: dict[str, str] = Field(default_factory=dict)
    driver_versions: list[DriverVersionDef]
    packages: list[PackageDef]


# ---------------------------------------------------------------- expanded packages


@dataclass(frozen=True)
class StandinFile:
    path: str  # absolute path on the target host
    mode: int
    content: bytes
    conffile: bool = False


@dataclass(frozen=True)
class StandinPackage:
    name: str
    version: str
    architecture: str
    section: str
    priority: str
    maintainer: str
    summary: str
    long_description: str
    homepage: str | None = None
    depends: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()
    breaks: tuple[str, ...] = ()
    files: tuple[StandinFile, ...] = ()
    scripts: tuple[tuple[str, bytes], ...] = field(default=())

    @property
    def filename(self) -> str:
        """``name_version_arch.deb`` (an epoch's colon is dropped, as Debian tools do)."""
        version = self.version.split(":", 1)[-1]
        return f"{self.name}_{version}_{self.architecture}.deb"

    def control(self) -> str:
        """The ``DEBIAN/control`` text (pure)."""
        installed_kib = max(1, (sum(len(f.content) for f in self.files) + 1023) // 1024)
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            f"Architecture: {self.architecture}",
            f"Maintainer: {self.maintainer}",
            f"Installed-Size: {installed_kib}",
        ]
        for key, values in (
            ("Depends", self.depends),
            ("Provides", self.provides),
            ("Conflicts", self.conflicts),
            ("Breaks", self.breaks),
            ("Replaces", self.replaces),
        ):
            if values:
                lines.append(f"{key}: {', '.join(values)}")
        lines += [f"Section: {self.section}", f"Priority: {self.priority}"]
        if self.homepage:
            lines.append(f"Homepage: {self.homepage}")
        lines.append(f"Description: {self.summary}")
        for para in self.long_description.strip().split("\n\n"):
            if len(lines) and lines[-1].startswith(" "):
                lines.append(" .")
            lines += [f" {line}" for line in textwrap.wrap(para, 79)]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class StandinSet:
    """Everything the definitions describe, expanded: what the apt repository will carry."""

    packages: tuple[StandinPackage, ...]
    source_date_epoch: int
    driver_versions: tuple[str, ...]
    digest: str  # sha256 over the definitions file and every file under files/

    def by_name(self, name: str) -> list[StandinPackage]:
        return [p for p in self.packages if p.name == name]


def substitute(text: str, values: Mapping[str, str], *, where: str) -> str:
    """Replace every ``@NAME@``; an unknown name is an error (a typo must not ship)."""

    def repl(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in values:
            raise MirrorError(f"{where}: unknown placeholder @{key}@ (known: {', '.join(sorted(values))})")
        return values[key]

    return _PLACEHOLDER.sub(repl, text)


def _read_source(base: Path, source: str | None, content: str | None, *, where: str) -> str:
    if (source is None) == (content is None):
        raise MirrorError(f"{where}: give exactly one of `source:` or `content:`")
    if source is not None:
        path = (base / "files" / source).resolve()
        if not path.is_relative_to((base / "files").resolve()) or not path.is_file():
            raise MirrorError(f"{where}: no file files/{source} under {base}")
        return path.read_text(encoding="utf-8")
    assert content is not None
    return content


def definitions_digest(base: Path) -> str:
    """sha256 over packages*.yaml and files/* (names + bytes): the apt repository's input hash."""
    digest = hashlib.sha256()
    update_with_files(digest, base, [*sorted(base.glob("packages*.yaml")), *tree_files(base / "files")])
    return digest.hexdigest()


def load_definitions(base: Path | None = None, name: str = "packages.yaml") -> StandinSet:
    """Read and expand the definitions ``base/name`` (pure apart from reading ``base``)."""
    base = definitions_dir() if base is None else base
    raw = yaml.safe_load((base / name).read_text(encoding="utf-8"))
    defs = Definitions.model_validate(raw)
    if defs.schema_ != 1:
        raise MirrorError(f"{base / name}: unsupported schema {defs.schema_}")
    common = dict(defs.variables)
    # Names of all per-driver packages (for the pinning files), computed with any driver version.
    per_driver_names: list[str] = []
    drivers: list[dict[str, str]] = []
    for dv in defs.driver_versions:
        drivers.append(
            {
                **common,
                "DRIVER_VERSION": dv.version,
                "DRIVER_DEB_VERSION": f"{dv.version}-{dv.debian_revision}",
                "DRIVER_CUDA_VERSION": dv.cuda_version,
            }
        )
    if drivers:
        for pdef in defs.packages:
            if pdef.per_driver and not pdef.name.startswith("nvidia-driver-pinning-"):
                per_driver_names.append(substitute(pdef.name, drivers[0], where=pdef.name))
    packages: list[StandinPackage] = []
    for pdef in defs.packages:
        contexts = drivers if pdef.per_driver else [dict(common)]
        for ctx in contexts:
            ctx = {**ctx, "DRIVER_PACKAGES": " ".join(per_driver_names)}
            packages.append(_expand(base, defs, pdef, ctx))
    _check(packages)
    return StandinSet(
        packages=tuple(sorted(packages, key=lambda p: (p.name, p.version))),
        source_date_epoch=defs.source_date_epoch,
        driver_versions=tuple(d.version for d in defs.driver_versions),
        digest=definitions_digest(base),
    )


def _expand(base: Path, defs: Definitions, pdef: PackageDef, ctx: dict[str, str]) -> StandinPackage:
    name = substitute(pdef.name, ctx, where="package name")
    where = f"package {name}"
    if pdef.version is not None:
        version = substitute(pdef.version, ctx, where=where)
    elif pdef.per_driver:
        version = ctx["DRIVER_DEB_VERSION"]
    else:
        raise MirrorError(f"{where}: needs `version:` (or `per_driver: true`)")
    ctx = {**ctx, "PACKAGE": name, "PACKAGE_VERSION": version}

    def sub_all(values: Iterable[str]) -> tuple[str, ...]:
        return tuple(substitute(v, ctx, where=where) for v in values)

    files = []
    for fdef in pdef.files:
        fctx = {**ctx, **{k: substitute(v, ctx, where=where) for k, v in fdef.vars.items()}}
        text = _read_source(base, fdef.source, fdef.content, where=f"{where} file {fdef.path}")
        files.append(
            StandinFile(
                path=substitute(fdef.path, fctx, where=where),
                mode=int(fdef.mode, 8),
                content=substitute(text, fctx, where=f"{where} file {fdef.path}").encode(),
                conffile=fdef.conffile,
            )
        )
    scripts = []
    for sname, sdef in sorted(pdef.scripts.items()):
        sctx = {**ctx, **{k: substitute(v, ctx, where=where) for k, v in sdef.vars.items()}}
        text = _read_source(base, sdef.source, sdef.content, where=f"{where} {sname}")
        scripts.append((sname, substitute(text, sctx, where=f"{where} {sname}").encode()))
    return StandinPackage(
        name=name,
        version=version,
        architecture=pdef.architecture,
        section=pdef.section,
        priority=pdef.priority,
        maintainer=defs.maintainer,
        summary=substitute(pdef.summary, ctx, where=where),
        long_description=defs.standin_note,
        homepage=defs.homepage,
        depends=sub_all(pdef.depends),
        provides=sub_all(pdef.provides),
        conflicts=sub_all(pdef.conflicts),
        replaces=sub_all(pdef.replaces),
        breaks=sub_all(pdef.breaks),
        files=tuple(sorted(files, key=lambda f: f.path)),
        scripts=tuple(scripts),
    )


def relation_names(relations: Iterable[str]) -> list[str]:
    """Package names mentioned in Depends-style relations (alternatives flattened, pure)."""
    names = []
    for rel in relations:
        for alt in rel.split("|"):
            names.append(alt.strip().split(" ", 1)[0].split("(", 1)[0].split(":", 1)[0])
    return names


def unresolved_dependencies(packages: Sequence[StandinPackage]) -> list[str]:
    """``pkg -> dep`` for each Depends name that no package in the set is or provides (pure)."""
    known = {p.name for p in packages} | {n for p in packages for n in relation_names(p.provides)}
    return [f"{p.name} -> {d}" for p in packages for d in relation_names(p.depends) if d not in known]


def _check(packages: Sequence[StandinPackage]) -> None:
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for p in packages:
        if not _NAME_RE.match(p.name):
            problems.append(f"invalid package name {p.name!r}")
        if not _VERSION_RE.match(p.version):
            problems.append(f"{p.name}: invalid version {p.version!r}")
        if (p.name, p.version) in seen:
            problems.append(f"{p.name} {p.version} defined twice")
        seen.add((p.name, p.version))
        if not p.summary.startswith(STANDIN_MARKER):
            problems.append(f"{p.name}: summary must start with {STANDIN_MARKER!r}")
        for f in p.files:
            if not f.path.startswith("/") or ".." in f.path.split("/"):
                problems.append(f"{p.name}: bad file path {f.path!r}")
    problems += [f"unresolved dependency {u}" for u in unresolved_dependencies(packages)]
    if problems:
        raise MirrorError("stand-in package definitions are invalid:\n  " + "\n  ".join(problems))


# ---------------------------------------------------------------- building


def build_deb(pkg: StandinPackage, out_dir: Path, *, source_date_epoch: int = DEFAULT_SOURCE_DATE_EPOCH) -> Path:
    """Build one ``.deb`` into ``out_dir`` with ``dpkg-deb --build`` (reproducibly); return its path."""
    ensure_commands({"dpkg-deb": "dpkg"})
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="standin-", dir=out_dir) as tmp:
        stage = Path(tmp) / "root"
        debian = stage / "DEBIAN"
        debian.mkdir(parents=True)
        md5 = []
        for f in pkg.files:
            dest = stage / f.path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(f.content)
            dest.chmod(f.mode)
            md5.append(f"{hashlib.md5(f.content).hexdigest()}  {f.path.lstrip('/')}")  # noqa: S324 - dpkg's format
        (debian / "control").write_text(pkg.control(), encoding="utf-8")
        if md5:
            (debian / "md5sums").write_text("\n".join(sorted(md5, key=lambda x: x[34:])) + "\n")
        conffiles = sorted(f.path for f in pkg.files if f.conffile)
        if conffiles:
            (debian / "conffiles").write_text("\n".join(conffiles) + "\n")
        for name, body in pkg.scripts:
            script = debian / name
            script.write_bytes(body)
            script.chmod(0o755)
        for p in [stage, *stage.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
            os.utime(p, (source_date_epoch, source_date_epoch), follow_symlinks=False)
        target = out_dir / pkg.filename
        run(
            ["dpkg-deb", "--root-owner-group", "-Zxz", "--build", stage, target],
            env={"SOURCE_DATE_EPOCH": str(source_date_epoch), "TZ": "UTC", "LC_ALL": "C.UTF-8"},
        )
    return target


def build_all(standins: StandinSet, out_dir: Path) -> list[Path]:
    """Build every stand-in package into ``out_dir``; return the ``.deb`` paths (sorted)."""
    return sorted(build_deb(p, out_dir, source_date_epoch=standins.source_date_epoch) for p in standins.packages)
