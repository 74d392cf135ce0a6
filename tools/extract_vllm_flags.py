#!/usr/bin/env python3
"""Extract the `vllm serve` argument table from real vLLM releases on PyPI.

For every vLLM release in a version range this script downloads the release
artefact from PyPI (the sdist; the x86_64 wheel when a release has no sdist),
caches it outside the repository, and reads the Python source *statically*
(``ast``; vLLM is never imported, no CUDA needed).  Starting from
``vllm/entrypoints/cli/serve.py`` (``ServeSubcommand.subparser_init``) it
abstractly interprets the argparse-building code -- ``make_arg_parser``,
``FrontendArgs.add_cli_args``, ``EngineArgs.add_cli_args``,
``AsyncEngineArgs.add_cli_args`` -- including the dataclass-driven
``get_kwargs(SomeConfig)`` helper of newer releases, whose per-field rules are
re-implemented here with the feature switches detected in each release's own
source.  The result is written to ``vllm_fleet/vllm/data/engine_args.json``.

Usage::

    python3 tools/extract_vllm_flags.py            # default range 0.8.2..0.33.0
    python3 tools/extract_vllm_flags.py --minors-only --max 0.20.0

Cache: ``${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}/vllm-src/``
(``dist/`` holds the downloaded sdists, ``py/`` one zip of the ``vllm/**.py``
sources per version, which is all the analysis reads).

Dependencies: the standard library only (PyYAML is not needed).
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import io
import itertools
import json
import os
import re
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

PYPI_JSON = os.environ.get("VLLM_FLEET_PYPI_JSON", "https://pypi.org/pypi/vllm/json")
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "vllm_fleet" / "vllm" / "data" / "engine_args.json"
DEFAULT_MIN = "0.8.2"
DEFAULT_MAX = "0.33.0"
USER_AGENT = "vllm-fleet-extract/1 (+tools/extract_vllm_flags.py)"


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
        zf.writestr(".source.json", json.dumps({"filename": art.filename, "sha256": art.sha256}))
    tmp.replace(out)
    return out


# --------------------------------------------------------------------------
# Static project model
# --------------------------------------------------------------------------


class _Unknown:
    _inst: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


@dataclass(eq=False)
class Module:
    name: str
    path: str
    tree: ast.Module
    is_pkg: bool
    bindings: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    source: str = ""


@dataclass(eq=False)
class ModuleRef:
    mod: Module


@dataclass(eq=False)
class ClassRef:
    mod: Module
    node: ast.ClassDef

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(eq=False)
class FuncRef:
    mod: Module
    node: ast.FunctionDef | ast.AsyncFunctionDef
    owner: ClassRef | None = None
    bound: Any = None
    has_bound: bool = False


@dataclass(frozen=True)
class Ext:
    """Something from outside the vllm package (``argparse.X``, ``json.loads``)."""

    qual: str


@dataclass(frozen=True)
class TypeFn:
    """Normalised argparse ``type=``: int, float, str, bool or json."""

    name: str


@dataclass(frozen=True)
class ActionRef:
    name: str


@dataclass(frozen=True)
class EnumMember:
    cls: str
    name: str
    value: Any


@dataclass(frozen=True)
class LiteralT:
    values: tuple[Any, ...]


@dataclass(eq=False)
class Parser:
    sink: list[dict[str, Any]]


@dataclass(eq=False)
class SuperRef:
    cls: ClassRef
    bound: Any


@dataclass(eq=False)
class BoundMethod:
    obj: Any
    name: str


@dataclass(eq=False)
class Builtin:
    name: str


@dataclass(eq=False)
class Lambda:
    node: ast.Lambda


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


BUILTIN_NAMES = {
    "list", "dict", "tuple", "set", "frozenset", "sorted", "len", "str", "int", "float",
    "bool", "isinstance", "getattr", "hasattr", "super", "type", "range", "enumerate",
    "zip", "any", "all", "min", "max", "reversed", "print", "repr", "object",
}  # fmt: skip

TYPING_PASSTHRU = {
    "Optional", "Union", "Literal", "Annotated", "List", "Dict", "Tuple", "Set",
    "Any", "Sequence", "Mapping", "Callable", "Type", "TypeAlias", "ClassVar",
    "InitVar", "Iterable", "MutableMapping", "MutableSequence", "FrozenSet",
}  # fmt: skip


class Project:
    """Lazily parsed view of one release's ``vllm/**.py`` sources."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.modules: dict[str, Module | None] = {}
        self.global_cache: dict[tuple[str, str], Any] = {}
        self.in_progress: set[tuple[str, str]] = set()

    def module(self, name: str) -> Module | None:
        if name in self.modules:
            return self.modules[name]
        base = name.replace(".", "/")
        mod: Module | None = None
        for path, is_pkg in ((base + ".py", False), (base + "/__init__.py", True)):
            if path in self.files:
                src = self.files[path]
                try:
                    tree = ast.parse(src)
                except SyntaxError:
                    tree = ast.parse("")
                mod = Module(name, path, tree, is_pkg, source=src)
                self._index(mod)
                break
        self.modules[name] = mod
        return mod

    def is_package_prefix(self, name: str) -> bool:
        prefix = name.replace(".", "/") + "/"
        return any(p.startswith(prefix) for p in self.files)

    def _abs(self, mod: Module, level: int, target: str | None) -> str:
        if level == 0:
            return target or ""
        parts = mod.name.split(".")
        if not mod.is_pkg:
            parts = parts[:-1]
        if level > 1:
            parts = parts[: len(parts) - (level - 1)]
        base = ".".join(parts)
        return f"{base}.{target}" if target else base

    def _index(self, mod: Module) -> None:
        def visit(stmts: list[ast.stmt]) -> None:
            for st in stmts:
                self._bind_stmt(mod, st, mod.bindings, mod.star_imports)
                if isinstance(st, ast.If):
                    visit(st.body)
                    visit(st.orelse)
                elif isinstance(st, ast.Try):
                    visit(st.body)
                    for h in st.handlers:
                        visit(h.body)
                    visit(st.orelse)
                elif isinstance(st, ast.With):
                    visit(st.body)

        visit(mod.tree.body)

    def _bind_stmt(
        self,
        mod: Module,
        st: ast.stmt,
        out: dict[str, tuple[Any, ...]],
        stars: list[str] | None,
    ) -> None:
        def put(name: str, val: tuple[Any, ...]) -> None:
            out.setdefault(name, val)  # first binding wins (try/except fallbacks)

        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            put(st.name, ("def", st))
        elif isinstance(st, ast.ClassDef):
            put(st.name, ("class", st))
        elif isinstance(st, ast.Assign):
            for t in st.targets:
                if isinstance(t, ast.Name):
                    put(t.id, ("assign", st.value))
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            if st.value is not None:
                put(st.target.id, ("assign", st.value))
        elif isinstance(st, ast.ImportFrom):
            src = self._abs(mod, st.level, st.module)
            for a in st.names:
                if a.name == "*":
                    if stars is not None:
                        stars.append(src)
                    continue
                put(a.asname or a.name, ("from", src, a.name))
        elif isinstance(st, ast.Import):
            for a in st.names:
                if a.asname:
                    put(a.asname, ("import", a.name))
                else:
                    top = a.name.split(".")[0]
                    put(top, ("import", top))

    # -- name resolution -------------------------------------------------

    def module_value(self, name: str) -> Any:
        mod = self.module(name)
        if mod is not None:
            return ModuleRef(mod)
        if name.startswith("vllm") and self.is_package_prefix(name):
            # namespace-ish package without __init__
            fake = Module(name, name.replace(".", "/"), ast.parse(""), True)
            self.modules[name] = fake
            return ModuleRef(fake)
        return Ext(name)

    def import_from(self, src: str, name: str) -> Any:
        if src == "vllm" or src.startswith("vllm."):
            mod = self.module(src)
            if mod is not None:
                val = self.resolve_global(mod, name)
                if val is not UNKNOWN:
                    return val
            sub = f"{src}.{name}"
            if self.module(sub) is not None or self.is_package_prefix(sub):
                return self.module_value(sub)
            return UNKNOWN
        return Ext(f"{src}.{name}")

    def resolve_global(self, mod: Module, name: str) -> Any:
        key = (mod.name, name)
        if key in self.global_cache:
            return self.global_cache[key]
        if key in self.in_progress:
            return UNKNOWN
        self.in_progress.add(key)
        try:
            val = self._resolve_global(mod, name)
        finally:
            self.in_progress.discard(key)
        self.global_cache[key] = val
        return val

    def _resolve_global(self, mod: Module, name: str) -> Any:
        b = mod.bindings.get(name)
        if b is None:
            for star in mod.star_imports:
                smod = self.module(star)
                if smod is not None:
                    val = self.resolve_global(smod, name)
                    if val is not UNKNOWN:
                        return val
            if mod.is_pkg:
                sub = f"{mod.name}.{name}"
                if self.module(sub) is not None:
                    return self.module_value(sub)
            return UNKNOWN
        kind = b[0]
        if kind == "def":
            return FuncRef(mod, b[1])
        if kind == "class":
            return ClassRef(mod, b[1])
        if kind == "from":
            return self.import_from(b[1], b[2])
        if kind == "import":
            return self.module_value(b[1])
        if kind == "assign":
            interp = Interp(self, features=None)
            return interp.eval(b[1], Frame(mod, {}, None, 0))
        return UNKNOWN


