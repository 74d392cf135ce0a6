"""The argparse-building code of ``vllm serve``, interpreted statically."""

from __future__ import annotations

import ast
import copy
import itertools
import re
from dataclasses import dataclass
from typing import Any

from vllm_fleet.vllm.extract.flag_kwargs import KwargsFeatures, compute_field_kwargs, sort_key
from vllm_fleet.vllm.extract.flag_values import (
    BUILTIN_NAMES,
    UNKNOWN,
    BoundMethod,
    BreakLoop,
    Builtin,
    ClassRef,
    ContinueLoop,
    EnumMember,
    Ext,
    FuncRef,
    Hint,
    Lambda,
    LiteralT,
    Module,
    ModuleRef,
    Parser,
    ReturnValue,
    SuperRef,
    TypeFn,
)
from vllm_fleet.vllm.extract.pysource import ReleaseSource, assignment, is_hashable, resolve_relative
from vllm_fleet.vllm.extract.pysource import compare as compare_values


class Project:
    """Lazily parsed view of one release's ``vllm/**.py`` sources."""

    def __init__(self, source: ReleaseSource) -> None:
        self.source = source
        self.modules: dict[str, Module | None] = {}
        self.global_cache: dict[tuple[str, str], Any] = {}
        self.in_progress: set[tuple[str, str]] = set()

    def module(self, name: str) -> Module | None:
        if name in self.modules:
            return self.modules[name]
        base = name.replace(".", "/")
        mod: Module | None = None
        for path, is_pkg in ((base + ".py", False), (base + "/__init__.py", True)):
            if path in self.source.names:
                src = self.source.text(path)
                try:
                    tree = self.source.tree(path)
                except SyntaxError:
                    tree = ast.parse("")
                mod = Module(name, path, tree, is_pkg, source=src)
                self._index(mod)
                break
        self.modules[name] = mod
        return mod

    def is_package_prefix(self, name: str) -> bool:
        prefix = name.replace(".", "/") + "/"
        return any(p.startswith(prefix) for p in self.source.names)

    def _index(self, mod: Module) -> None:
        def visit(stmts: list[ast.stmt]) -> None:
            for st in stmts:
                self._bind_stmt(mod, st, mod.bindings, mod.star_imports)
                if isinstance(st, ast.If) and _is_type_checking(st.test):
                    visit(st.body)
                    # What runs: the `else` of `if TYPE_CHECKING:` rebinds names the module imported above
                    # (0.9.2-0.10.2 vllm/config.py: `QuantizationMethods = Any`), so it wins over them.
                    runtime: dict[str, tuple[Any, ...]] = {}
                    for sub in st.orelse:
                        self._bind_stmt(mod, sub, runtime, None)
                    mod.bindings.update(runtime)
                elif isinstance(st, ast.If):
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
            src = resolve_relative(mod.name, st.level, st.module, mod.is_pkg)
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
        elif (assigned := assignment(st)) is not None:
            targets, value = assigned
            val = self.eval(value, fr)
            for t in targets:
                self.assign(t, val, fr)
        elif isinstance(st, ast.Return):
            raise ReturnValue(self.eval(st.value, fr) if st.value is not None else None)
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
                except BreakLoop:
                    break
                except ContinueLoop:
                    continue
        elif isinstance(st, ast.Break):
            raise BreakLoop()
        elif isinstance(st, ast.Continue):
            raise ContinueLoop()
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
        except (ReturnValue, BreakLoop, ContinueLoop):
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
            r = compare_values(op, left, right)
            if r is None:
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
        except ReturnValue as r:
            return r.value
        except (BreakLoop, ContinueLoop):
            return UNKNOWN
        return None

    def call_method(self, bm: BoundMethod, args: list[Any], kwargs: dict[str, Any], fr: Frame, node: ast.Call) -> Any:
        obj, name = bm.obj, bm.name
        if isinstance(obj, Parser):
            if name == "add_argument":
                self.record_argument(obj, args, kwargs, fr, node)
                return UNKNOWN
            if name == "add_argument_group":
                title = kwargs.get("title", args[0] if args else None)
                return Parser(obj.sink, title if isinstance(title, str) else None)
            if name == "add_mutually_exclusive_group":
                return Parser(obj.sink, obj.group)
            if name == "add_parser":
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
                    return sorted(seq, key=sort_key if kwargs.get("key") is None else None)
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
        parser.sink.append({"opts": opts, "kwargs": kwargs, "where": where, "group": parser.group})


@dataclass(eq=False)
class _DictView:
    items: list[Any]


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )
