"""One release's ``vllm/**.py`` source, and the static-evaluation primitives both readers of it share.

A release is read from the cache zip ``tools/extract_vllm_flags.py`` writes (``py/<version>.zip``, which also
records the PyPI artefact it came from) or from an installed tree (a venv's ``site-packages``). Nothing here
imports vLLM: the source is only parsed.
"""

from __future__ import annotations

import ast
import copy
import json
import zipfile
from pathlib import Path
from typing import Any

ARTEFACT_MEMBER = ".source.json"


class ReleaseSource:
    """The ``vllm/**.py`` files of one release, read and parsed on demand."""

    def __init__(self, version: str, texts: dict[str, str] | None = None, artefact: str = "") -> None:
        self.version = version
        self.artefact = artefact
        self._texts: dict[str, str] = dict(texts or {})
        self.names: set[str] = {n for n in self._texts if n.endswith(".py")}
        self._trees: dict[str, ast.Module] = {}
        self._zip: zipfile.ZipFile | None = None

    @classmethod
    def from_zip(cls, version: str, zpath: Path) -> ReleaseSource:
        """The flag extractor's cache zip: ``vllm/**.py`` plus ``.source.json`` naming the PyPI artefact."""
        zf = zipfile.ZipFile(zpath)
        names = zf.namelist()
        artefact = ""
        if ARTEFACT_MEMBER in names:
            artefact = str(json.loads(zf.read(ARTEFACT_MEMBER))["filename"])
        src = cls(version, artefact=artefact)
        src._zip = zf
        src.names = {n for n in names if n.endswith(".py")}
        return src

    @classmethod
    def from_tree(cls, version: str, root: Path, artefact: str) -> ReleaseSource:
        """An installed release: ``root`` holds the ``vllm`` package (a venv's ``site-packages``)."""
        texts = {
            p.relative_to(root).as_posix(): p.read_text("utf-8", "replace")
            for p in sorted((root / "vllm").rglob("*.py"))
            if "/tests/" not in p.relative_to(root).as_posix() and "__pycache__" not in p.parts
        }
        return cls(version, texts, artefact)

    def text(self, path: str) -> str:
        if path not in self._texts:
            if self._zip is None:
                raise KeyError(path)
            self._texts[path] = self._zip.read(path).decode("utf-8", "replace")
        return self._texts[path]

    def tree(self, path: str) -> ast.Module:
        """The parsed module (``SyntaxError`` for a file this Python cannot parse)."""
        if path not in self._trees:
            self._trees[path] = ast.parse(self.text(path), filename=path)
        return self._trees[path]

    def module_path(self, modname: str) -> str | None:
        base = modname.replace(".", "/")
        for cand in (f"{base}.py", f"{base}/__init__.py"):
            if cand in self.names:
                return cand
        return None


def module_name(path: str) -> str:
    """``vllm/config/__init__.py`` -> ``vllm.config``."""
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def resolve_relative(modname: str, level: int, target: str | None, is_pkg: bool) -> str:
    """The absolute module of ``from <level dots><target> import ...`` written in ``modname``."""
    if level == 0:
        return target or ""
    parts = modname.split(".")
    if not is_pkg:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, target] if target else parts)


def assignment(st: ast.stmt) -> tuple[list[ast.expr], ast.expr] | None:
    """The targets of an assignment statement and the one expression assigned to them all (``x += y`` is
    ``x = x + y``); None for any other statement, and for an annotation without a value."""
    if isinstance(st, ast.Assign):
        return list(st.targets), st.value
    if isinstance(st, ast.AnnAssign):
        return ([st.target], st.value) if st.value is not None else None
    if isinstance(st, ast.AugAssign):
        current = copy.copy(st.target)
        current.ctx = ast.Load()
        return [st.target], ast.BinOp(left=current, op=st.op, right=st.value)
    return None


def is_hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def compare(op: ast.cmpop, left: Any, right: Any) -> bool | None:
    """``left <op> right`` on known values; None where Python would raise or the operator is not a comparison."""
    try:
        if isinstance(op, ast.Is):
            return left is right
        if isinstance(op, ast.IsNot):
            return left is not right
        if isinstance(op, ast.Eq):
            return bool(left == right)
        if isinstance(op, ast.NotEq):
            return bool(left != right)
        if isinstance(op, ast.Gt):
            return bool(left > right)
        if isinstance(op, ast.GtE):
            return bool(left >= right)
        if isinstance(op, ast.Lt):
            return bool(left < right)
        if isinstance(op, ast.LtE):
            return bool(left <= right)
        if isinstance(op, ast.In):
            return bool(left in right)
        if isinstance(op, ast.NotIn):
            return bool(left not in right)
    except TypeError:
        return None
    return None


def dump_json(obj: Any, indent: int = 0) -> str:
    """Diff-friendly JSON for the committed tables: one key per line, lists of scalars on one line."""
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