# --------------------------------------------------------------------------
# Class helpers (dataclass fields, enums, MRO)
# --------------------------------------------------------------------------


def _decorator_names(node: ast.ClassDef) -> list[str]:
    names = []
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute):
            names.append(target.attr)
        elif isinstance(target, ast.Name):
            names.append(target.id)
    return names


def class_bases(project: Project, cls: ClassRef) -> list[Any]:
    interp = Interp(project, features=None)
    # generic bases (``dict[str, X]``, ``Generic[T]``): look at the origin
    nodes = [b.value if isinstance(b, ast.Subscript) else b for b in cls.node.bases]
    return [interp.eval(b, Frame(cls.mod, {}, None, 0)) for b in nodes]


def is_dataclass_cls(project: Project, cls: ClassRef, depth: int = 0) -> bool:
    if depth > 10:
        return False
    if {"dataclass", "config"} & set(_decorator_names(cls.node)):
        return True
    bases = class_bases(project, cls)
    return any(isinstance(b, ClassRef) and is_dataclass_cls(project, b, depth + 1) for b in bases)


def is_enum_cls(project: Project, cls: ClassRef, depth: int = 0) -> bool:
    if depth > 10:
        return False
    for b in class_bases(project, cls):
        if isinstance(b, Ext) and b.qual.split(".")[-1] in {"Enum", "IntEnum", "StrEnum", "Flag"}:
            return True
        if isinstance(b, ClassRef) and is_enum_cls(project, b, depth + 1):
            return True
    return False


def is_dict_subclass(project: Project, cls: ClassRef, depth: int = 0) -> bool:
    if depth > 10:
        return False
    for b in class_bases(project, cls):
        if isinstance(b, Builtin) and b.name == "dict":
            return True
        if isinstance(b, Ext) and b.qual.split(".")[-1] in {"TypedDict"}:
            return False
        if isinstance(b, ClassRef) and is_dict_subclass(project, b, depth + 1):
            return True
    return False


def mro(project: Project, cls: ClassRef, depth: int = 0) -> list[ClassRef]:
    out = [cls]
    if depth > 10:
        return out
    for b in class_bases(project, cls):
        if isinstance(b, ClassRef):
            for c in mro(project, b, depth + 1):
                if all(c.node is not o.node for o in out):
                    out.append(c)
    return out


def enum_members(cls: ClassRef, project: Project) -> list[EnumMember]:
    members: list[EnumMember] = []
    interp = Interp(project, features=None)
    for st in cls.node.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            name = st.targets[0].id
            if name.startswith("_"):
                continue
            val = interp.eval(st.value, Frame(cls.mod, {}, None, 0))
            if isinstance(val, (str, int, float)) or val is UNKNOWN:
                members.append(EnumMember(cls.name, name, val if val is not UNKNOWN else name.lower()))
    return members


@dataclass
class FieldInfo:
    name: str
    annotation: ast.expr
    mod: Module
    doc: str


def dataclass_fields(project: Project, cls: ClassRef) -> list[FieldInfo]:
    ordered: dict[str, FieldInfo] = {}
    for c in reversed(mro(project, cls)):
        if not is_dataclass_cls(project, c):
            continue
        body = c.node.body
        for i, st in enumerate(body):
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            ann_src = ast.unparse(st.annotation)
            if re.match(r"^(typing\.)?(ClassVar|InitVar|KW_ONLY)\b", ann_src) or ann_src == "KW_ONLY":
                continue
            doc = ""
            if i + 1 < len(body):
                nxt = body[i + 1]
                if (
                    isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)
                ):
                    doc = nxt.value.value
            name = st.target.id
            info = FieldInfo(name, st.annotation, c.mod, doc)
            if name in ordered:
                ordered[name] = info  # keeps base-class position, like dataclasses
            else:
                ordered[name] = info
    return list(ordered.values())


# --------------------------------------------------------------------------
# Type hints -> argparse kwargs (re-implementation of vLLM's get_kwargs)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Hint:
    kind: str  # bool int float str none dict list tuple set literal dataclass other any
    args: tuple[Any, ...] = ()
    name: str = ""


class HintEval:
    def __init__(self, project: Project) -> None:
        self.project = project

    def atoms(self, node: ast.expr | None, mod: Module, depth: int = 0) -> list[Hint]:
        if node is None or depth > 25:
            return [Hint("any")]
        if isinstance(node, ast.Constant):
            if node.value is None:
                return [Hint("none")]
            if isinstance(node.value, str):
                try:
                    sub = ast.parse(node.value, mode="eval").body
                except SyntaxError:
                    return [Hint("any")]
                return self.atoms(sub, mod, depth + 1)
            if node.value is Ellipsis:
                return [Hint("ellipsis")]
            return [Hint("any")]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.atoms(node.left, mod, depth + 1) + self.atoms(node.right, mod, depth + 1)
        if isinstance(node, ast.Subscript):
            base = self._name_of(node.value, mod)
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if base in {"Optional"}:
                return [*self.atoms(elts[0], mod, depth + 1), Hint("none")]
            if base in {"Union"}:
                return [a for e in elts for a in self.atoms(e, mod, depth + 1)]
            if base in {"Annotated"}:
                return self.atoms(elts[0], mod, depth + 1)
            if base in {"Literal"}:
                vals: list[Any] = []
                for e in elts:
                    vals.extend(self._literal_values(e, mod, depth))
                return [Hint("literal", tuple(vals))]
            if base in {"list", "List", "Sequence", "MutableSequence", "Iterable"}:
                return [Hint("list", (tuple(self.atoms(elts[0], mod, depth + 1)),))]
            if base in {"set", "Set", "frozenset", "FrozenSet"}:
                return [Hint("set", (tuple(self.atoms(elts[0], mod, depth + 1)),))]
            if base in {"tuple", "Tuple"}:
                return [Hint("tuple", tuple(tuple(self.atoms(e, mod, depth + 1)) for e in elts))]
            if base in {"dict", "Dict", "Mapping", "MutableMapping", "defaultdict", "OrderedDict"}:
                return [Hint("dict")]
            if base in {"type", "Type", "Callable"}:
                return [Hint("other", name=base)]
            # pydantic's SkipValidation[X] is Annotated[X, SkipValidation()]
            if base in {"ClassVar", "InitVar", "Final", "SkipValidation", "Required", "NotRequired"}:
                return self.atoms(elts[0], mod, depth + 1)
            resolved = self._resolve(node.value, mod)
            return self._from_value(resolved, depth)
        if isinstance(node, (ast.Name, ast.Attribute)):
            nm = self._name_of(node, mod)
            simple = {
                "bool": "bool", "int": "int", "float": "float", "str": "str", "dict": "dict",
                "list": "list", "tuple": "tuple", "set": "set", "None": "none", "NoneType": "none",
                "Any": "any", "bytes": "other", "object": "other",
            }  # fmt: skip
            if nm in simple:
                kind = simple[nm]
                if kind in {"list", "set"}:
                    return [Hint(kind, ((Hint("any"),),))]
                if kind == "tuple":
                    return [Hint("tuple", ((Hint("any"),), (Hint("ellipsis"),)))]
                return [Hint(kind)]
            resolved = self._resolve(node, mod)
            return self._from_value(resolved, depth, nm)
        return [Hint("any")]

    def _from_value(self, val: Any, depth: int, nm: str = "") -> list[Hint]:
        if isinstance(val, ClassRef):
            if is_dataclass_cls(self.project, val):
                return [Hint("dataclass", name=val.name)]
            if is_dict_subclass(self.project, val):
                return [Hint("dictsub", name=val.name)]
            return [Hint("other", name=val.name)]
        if isinstance(val, _AliasExpr):
            return self.atoms(val.node, val.mod, depth + 1)
        if isinstance(val, LiteralT):
            return [Hint("literal", val.values)]
        if isinstance(val, Builtin):
            return self.atoms(ast.Name(id=val.name), val_mod_dummy(self.project), depth + 1)
        if isinstance(val, Ext):
            last = val.qual.split(".")[-1]
            if last in {"Any"}:
                return [Hint("any")]
            return [Hint("other", name=last)]
        return [Hint("other", name=nm or "?")]

    def _literal_values(self, e: ast.expr, mod: Module, depth: int) -> list[Any]:
        if isinstance(e, ast.Constant):
            return [e.value]
        inner = self.atoms(e, mod, depth + 1)
        if len(inner) == 1 and inner[0].kind == "literal":
            return list(inner[0].args)
        val = Interp(self.project, features=None).eval(e, Frame(mod, {}, None, 0))
        if isinstance(val, EnumMember):
            return [val.value]
        return [ast.unparse(e)]

    def _name_of(self, node: ast.expr, mod: Module) -> str:
        if isinstance(node, ast.Name):
            b = mod.bindings.get(node.id)
            if b is not None and b[0] == "from" and not b[1].startswith("vllm"):
                return str(b[2])
            return node.id
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in {
                "typing",
                "t",
                "typing_extensions",
                "collections",
                "abc",
            }:
                return node.attr
            if isinstance(node.value, ast.Attribute) and node.value.attr == "abc":
                return node.attr
            return "?" + node.attr
        return "?"

    def _resolve(self, node: ast.expr, mod: Module) -> Any:
        """Resolve a name in a type hint; type aliases come back as _AliasExpr."""
        if isinstance(node, ast.Name):
            return self._resolve_alias(mod, node.id)
        if isinstance(node, ast.Attribute):
            base = Interp(self.project, features=None).eval(node.value, Frame(mod, {}, None, 0))
            if isinstance(base, ModuleRef):
                return self._resolve_alias(base.mod, node.attr)
            if isinstance(base, Ext):
                return Ext(f"{base.qual}.{node.attr}")
        return UNKNOWN

    def _resolve_alias(self, mod: Module, name: str, depth: int = 0) -> Any:
        if depth > 15:
            return UNKNOWN
        b = mod.bindings.get(name)
        if b is None:
            for star in mod.star_imports:
                smod = self.project.module(star)
                if smod is not None and (name in smod.bindings or smod.star_imports):
                    val = self._resolve_alias(smod, name, depth + 1)
                    if val is not UNKNOWN:
                        return val
            return self.project.resolve_global(mod, name)
        if b[0] == "assign":
            return _AliasExpr(b[1], mod)
        if b[0] == "from" and (b[1] == "vllm" or b[1].startswith("vllm.")):
            smod = self.project.module(b[1])
            if smod is not None:
                return self._resolve_alias(smod, b[2], depth + 1)
            return UNKNOWN
        if b[0] == "from":
            return Ext(f"{b[1]}.{b[2]}")
        return self.project.resolve_global(mod, name)


@dataclass(eq=False)
class _AliasExpr:
    node: ast.expr
    mod: Module


def val_mod_dummy(project: Project) -> Module:
    return Module("<builtins>", "<builtins>", ast.parse(""), False)


@dataclass(frozen=True)
class KwargsFeatures:
    """Which rules this release's ``get_kwargs`` implements."""

    present: bool = False
    legacy_084: bool = False  # 0.8.4: no bool action, Optional -> nullable_str
    bool_action: bool = True
    dataclass_json: bool = False
    metavar_literal_with_str: bool = False
    bool_str_none_optional: bool = False
    set_collection: bool = False
    dict_subclass: bool = False
    flatten_nested_union: bool = False

    @staticmethod
    def detect(project: Project) -> KwargsFeatures:
        mod = project.module("vllm.engine.arg_utils")
        if mod is None:
            return KwargsFeatures()
        # get_kwargs and its helpers (in 0.8.4 get_kwargs is nested in add_cli_args)
        helpers = {
            "get_kwargs", "_compute_kwargs", "literal_to_kwargs", "collection_to_kwargs",
            "get_type_hints", "is_dict_subclass", "contains_type", "is_type",
        }  # fmt: skip
        src = "\n".join(
            ast.unparse(st) for st in ast.walk(mod.tree) if isinstance(st, ast.FunctionDef) and st.name in helpers
        )
        if "def get_kwargs" not in src:
            return KwargsFeatures()
        return KwargsFeatures(
            present=True,
            legacy_084="is_optional(field.type)" in src,
            bool_action="BooleanOptionalAction" in src,
            dataclass_json="is_dataclass" in src,
            metavar_literal_with_str="'metavar' if contains_type(type_hints, str)" in src,
            bool_str_none_optional="{bool, str, type(None)}" in src,
            set_collection="contains_type(type_hints, set)" in src,
            dict_subclass="is_dict_subclass" in src,
            flatten_nested_union="get_type_hints(arg)" in src or "get_type_hints(args[0])" in src,
        )


def _elem_type(atoms: Iterable[Hint]) -> tuple[Any, list[Any] | None]:
    kinds = [a for a in atoms if a.kind not in {"none", "ellipsis"}]
    lits = [a for a in kinds if a.kind == "literal"]
    if lits:
        vals = list(lits[0].args)
        return TypeFn(_py_type_name(vals[0]) if vals else "str"), sorted(vals, key=_sort_key)
    names = {a.kind for a in kinds}
    if "str" in names or len(names) > 1:
        return TypeFn("str"), None
    for k in ("int", "float", "bool"):
        if k in names:
            return TypeFn(k), None
    if "dict" in names or "dataclass" in names:
        return TypeFn("json"), None
    return TypeFn("str"), None


def _py_type_name(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return "str"


def _sort_key(v: Any) -> tuple[str, Any]:
    return (type(v).__name__, v)


def compute_field_kwargs(atoms: list[Hint], name: str, doc: str, feats: KwargsFeatures) -> dict[str, Any]:
    kw: dict[str, Any] = {"default": UNKNOWN, "help": doc.strip()}
    kinds = {a.kind for a in atoms}
    if feats.dict_subclass:
        kinds = {"dict" if k == "dictsub" else k for k in kinds}
    else:
        kinds = {"other" if k == "dictsub" else k for k in kinds}
    non_builtin = bool(kinds & {"other", "dataclass", "dictsub"})
    if feats.legacy_084:
        if kinds == {"bool"}:
            return kw
        if "none" in kinds or "str" in kinds:
            kw["type"] = TypeFn("str")
            return kw
        et, _ = _elem_type(atoms)
        kw["type"] = et
        return kw
    if feats.dataclass_json and "dataclass" in kinds:
        kw["type"] = TypeFn("json")
    elif feats.bool_str_none_optional and kinds == {"bool", "str", "none"}:
        kw["type"] = TypeFn("str")
        kw["nargs"] = "?"
    elif "bool" in kinds:
        if feats.bool_action:
            kw["action"] = ActionRef("BooleanOptionalAction")
    elif "literal" in kinds:
        lit = next(a for a in atoms if a.kind == "literal")
        vals = sorted(lit.args, key=_sort_key)
        kw["type"] = TypeFn(_py_type_name(vals[0]) if vals else "str")
        if feats.metavar_literal_with_str and "str" in kinds:
            kw["metavar"] = vals
        else:
            kw["choices"] = vals
    elif "tuple" in kinds:
        tup = next(a for a in atoms if a.kind == "tuple")
        elems = [e for e in tup.args]
        has_ellipsis = any(any(h.kind == "ellipsis" for h in e) for e in elems)
        real = [e for e in elems if not any(h.kind == "ellipsis" for h in e)]
        et, ch = _elem_type(real[0] if real else ())
        kw["type"] = et
        kw["nargs"] = "+" if has_ellipsis else len(real)
        if ch:
            kw["choices"] = ch
    elif "list" in kinds or (feats.set_collection and "set" in kinds):
        coll = next(a for a in atoms if a.kind in {"list", "set"})
        et, ch = _elem_type(coll.args[0])
        kw["type"] = et
        kw["nargs"] = "+"
        if ch:
            kw["choices"] = ch
    elif "int" in kinds:
        kw["type"] = TypeFn("int")
    elif "float" in kinds:
        kw["type"] = TypeFn("float")
    elif "dict" in kinds:
        kw["type"] = TypeFn("json")
    elif "str" in kinds or non_builtin or "any" in kinds or "set" in kinds:
        kw["type"] = TypeFn("str")
    else:
        kw["type"] = TypeFn("str")
    return kw


# --------------------------------------------------------------------------
# Abstract interpreter for the argparse-building code
# --------------------------------------------------------------------------


@dataclass
class Frame:
    mod: Module
    locals: dict[str, Any]
    cls: ClassRef | None
    depth: int
    bound: Any = None


TYPEFN_BY_NAME = {
    "int": "int", "float": "float", "str": "str", "bool": "bool",
    "nullable_str": "str", "human_readable_int": "int", "human_readable_int_or_auto": "int",
    "json.loads": "json", "loads": "json", "union_dict_and_str": "json",
    "nullable_kvs": "str", "parse_dataclass": "json", "check_port": "int",
    "parse_reasoning_parser": "str",
}  # fmt: skip


class Interp:
    MAX_DEPTH = 14

    def __init__(self, project: Project, features: KwargsFeatures | None, warnings: list[str] | None = None) -> None:
        self.project = project
        self.features = features or KwargsFeatures()
        self.warnings = warnings if warnings is not None else []
        self.hints = HintEval(project)

    def warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    # -- statements ----------------------------------------------------

    def exec_block(self, stmts: list[ast.stmt], fr: Frame) -> None:
        for st in stmts:
            self.exec_stmt(st, fr)

    def exec_stmt(self, st: ast.stmt, fr: Frame) -> None:
        if isinstance(st, ast.Expr):
            self.eval(st.value, fr)
        elif isinstance(st, ast.Assign):
            val = self.eval(st.value, fr)
            for t in st.targets:
                self.assign(t, val, fr)
        elif isinstance(st, ast.AnnAssign):
            if st.value is not None:
                self.assign(st.target, self.eval(st.value, fr), fr)
        elif isinstance(st, ast.AugAssign):
            cur = self.eval(st.target, fr)
            rhs = self.eval(st.value, fr)
            self.assign(st.target, self.binop(st.op, cur, rhs), fr)
        elif isinstance(st, ast.Return):
            raise _Return(self.eval(st.value, fr) if st.value is not None else None)
        elif isinstance(st, ast.If):
            cond = self.truth(self.eval(st.test, fr))
            if cond is True:
                self.exec_block(st.body, fr)
            elif cond is False:
                self.exec_block(st.orelse, fr)
            else:
                # unknown condition (sys.argv, platform...): take both branches
                self.exec_block(st.body, fr)
                self.exec_block(st.orelse, fr)
        elif isinstance(st, ast.For):
            it = self.eval(st.iter, fr)
            seq = self.iterate(it)
            if seq is None:
                return
            for item in seq:
                self.assign(st.target, item, fr)
                try:
                    self.exec_block(st.body, fr)
                except _Break:
                    break
                except _Continue:
                    continue
        elif isinstance(st, ast.Break):
            raise _Break()
        elif isinstance(st, ast.Continue):
            raise _Continue()
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            self.exec_block(st.body, fr)
        elif isinstance(st, ast.Try):
            self.exec_block(st.body, fr)
            self.exec_block(st.orelse, fr)
            self.exec_block(st.finalbody, fr)
        elif isinstance(st, ast.Delete):
            for t in st.targets:
                if isinstance(t, ast.Subscript):
                    obj = self.eval(t.value, fr)
                    key = self.eval(t.slice, fr)
                    if isinstance(obj, dict) and is_hashable(key):
                        obj.pop(key, None)
        elif isinstance(st, (ast.Import, ast.ImportFrom)):
            bind: dict[str, tuple[Any, ...]] = {}
            self.project._bind_stmt(fr.mod, st, bind, None)
            for name, b in bind.items():
                if b[0] == "from":
                    fr.locals[name] = self.project.import_from(b[1], b[2])
                elif b[0] == "import":
                    fr.locals[name] = self.project.module_value(b[1])
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fr.locals[st.name] = FuncRef(fr.mod, st)
        # Raise, Assert, Pass, While, Global ...: nothing to do

    def assign(self, target: ast.expr, val: Any, fr: Frame) -> None:
        if isinstance(target, ast.Name):
            fr.locals[target.id] = val
        elif isinstance(target, (ast.Tuple, ast.List)):
            seq = self.iterate(val)
            items = list(seq) if seq is not None else []
            for i, t in enumerate(target.elts):
                self.assign(t, items[i] if i < len(items) else UNKNOWN, fr)
        elif isinstance(target, ast.Subscript):
            obj = self.eval(target.value, fr)
            key = self.eval(target.slice, fr)
            if isinstance(obj, dict) and is_hashable(key) and key is not UNKNOWN:
                obj[key] = val
        # attribute assignment: ignored

    # -- expressions ---------------------------------------------------

    def eval(self, node: ast.expr | None, fr: Frame) -> Any:
        if node is None:
            return None
        try:
            return self._eval(node, fr)
        except (_Return, _Break, _Continue):
            raise
        except RecursionError:
            return UNKNOWN
        except Exception as exc:
            self.warn(f"eval error in {fr.mod.name}:{getattr(node, 'lineno', '?')}: {type(exc).__name__}: {exc}")
            return UNKNOWN

    def _eval(self, node: ast.expr, fr: Frame) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.lookup(node.id, fr)
        if isinstance(node, ast.Attribute):
            return self.getattr(self.eval(node.value, fr), node.attr)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                elif isinstance(v, ast.FormattedValue):
                    x = self.eval(v.value, fr)
                    if not isinstance(x, (str, int, float)):
                        return UNKNOWN
                    parts.append(str(x))
            return "".join(parts)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out: list[Any] = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    seq = self.iterate(self.eval(e.value, fr))
                    if seq is None:
                        return UNKNOWN
                    out.extend(seq)
                else:
                    out.append(self.eval(e, fr))
            if isinstance(node, ast.Tuple):
                return tuple(out)
            if isinstance(node, ast.Set):
                return set(out) if all(is_hashable(x) for x in out) else UNKNOWN
            return out
        if isinstance(node, ast.Dict):
            d: dict[Any, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    sub = self.eval(v, fr)
                    if isinstance(sub, dict):
                        d.update(copy.copy(sub))
                    else:
                        d["__unknown_spread__"] = True
                    continue
                key = self.eval(k, fr)
                if is_hashable(key):
                    d[key] = self.eval(v, fr)
            return d
        if isinstance(node, ast.Subscript):
            obj = self.eval(node.value, fr)
            if isinstance(obj, (Ext, Builtin)):
                last = obj.qual.split(".")[-1] if isinstance(obj, Ext) else obj.name
                if last == "Literal":
                    elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                    vals: list[Any] = []
                    for e in elts:
                        vals.extend(self.hints._literal_values(e, fr.mod, 0))
                    return LiteralT(tuple(vals))
                return _AliasExpr(node, fr.mod)
            key = self.eval(node.slice, fr)
            if isinstance(obj, dict):
                if is_hashable(key) and key in obj:
                    return obj[key]
                if isinstance(key, str) and obj and all(isinstance(v, dict) for v in obj.values()):
                    self.warn(f"missing kwargs key {key!r} ({fr.mod.name}:{node.lineno})")
                return UNKNOWN
            if isinstance(obj, (list, tuple, str)) and isinstance(key, (int, slice)):
                try:
                    return obj[key]
                except IndexError:
                    return UNKNOWN
            return UNKNOWN
        if isinstance(node, ast.Slice):
            lo, hi, st = (self.eval(x, fr) for x in (node.lower, node.upper, node.step))
            if all(x is None or isinstance(x, int) for x in (lo, hi, st)):
                return slice(lo, hi, st)
            return UNKNOWN
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.eval(node.left, fr), self.eval(node.right, fr))
        if isinstance(node, ast.UnaryOp):
            v = self.eval(node.operand, fr)
            if isinstance(node.op, ast.Not):
                t = self.truth(v)
                return UNKNOWN if t is None else (not t)
            if isinstance(node.op, ast.USub) and isinstance(v, (int, float)):
                return -v
            return UNKNOWN
        if isinstance(node, ast.BoolOp):
            vals = [self.truth(self.eval(v, fr)) for v in node.values]
            if isinstance(node.op, ast.And):
                if any(v is False for v in vals):
                    return False
                return True if all(v is True for v in vals) else UNKNOWN
            if any(v is True for v in vals):
                return True
            return False if all(v is False for v in vals) else UNKNOWN
        if isinstance(node, ast.Compare):
            return self.compare(node, fr)
        if isinstance(node, ast.IfExp):
            t = self.truth(self.eval(node.test, fr))
            if t is None:
                return UNKNOWN
            return self.eval(node.body if t else node.orelse, fr)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self.comprehension(node, fr)
        if isinstance(node, ast.Call):
            return self.call_node(node, fr)
        if isinstance(node, ast.Lambda):
            return Lambda(node)
        if isinstance(node, ast.Starred):
            return self.eval(node.value, fr)
        if isinstance(node, ast.NamedExpr):
            v = self.eval(node.value, fr)
            self.assign(node.target, v, fr)
            return v
        return UNKNOWN

    def comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, fr: Frame) -> Any:
        if len(node.generators) != 1:
            return UNKNOWN
        gen = node.generators[0]
        seq = self.iterate(self.eval(gen.iter, fr))
        if seq is None:
            return UNKNOWN
        sub = Frame(fr.mod, dict(fr.locals), fr.cls, fr.depth, fr.bound)
        items: list[Any] = []
        pairs: dict[Any, Any] = {}
        for x in seq:
            self.assign(gen.target, x, sub)
            if any(self.truth(self.eval(c, sub)) is False for c in gen.ifs):
                continue
            if isinstance(node, ast.DictComp):
                k = self.eval(node.key, sub)
                if is_hashable(k):
                    pairs[k] = self.eval(node.value, sub)
            else:
                items.append(self.eval(node.elt, sub))
        if isinstance(node, ast.DictComp):
            return pairs
        if isinstance(node, ast.SetComp):
            return set(items) if all(is_hashable(i) for i in items) else UNKNOWN
        return items

    def compare(self, node: ast.Compare, fr: Frame) -> Any:
        left = self.eval(node.left, fr)
        result: Any = True
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = self.eval(comp, fr)
            if left is UNKNOWN or right is UNKNOWN or isinstance(left, Ext) or isinstance(right, Ext):
                return UNKNOWN
            try:
                if isinstance(op, ast.In):
                    r = left in right
                elif isinstance(op, ast.NotIn):
                    r = left not in right
                elif isinstance(op, (ast.Is, ast.Eq)):
                    r = left is right if isinstance(op, ast.Is) else left == right
                elif isinstance(op, (ast.IsNot, ast.NotEq)):
                    r = left is not right if isinstance(op, ast.IsNot) else left != right
                elif isinstance(op, ast.Lt):
                    r = left < right
                elif isinstance(op, ast.LtE):
                    r = left <= right
                elif isinstance(op, ast.Gt):
                    r = left > right
                elif isinstance(op, ast.GtE):
                    r = left >= right
                else:
                    return UNKNOWN
            except TypeError:
                return UNKNOWN
            if not r:
                result = False
            left = right
        return result

    def binop(self, op: ast.operator, a: Any, b: Any) -> Any:
        if a is UNKNOWN or b is UNKNOWN:
            return UNKNOWN
        try:
            if isinstance(op, ast.Add) and type(a) is type(b) and isinstance(a, (str, int, float, list, tuple)):
                return a + b
            if isinstance(op, ast.BitOr):
                if isinstance(a, dict) and isinstance(b, dict):
                    return {**a, **b}
                if isinstance(a, set) and isinstance(b, set):
                    return a | b
                return UNKNOWN
            if isinstance(op, ast.Mod) and isinstance(a, str):
                return a % b
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
                if isinstance(op, ast.Mult):
                    return a * b
                if isinstance(op, ast.Sub):
                    return a - b
                if isinstance(op, ast.Add):
                    return a + b
        except (TypeError, ValueError):
            return UNKNOWN
        return UNKNOWN

    def truth(self, v: Any) -> bool | None:
        if v is UNKNOWN or isinstance(v, (Ext, BoundMethod)):
            return None
        if isinstance(v, (str, int, float, list, tuple, dict, set)) or v is None:
            return bool(v)
        if isinstance(v, (ClassRef, FuncRef, ModuleRef, Parser)):
            return True
        return None

    def iterate(self, v: Any) -> list[Any] | None:
        if isinstance(v, (list, tuple, set, str)):
            return list(v)
        if isinstance(v, dict):
            return list(v.keys())
        if isinstance(v, LiteralT):
            return None
        if isinstance(v, ClassRef) and is_enum_cls(self.project, v):
            return list(enum_members(v, self.project))
        if isinstance(v, _DictView):
            return list(v.items)
        return None

    def lookup(self, name: str, fr: Frame) -> Any:
        if name in fr.locals:
            return fr.locals[name]
        if name in {"True", "False", "None"}:
            return {"True": True, "False": False, "None": None}[name]
        if name == "__name__":
            return fr.mod.name
        if name in fr.mod.bindings or fr.mod.star_imports:
            val = self.project.resolve_global(fr.mod, name)
            if val is not UNKNOWN or name in fr.mod.bindings:
                return val
        if name in BUILTIN_NAMES:
            return Builtin(name)
        return UNKNOWN

    def getattr(self, obj: Any, attr: str) -> Any:
        if obj is UNKNOWN:
            return UNKNOWN
        if isinstance(obj, ModuleRef):
            if attr in obj.mod.bindings or obj.mod.star_imports:
                v = self.project.resolve_global(obj.mod, attr)
                if v is not UNKNOWN:
                    return v
            sub = f"{obj.mod.name}.{attr}"
            if self.project.module(sub) is not None:
                return self.project.module_value(sub)
            return UNKNOWN
        if isinstance(obj, Ext):
            return Ext(f"{obj.qual}.{attr}")
        if isinstance(obj, ClassRef):
            return self.class_attr(obj, attr, bound=obj, bound_set=False)
        if isinstance(obj, SuperRef):
            chain = mro(self.project, obj.cls)[1:]
            for c in chain:
                v = self._own_attr(c, attr, obj.bound, True)
                if v is not None:
                    return v
            return UNKNOWN
        if isinstance(obj, EnumMember):
            if attr == "value":
                return obj.value
            if attr == "name":
                return obj.name
            return UNKNOWN
        if isinstance(obj, (dict, list, str, Parser, set, tuple)):
            return BoundMethod(obj, attr)
        return UNKNOWN

    def class_attr(self, cls: ClassRef, attr: str, bound: Any, bound_set: bool) -> Any:
        if attr == "__name__":
            return cls.name
        if attr == "__doc__":
            return ast.get_docstring(cls.node) or ""
        for c in mro(self.project, cls):
            v = self._own_attr(c, attr, bound, bound_set)
            if v is not None:
                return v
        return UNKNOWN

    def _own_attr(self, c: ClassRef, attr: str, bound: Any, bound_set: bool) -> Any:
        for st in c.node.body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == attr:
                decos = {ast.unparse(d) for d in st.decorator_list}
                if "classmethod" in decos:
                    b = bound if isinstance(bound, ClassRef) else c
                    return FuncRef(c.mod, st, owner=c, bound=b, has_bound=True)
                if bound_set:
                    return FuncRef(c.mod, st, owner=c, bound=bound, has_bound=True)
                return FuncRef(c.mod, st, owner=c)
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in st.targets):
                if is_enum_cls(self.project, c):
                    return next((m for m in enum_members(c, self.project) if m.name == attr), UNKNOWN)
                return self.eval(st.value, Frame(c.mod, {}, c, 0))
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == attr:
                return UNKNOWN  # dataclass field defaults are not needed
        return None

    # -- calls ---------------------------------------------------------

    def call_node(self, node: ast.Call, fr: Frame) -> Any:
        func = self.eval(node.func, fr)
        args: list[Any] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                seq = self.iterate(self.eval(a.value, fr))
                if seq is None:
                    args.append(UNKNOWN)
                else:
                    args.extend(seq)
            else:
                args.append(self.eval(a, fr))
        kwargs: dict[str, Any] = {}
        for k in node.keywords:
            if k.arg is None:
                spread = self.eval(k.value, fr)
                if isinstance(spread, dict):
                    kwargs.update(spread)
                else:
                    kwargs["__unknown_spread__"] = True
            else:
                kwargs[k.arg] = self.eval(k.value, fr)
        if isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args:
            if fr.cls is not None:
                return SuperRef(fr.cls, fr.bound)
            return UNKNOWN
        return self.call(func, args, kwargs, fr, node)

    def call(self, func: Any, args: list[Any], kwargs: dict[str, Any], fr: Frame, node: ast.Call) -> Any:
        if isinstance(func, BoundMethod):
            return self.call_method(func, args, kwargs, fr, node)
        if isinstance(func, Builtin):
            return self.call_builtin(func.name, args, kwargs)
        if isinstance(func, Ext):
            last = func.qual.split(".")[-1]
            if last == "get_args" and args:
                return self.get_args(args[0])
            if last == "deepcopy" and args:
                return copy.deepcopy(args[0]) if not isinstance(args[0], Parser) else args[0]
            if last == "permutations" and args:
                seq = self.iterate(args[0])
                r = kwargs.get("r", args[1] if len(args) > 1 else None)
                if seq is None or not (r is None or isinstance(r, int)):
                    return UNKNOWN
                return [tuple(p) for p in itertools.permutations(seq, r)]
            if last == "cast" and len(args) == 2:
                return args[1]
            if last in {"add_parser", "ArgumentParser", "FlexibleArgumentParser"}:
                return Parser([])
            return UNKNOWN
        if isinstance(func, FuncRef):
            if func.node.name == "get_kwargs" and args and isinstance(args[0], ClassRef):
                return self.get_kwargs(args[0])
            if func.node.name in {"optional_type", "parse_type"} and args:
                return self.as_typefn(args[0])
            if func.node.name == "get_args" and args:
                return self.get_args(args[0])
            if self._worth_interpreting(func, args, kwargs, fr):
                return self.invoke(func, args, kwargs, fr)
            return UNKNOWN
        if isinstance(func, ClassRef):
            return UNKNOWN
        return UNKNOWN

    def _worth_interpreting(self, func: FuncRef, args: list[Any], kwargs: dict[str, Any], fr: Frame) -> bool:
        if fr.depth >= self.MAX_DEPTH:
            return False
        vals = [*args, *kwargs.values()]
        if func.has_bound:
            vals.append(func.bound)
        return any(
            isinstance(v, Parser) or (isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()))
            for v in vals
        )

    def invoke(self, func: FuncRef, args: list[Any], kwargs: dict[str, Any], fr: Frame) -> Any:
        fn = func.node
        params = [*fn.args.posonlyargs, *fn.args.args]
        locals_: dict[str, Any] = {}
        call_args = list(args)
        if func.has_bound:
            call_args.insert(0, func.bound)
        defaults = fn.args.defaults
        first_default = len(params) - len(defaults)
        def_frame = Frame(func.mod, {}, func.owner, fr.depth + 1)
        for i, p in enumerate(params):
            if i < len(call_args):
                locals_[p.arg] = call_args[i]
            elif p.arg in kwargs:
                locals_[p.arg] = kwargs[p.arg]
            elif i >= first_default:
                locals_[p.arg] = self.eval(defaults[i - first_default], def_frame)
            else:
                locals_[p.arg] = UNKNOWN
        for p, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True):
            if p.arg in kwargs:
                locals_[p.arg] = kwargs[p.arg]
            else:
                locals_[p.arg] = self.eval(d, def_frame) if d is not None else UNKNOWN
        if fn.args.vararg:
            locals_[fn.args.vararg.arg] = tuple(call_args[len(params) :])
        if fn.args.kwarg:
            locals_[fn.args.kwarg.arg] = {k: v for k, v in kwargs.items() if k not in locals_}
        bound = func.bound if func.has_bound else (call_args[0] if call_args and params else None)
        sub = Frame(func.mod, locals_, func.owner, fr.depth + 1, bound)
        try:
            self.exec_block(fn.body, sub)
        except _Return as r:
            return r.value
        except (_Break, _Continue):
            return UNKNOWN
        return None

    def call_method(self, bm: BoundMethod, args: list[Any], kwargs: dict[str, Any], fr: Frame, node: ast.Call) -> Any:
        obj, name = bm.obj, bm.name
        if isinstance(obj, Parser):
            if name == "add_argument":
                self.record_argument(obj, args, kwargs, fr, node)
                return UNKNOWN
            if name in {"add_argument_group", "add_mutually_exclusive_group", "add_parser"}:
                return Parser(obj.sink)
            return UNKNOWN
        if any(a is UNKNOWN for a in args):
            return UNKNOWN
        if isinstance(obj, dict):
            if name == "items":
                return _DictView(list(obj.items()))
            if name == "keys":
                return _DictView(list(obj.keys()))
            if name == "values":
                return _DictView(list(obj.values()))
            if name in {"pop", "get", "setdefault", "update", "copy", "clear"}:
                if name == "update" and args and not isinstance(args[0], dict):
                    return UNKNOWN
                if name in {"pop", "get", "setdefault"} and args and not is_hashable(args[0]):
                    return UNKNOWN
                result = getattr(obj, name)(*args, **kwargs)
                return result
            return UNKNOWN
        if isinstance(obj, list) and name in {
            "append",
            "extend",
            "copy",
            "index",
            "insert",
            "remove",
            "sort",
        }:
            try:
                return getattr(obj, name)(*args, **kwargs)
            except (ValueError, TypeError):
                return UNKNOWN
        if isinstance(obj, str) and name in {
            "replace", "lower", "upper", "strip", "startswith", "endswith", "split", "join",
            "format", "removeprefix", "removesuffix", "lstrip", "rstrip", "title", "capitalize",
        }:  # fmt: skip
            if name == "join":
                seq = self.iterate(args[0]) if args else None
                if seq is None or not all(isinstance(s, str) for s in seq):
                    return UNKNOWN
                return obj.join(seq)
            if any(not isinstance(a, (str, int)) for a in [*args, *kwargs.values()]):
                return UNKNOWN
            try:
                return getattr(obj, name)(*args, **kwargs)
            except (ValueError, TypeError, KeyError, IndexError):
                return UNKNOWN
        return UNKNOWN

    def call_builtin(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if any(a is UNKNOWN for a in args):
            return UNKNOWN
        if name in {"list", "tuple", "set", "sorted", "frozenset"}:
            if not args:
                return [] if name != "set" else set()
            seq = self.iterate(args[0])
            if seq is None:
                if isinstance(args[0], LiteralT):
                    seq = list(args[0].values)
                else:
                    return UNKNOWN
            if name == "sorted":
                try:
                    return sorted(seq, key=_sort_key if kwargs.get("key") is None else None)
                except TypeError:
                    return UNKNOWN
            if name == "list":
                return list(seq)
            if name == "tuple":
                return tuple(seq)
            return set(seq) if all(is_hashable(x) for x in seq) else UNKNOWN
        if name == "dict":
            if args and isinstance(args[0], dict):
                return {**args[0], **kwargs}
            if not args:
                return dict(kwargs)
            return UNKNOWN
        if name == "len" and args and isinstance(args[0], (list, tuple, dict, str, set)):
            return len(args[0])
        if name in {"str", "int", "float", "bool"}:
            if not args:
                return {"str": "", "int": 0, "float": 0.0, "bool": False}[name]
            if isinstance(args[0], (str, int, float, bool)):
                try:
                    return {"str": str, "int": int, "float": float, "bool": bool}[name](args[0])
                except ValueError:
                    return UNKNOWN
        return UNKNOWN

    def get_args(self, v: Any) -> Any:
        if isinstance(v, LiteralT):
            return v.values
        if isinstance(v, _AliasExpr):
            atoms = self.hints.atoms(v.node, v.mod)
            lits = [a for a in atoms if a.kind == "literal"]
            if len(atoms) == 1 and lits:
                return lits[0].args
        return UNKNOWN

    def get_kwargs(self, cls: ClassRef) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclass_fields(self.project, cls):
            atoms = self.hints.atoms(f.annotation, f.mod)
            if not self.features.flatten_nested_union and not self.features.dataclass_json:
                # 0.8.x flattened only one Union level; same result for our purposes
                pass
            out[f.name] = compute_field_kwargs(atoms, f.name, f.doc, self.features)
        if not out:
            self.warn(f"get_kwargs({cls.name}): no dataclass fields found")
        return out

    def as_typefn(self, v: Any) -> Any:
        if isinstance(v, TypeFn):
            return v
        if isinstance(v, Builtin) and v.name in TYPEFN_BY_NAME:
            return TypeFn(TYPEFN_BY_NAME[v.name])
        if isinstance(v, Ext):
            if v.qual in {"json.loads"} or v.qual.endswith(".loads"):
                return TypeFn("json")
            last = v.qual.split(".")[-1]
            return TypeFn(TYPEFN_BY_NAME.get(last, "str"))
        if isinstance(v, FuncRef):
            return TypeFn(TYPEFN_BY_NAME.get(v.node.name, "str"))
        if isinstance(v, BoundMethod):
            return TypeFn(TYPEFN_BY_NAME.get(v.name, "str"))
        if isinstance(v, Lambda):
            body = ast.unparse(v.node.body)
            if "json.loads" in body or "from_cli" in body or "model_validate" in body:
                return TypeFn("json")
            return TypeFn("str")
        return v

    # -- argparse recording ----------------------------------------------

    def record_argument(
        self, parser: Parser, args: list[Any], kwargs: dict[str, Any], fr: Frame, node: ast.Call
    ) -> None:
        where = f"{fr.mod.name}:{node.lineno}"
        if kwargs.pop("__unknown_spread__", False):
            self.warn(f"unresolved **kwargs in add_argument at {where}")
        opts = [a for a in args if isinstance(a, str)]
        if len(opts) != len(args) or not opts:
            self.warn(f"unresolved option strings {args!r} at {where}")
            if not opts:
                return
        parser.sink.append({"opts": opts, "kwargs": kwargs, "where": where})


@dataclass(eq=False)
class _DictView:
    items: list[Any]


def is_hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


# --------------------------------------------------------------------------
# Per-version extraction
# --------------------------------------------------------------------------

DEPRECATED_RE = re.compile(
    r"(^\s*\[?deprecated\]?)|(\bis deprecated\b)|(\bhas been deprecated\b)|(\bdeprecated and\b)|"
    r"(\bwill be removed\b)|(\(deprecated\))|(\bDEPRECATED\b)|(\bdeprecated[.:;,]\s)|(\bdeprecated\.?$)",
    re.IGNORECASE,
)


def normalise_argument(raw: dict[str, Any], interp: Interp, enable_disable: bool) -> dict[str, Any]:
    opts: list[str] = raw["opts"]
    kw: dict[str, Any] = raw["kwargs"]
    longs = [o for o in opts if o.startswith("--")]
    if "dest" in kw and isinstance(kw["dest"], str):
        dest = kw["dest"]
    elif not opts[0].startswith("-"):
        dest = opts[0]
    else:
        dest = (longs[0] if longs else opts[0]).lstrip("-").replace("-", "_")
    action = kw.get("action")
    if isinstance(action, Ext):
        action = ActionRef(action.qual.split(".")[-1])
    elif isinstance(action, ClassRef):
        action = ActionRef(action.name)
    elif isinstance(action, str):
        action = ActionRef(action)
    elif action is not None and not isinstance(action, ActionRef):
        action = ActionRef("?")
    typ = interp.as_typefn(kw.get("type")) if "type" in kw else None
    nargs = kw.get("nargs")
    if nargs is UNKNOWN:
        nargs = None
    choices = kw.get("choices")
    if choices is not None:
        seq = interp.iterate(choices)
        if seq is None and isinstance(choices, LiteralT):
            seq = list(choices.values)
        if seq is None or any(c is UNKNOWN for c in seq):
            interp.warn(f"unresolved choices for {opts[0]} at {raw['where']}")
            choices = None
        else:
            choices = [c.value if isinstance(c, EnumMember) else c for c in seq]
            choices = [c for c in choices if c is not None and c != "None"]
            choices = sorted({c for c in choices if isinstance(c, (str, int, float))}, key=_sort_key) or None
    metavar = kw.get("metavar")
    suggested: list[Any] | None = None
    if choices is None and isinstance(metavar, list):
        listed = {c for c in metavar if isinstance(c, (str, int, float)) and c != "None"}
        suggested = sorted(listed, key=_sort_key)
    help_text = kw.get("help")
    deprecated = kw.get("deprecated") is True
    if isinstance(help_text, str) and DEPRECATED_RE.search(help_text):
        deprecated = True
    if isinstance(action, ActionRef) and "deprecat" in action.name.lower():
        deprecated = True

    negative: list[str] = []
    aname = action.name if isinstance(action, ActionRef) else None
    if aname in {"store_true", "store_false"}:
        kind, typ_name = aname, "bool"
    elif aname in {"BooleanOptionalAction", "EnableDisableAction"}:
        kind, typ_name = "boolean_optional", "bool"
        negative = ["--no-" + o[2:] for o in longs]
        if enable_disable or aname == "EnableDisableAction":
            inverse = {"--enable-": "--disable-", "--disable-": "--enable-"}
            for o in longs:
                for pre, inv in inverse.items():
                    if o.startswith(pre):
                        negative.append(inv + o[len(pre) :])
    elif aname == "StoreBoolean":
        kind, typ_name = "value", "bool"
    elif aname in {"append", "extend"}:
        kind = aname
        typ_name = typ.name if isinstance(typ, TypeFn) else "str"
    elif aname in {"store_const", "count", "help", "version"}:
        kind, typ_name = aname, "int" if aname == "count" else "str"
    else:
        typ_name = typ.name if isinstance(typ, TypeFn) else "str"
        if typ is not None and not isinstance(typ, TypeFn):
            interp.warn(f"unresolved type for {opts[0]} at {raw['where']}: {typ!r}")
        json_string = (
            typ_name == "str"
            and nargs is None
            and isinstance(help_text, str)
            and re.search(r"\b(JSON string|JSON format|valid JSON|in JSON)\b", help_text) is not None
        )
        if not opts[0].startswith("-"):
            kind = "positional"
        elif typ_name == "json" or json_string:
            kind = "json"
        else:
            kind = "value"
    if isinstance(nargs, (int, str)):
        nargs_out: int | str | None = nargs
    else:
        nargs_out = None
    spec: dict[str, Any] = {
        "flags": longs if longs else list(opts),
        "aliases": [o for o in opts if not o.startswith("--") and o.startswith("-")],
        "kind": kind,
        "type": typ_name,
        "choices": choices,
        "metavar_choices": suggested or None,
        "nargs": nargs_out,
        "deprecated": deprecated,
    }
    if negative:
        spec["negative_flags"] = negative
    return {"dest": dest, "spec": spec}


def detect_enable_disable(project: Project) -> bool:
    for name in ("vllm.utils.argparse_utils", "vllm.utils", "vllm.utils.__init__"):
        mod = project.module(name)
        if mod is not None and re.search(
            r"register\(\s*['\"]action['\"]\s*,\s*(argparse\.)?BooleanOptionalAction\s*,\s*EnableDisableAction",
            mod.source,
        ):
            return True
    return False


def config_file_rules(project: Project) -> dict[str, Any]:
    """Summarise FlexibleArgumentParser's YAML loader for this release."""
    src = ""
    where = None
    for name in ("vllm.utils.argparse_utils", "vllm.utils"):
        mod = project.module(name)
        if mod is None:
            continue
        for st in ast.walk(mod.tree):
            if isinstance(st, ast.FunctionDef) and st.name in {"load_config_file", "_load_config_file"}:
                src = ast.unparse(st)
                where = f"{mod.path}:{st.name}"
                break
        if src:
            break
    if not src:
        return {"loader": None}
    return {
        "loader": where,
        "key_prefix": "--" if "'--' + key" in src or '"--" + key' in src else "?",
        "bool_true": "--KEY",
        "bool_false": (
            "--no-KEY if that option string exists, else dropped" if "--no-" in src else "dropped (default applies)"
        ),
        "store_boolean_passthrough": "StoreBoolean" in src,
        "list": "--KEY item1 item2 ..." if "isinstance(value, list)" in src else "--KEY str(list) (python repr)",
        "dict": "--KEY json.dumps(dict)"
        if "isinstance(value, dict)" in src
        else "--KEY str(dict) (python repr, not JSON)",
        "other": "--KEY str(value)",
        "source_sha256": hashlib.sha256(src.encode()).hexdigest()[:12],
    }


def find_serve_entry(project: Project) -> FuncRef | None:
    mod = project.module("vllm.entrypoints.cli.serve")
    if mod is None:
        return None
    for st in mod.tree.body:
        if isinstance(st, ast.ClassDef):
            for sub in st.body:
                if isinstance(sub, ast.FunctionDef) and sub.name == "subparser_init":
                    owner = ClassRef(mod, st)
                    return FuncRef(mod, sub, owner=owner, bound=UNKNOWN, has_bound=True)
    return None


@dataclass
class VersionResult:
    version: str
    artefact: str
    args: dict[str, dict[str, Any]]
    warnings: list[str]
    config_file: dict[str, Any]
    features: dict[str, Any]


def extract_version(version: str, src_zip: Path) -> VersionResult:
    files: dict[str, str] = {}
    source_name = ""
    with zipfile.ZipFile(src_zip) as zf:
        for name in zf.namelist():
            if name == ".source.json":
                source_name = json.loads(zf.read(name))["filename"]
            elif name.endswith(".py"):
                files[name] = zf.read(name).decode("utf-8", errors="replace")
    project = Project(files)
    feats = KwargsFeatures.detect(project)
    warnings: list[str] = []
    interp = Interp(project, feats, warnings)
    entry = find_serve_entry(project)
    if entry is None:
        raise RuntimeError(f"{version}: vllm/entrypoints/cli/serve.py subparser_init not found")
    subparsers = Parser([])
    fr = Frame(entry.mod, {}, entry.owner, 0)
    interp.invoke(entry, [subparsers], {}, fr)
    enable_disable = detect_enable_disable(project)
    args: dict[str, dict[str, Any]] = {}
    for raw in subparsers.sink:
        norm = normalise_argument(raw, interp, enable_disable)
        if norm["dest"] in {"help"}:
            continue
        args[norm["dest"]] = norm["spec"]
    return VersionResult(
        version=version,
        artefact=source_name,
        args=args,
        warnings=warnings,
        config_file=config_file_rules(project),
        features={
            "get_kwargs": feats.present,
            "enable_disable_action": enable_disable,
        },
    )


# --------------------------------------------------------------------------
# Table assembly
# --------------------------------------------------------------------------

SPEC_KEYS = (
    "flags", "aliases", "negative_flags", "kind", "type", "choices", "metavar_choices", "nargs", "deprecated",
)  # fmt: skip


def _spec_tuple(spec: dict[str, Any]) -> str:
    return json.dumps({k: spec.get(k) for k in SPEC_KEYS}, sort_keys=True)


def build_table(results: list[VersionResult]) -> dict[str, Any]:
    versions = [r.version for r in results]
    dests = sorted({d for r in results for d in r.args})
    args_out: dict[str, Any] = {}
    for dest in dests:
        present = [r.version for r in results if dest in r.args]
        ranges: list[dict[str, Any]] = []
        prev_key: str | None = None
        prev_idx = -2
        for idx, r in enumerate(results):
            spec = r.args.get(dest)
            if spec is None:
                prev_key = None
                continue
            key = _spec_tuple(spec)
            if ranges and key == prev_key and prev_idx == idx - 1:
                ranges[-1]["until"] = r.version
            else:
                entry: dict[str, Any] = {"since": r.version, "until": r.version}
                entry.update({k: spec.get(k) for k in SPEC_KEYS})
                ranges.append(entry)
            prev_key = key
            prev_idx = idx
        changes: list[dict[str, Any]] = []
        prev_spec: dict[str, Any] | None = None
        for r in results:
            spec = r.args.get(dest)
            if spec is None and prev_spec is not None:
                changes.append({"version": r.version, "what": "removed", "detail": None})
            elif spec is not None and prev_spec is None:
                changes.append({"version": r.version, "what": "added", "detail": None})
            elif spec is not None and prev_spec is not None:
                for k, what in (
                    ("flags", "renamed"),
                    ("aliases", "aliases"),
                    ("negative_flags", "negative_flags"),
                    ("kind", "kind"),
                    ("type", "type"),
                    ("choices", "choices"),
                    ("metavar_choices", "metavar_choices"),
                    ("nargs", "nargs"),
                    ("deprecated", "deprecated"),
                ):
                    if spec.get(k) != prev_spec.get(k):
                        changes.append(
                            {
                                "version": r.version,
                                "what": what,
                                "detail": _change_detail(prev_spec.get(k), spec.get(k)),
                            }
                        )
            prev_spec = spec
        # the first extracted version is not an "addition"
        if changes and changes[0]["what"] == "added" and changes[0]["version"] == versions[0]:
            changes = changes[1:]
        latest = ranges[-1]
        args_out[dest] = {
            "flags": latest["flags"],
            "kind": latest["kind"],
            "type": latest["type"],
            "choices": latest["choices"],
            "nargs": latest["nargs"],
            "deprecated": latest["deprecated"],
            "present_in": present,
            "specs": ranges,
            "changes": changes,
        }
    config_ranges: list[dict[str, Any]] = []
    for r in results:
        if config_ranges and config_ranges[-1]["rules"] == r.config_file:
            config_ranges[-1]["until"] = r.version
        else:
            config_ranges.append({"since": r.version, "until": r.version, "rules": r.config_file})
    return {
        "schema": 1,
        "generated_by": "tools/extract_vllm_flags.py",
        "source": "PyPI vllm sdists/wheels",
        "parser": "vllm serve (vllm/entrypoints/cli/serve.py ServeSubcommand.subparser_init)",
        "notes": "engine_args_notes.md (YAML --config mapping, reading guide)",
        "versions": versions,
        "artefacts": {r.version: r.artefact for r in results},
        "config_file": config_ranges,
        "args": args_out,
    }


def _change_detail(old: Any, new: Any) -> Any:
    if isinstance(old, list) and isinstance(new, list):
        return {
            "added": [x for x in new if x not in old],
            "removed": [x for x in old if x not in new],
        }
    return {"from": old, "to": new}


def dump_json(obj: Any, indent: int = 0) -> str:
    """Diff-friendly JSON: one key per line, lists of scalars on one line."""
    pad = "  " * indent
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}  {json.dumps(k)}: {dump_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(obj, list):
        if all(not isinstance(x, (dict, list)) for x in obj):
            return json.dumps(obj)
        items = [f"{pad}  {dump_json(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(obj)


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def print_report(table: dict[str, Any], results: list[VersionResult], elapsed: float) -> None:
    print(
        f"vLLM serve arguments extracted from {len(results)} releases "
        f"({results[0].version} .. {results[-1].version}) in {elapsed:.1f}s"
    )
    print(f"{'version':<12} {'args':>5} {'+':>4} {'-':>4} {'chg':>4} {'warn':>4}  artefact")
    prev: dict[str, dict[str, Any]] | None = None
    for r in results:
        added = removed = changed = 0
        if prev is not None:
            added = len(set(r.args) - set(prev))
            removed = len(set(prev) - set(r.args))
            changed = sum(1 for d in set(r.args) & set(prev) if _spec_tuple(r.args[d]) != _spec_tuple(prev[d]))
        counts = f"{len(r.args):>5} {added:>4} {removed:>4} {changed:>4} {len(r.warnings):>4}"
        print(f"{r.version:<12} {counts}  {r.artefact}")
        prev = r.args
    print("\nRemovals (flag: last version present -> first version without):")
    for dest, info in sorted(table["args"].items()):
        for ch in info["changes"]:
            if ch["what"] == "removed":
                idx = table["versions"].index(ch["version"])
                flag = info["flags"][0] if info["flags"] else dest
                print(f"  {flag:<48} {table['versions'][idx - 1]:>9} -> {ch['version']}")
    notable = [
        "speculative_model", "num_speculative_tokens", "speculative_draft_tensor_parallel_size",
        "speculative_config", "swap_space", "calculate_kv_scales", "kv_cache_memory_bytes",
        "kv_cache_dtype", "enable_prefix_caching", "enable_chunked_prefill", "config",
    ]  # fmt: skip
    print("\nNotable arguments:")
    for dest in notable:
        info = table["args"].get(dest)
        if info is None:
            print(f"  {dest}: never present")
            continue
        pres = info["present_in"]
        print(
            f"  {dest}: present {pres[0]}..{pres[-1]} ({len(pres)} releases); latest {info['flags']} "
            f"kind={info['kind']} type={info['type']}"
        )
    warned = [r for r in results if r.warnings]
    if warned:
        print("\nAnalysis warnings (best-effort static interpretation):")
        for r in warned:
            for w in r.warnings[:12]:
                print(f"  {r.version}: {w}")
            if len(r.warnings) > 12:
                print(f"  {r.version}: ... {len(r.warnings) - 12} more")


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min", default=DEFAULT_MIN, help="first vLLM version (default %(default)s)")
    ap.add_argument("--max", default=DEFAULT_MAX, help="last vLLM version (default %(default)s)")
    ap.add_argument("--minors-only", action="store_true", help="only x.y.0 releases (plus --min)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSON (default %(default)s)")
    ap.add_argument("--offline", action="store_true", help="use only the cache, no network")
    ap.add_argument("--dry-run", action="store_true", help="do not write the JSON")
    opts = ap.parse_args(argv)

    t0 = time.monotonic()
    cache = cache_root()
    index = load_index(cache, opts.offline)
    arts = select_versions(index, opts.min, opts.max, opts.minors_only)
    if not arts:
        log("no versions selected")
        return 1
    results: list[VersionResult] = []
    for art in arts:
        t1 = time.monotonic()
        src = ensure_sources(art, cache, opts.offline)
        res = extract_version(art.version, src)
        results.append(res)
        log(f"{art.version:<12} {len(res.args):>4} args  {time.monotonic() - t1:5.1f}s  {art.filename}")
    table = build_table(results)
    if not opts.dry_run:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(dump_json(table) + "\n")
        log(f"wrote {opts.out}")
    print_report(table, results, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
