"""Config semantics argparse does not show, per vLLM release: the ``--speculative-config`` keys and methods, the
KV-cache block size and GPU-memory-utilization defaults, the extensible KV cache option.

The extraction (``extract_version``, ``build_table``) reads one release's ``vllm/**.py`` statically, like the flag
and metric readers, and uses the standard library only. It follows the names the engine itself imports
(``vllm.config.SpeculativeConfig``, ``vllm.config.CacheConfig``, ``vllm.engine.arg_utils.EngineArgs``) through
the release's own ``from ... import`` statements, and evaluates only what it can decide: literal defaults,
``Literal[...]`` aliases (nested, unions of aliases, imported from other modules), class-level constants. Any other
construct on the path of an answer raises ``UndecidableConstruct`` naming the release, the file and the
construct, so that a new vLLM idiom stops the extractor instead of writing a guess into the committed table.

``tools/extract_vllm_config.py`` is the command line; ``vllm_fleet/vllm/data/config_semantics.json`` the table.
``semantics_for(version)`` at the bottom reads the committed table (resolving a version as the flag table does).
"""

from __future__ import annotations

import ast
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

from vllm_fleet.vllm.extract.pysource import ReleaseSource, module_name, resolve_relative
from vllm_fleet.vllm.extract.releases import version_key

GENERATED_BY = "tools/extract_vllm_config.py"
ITEMS = (
    "speculative_keys",
    "speculative_methods",
    "block_size_default",
    "gpu_memory_utilization_default",
    "extensible_kv_cache",
)

#: What each item of the table records (written into the table as its ``notes``).
NOTES: dict[str, str] = {
    "speculative_keys": (
        "value: the keys --speculative-config accepts = SpeculativeConfig's init fields (ClassVar, _private and "
        "init=False fields excluded; internal ones such as target_model_config included, as the class accepts "
        "them). deprecated: the keys whose field docstring starts with 'Deprecated' or whose Field(deprecated=...) "
        "is set. rejected: keys the class refuses whenever they are set (if self.<key> is not None: raise), e.g. "
        "tensor_parallel_size, a field that only exists to point at draft_tensor_parallel_size."
    ),
    "speculative_methods": (
        "value: the method values. kind 'literal': the values of the Literal the method field is annotated with "
        "(aliases and unions resolved); kind 'recognized': the field is a plain str (0.8.2-0.8.4), value lists the "
        "strings SpeculativeConfig compares self.method with or assigns to it, and any string is accepted. open: "
        "the annotation also admits any str (0.34.0: custom methods registered by plugins, checked at run time). "
        "validated: SpeculativeConfig is a pydantic dataclass, so a value outside the annotation is rejected when "
        "the config is built (a std dataclass does not check it)."
    ),
    "block_size_default": (
        "value: the KV-cache block size (tokens) when --block-size is not given, before any attention backend's "
        "own preference (e.g. FlashMLA forces 64). declared: CacheConfig's (0.8.2-0.8.4: EngineArgs') declared "
        "default; DEFAULT_BLOCK_SIZE: CacheConfig's class constant where present; resolved_in: where a None "
        "default becomes the value (the CUDA platform before CacheConfig had the constant)."
    ),
    "gpu_memory_utilization_default": (
        "value: the declared default of --gpu-memory-utilization (CacheConfig's; 0.8.2-0.8.4 EngineArgs'). Where "
        "it is None, resolution lists the values CacheConfig resolves it to, in order (when: the CacheConfig "
        "field that must be true, null = otherwise), and resolved_in the property that does it."
    ),
    "extensible_kv_cache": (
        "value: null when CacheConfig has no extensible-KV-cache field; else field (its name), default (declared), "
        "resolved_in (the functions that decide an unset value at run time) and set_false_in (the functions that "
        "turn it off at run time, e.g. where the driver lacks virtual memory management)."
    ),
}

_TYPING_MODULES = ("typing", "typing_extensions")
_FIELD_SPECIFIERS = {"dataclasses.field", "pydantic.Field", "pydantic.fields.Field"}
_DATACLASS_MAKERS = {"dataclasses.dataclass": "dataclasses", "pydantic.dataclasses.dataclass": "pydantic"}
_MAX_DEPTH = 12


class UndecidableConstruct(RuntimeError):
    """The extractor met a construct it cannot evaluate statically; it refuses to guess."""

    def __init__(self, version: str, path: str, construct: str, why: str) -> None:
        self.version = version
        self.path = path
        self.construct = construct
        super().__init__(
            f"vLLM {version}: {path}: {construct}: {why} -- the config-semantics extractor does not guess; "
            "teach vllm_fleet/vllm/extract/config_semantics.py this construct"
        )


# --------------------------------------------------------------------------
# Names: module-level bindings, followed through the release's imports
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """Where a module-level name is defined: a statement of the release, or a name outside it."""

    path: str
    node: ast.stmt | None
    external: str = ""
    """``typing.Literal`` for a name imported from outside the release (``path`` is then the importing file)."""


class Reader:
    """Static lookups in one release, each failure an ``UndecidableConstruct`` naming the release."""

    def __init__(self, src: ReleaseSource) -> None:
        self.src = src
        self.version = src.version

    def fail(self, path: str, construct: str, why: str) -> NoReturn:
        raise UndecidableConstruct(self.version, path, construct, why)

    def tree(self, path: str) -> ast.Module:
        try:
            return self.src.tree(path)
        except SyntaxError as exc:
            self.fail(path, "module", f"does not parse ({exc.msg}, line {exc.lineno})")

    def module(self, modname: str, construct: str) -> str:
        path = self.src.module_path(modname)
        if path is None:
            self.fail(modname.replace(".", "/"), construct, f"module {modname} is not in the release")
        return path

    def lookup(self, path: str, name: str, depth: int = 0) -> Binding | None:
        """The top-level binding of ``name`` in ``path`` (followed through ``from X import name``); None if the
        module does not bind it at top level (a builtin, or a name bound only inside ``if``/``try``)."""
        if depth > _MAX_DEPTH:
            self.fail(path, name, "import chain too deep")
        found: list[Binding | tuple[str, str]] = []
        for st in self.tree(path).body:
            if isinstance(st, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == name:
                if not any(_dotted(d).endswith("overload") for d in st.decorator_list):
                    found.append(Binding(path, st))
            elif isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets):
                found.append(Binding(path, st))
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == name:
                if st.value is not None:
                    found.append(Binding(path, st))
            elif isinstance(st, ast.ImportFrom):
                for alias in st.names:
                    if (alias.asname or alias.name) != name:
                        continue
                    mod = resolve_relative(module_name(path), st.level, st.module, path.endswith("/__init__.py"))
                    target = self.src.module_path(mod)
                    if target is not None:
                        found.append((target, alias.name))
                    elif mod == "vllm" or mod.startswith("vllm."):
                        self.fail(path, f"from {mod} import {alias.name}", "the module is not in the release")
                    else:
                        found.append(Binding(path, None, f"{mod}.{alias.name}"))
            elif isinstance(st, ast.Import):
                for alias in st.names:
                    if (alias.asname or alias.name.split(".")[0]) == name:
                        found.append(Binding(path, None, alias.name if alias.asname else name))
        if not found:
            return None
        if len(found) > 1:
            self.fail(path, name, f"bound {len(found)} times at module level")
        hit = found[0]
        if isinstance(hit, Binding):
            return hit
        target, imported = hit
        resolved = self.lookup(target, imported, depth + 1)
        if resolved is None:
            self.fail(target, imported, f"imported by {path} but not bound at the top level of {target}")
        return resolved

    def external(self, path: str, expr: ast.expr) -> str:
        """The dotted name outside the release that ``expr`` (a name or attribute) refers to, or ''."""
        if isinstance(expr, ast.Name):
            binding = self.lookup(path, expr.id)
            return binding.external if binding is not None else ""
        if isinstance(expr, ast.Attribute):
            base = self.external(path, expr.value)
            return f"{base}.{expr.attr}" if base else ""
        return ""

    def typing_name(self, path: str, expr: ast.expr) -> str:
        """``Literal`` when ``expr`` names ``typing.Literal`` (or typing_extensions'), ...; '' otherwise."""
        ext = self.external(path, expr)
        mod, _, attr = ext.rpartition(".")
        return attr if mod in _TYPING_MODULES else ""

    def find_class(self, modname: str, name: str) -> tuple[str, ast.ClassDef]:
        """The class ``modname.name`` as the engine imports it."""
        path = self.module(modname, name)
        binding = self.lookup(path, name)
        if binding is None or not isinstance(binding.node, ast.ClassDef):
            what = "not bound" if binding is None else f"bound to {binding.external or type(binding.node).__name__}"
            self.fail(path, f"{modname}.{name}", f"{what}, not a class of the release")
        return binding.path, binding.node

    # -- values --------------------------------------------------------------------------------------

    def constant(self, path: str, expr: ast.expr, construct: str, depth: int = 0) -> Any:
        """A literal (None, bool, int, float, str), a signed number, or a module-level name bound to one."""
        if depth > _MAX_DEPTH:
            self.fail(path, construct, "constant chain too deep")
        if isinstance(expr, ast.Constant) and (expr.value is None or isinstance(expr.value, (bool, int, float, str))):
            return expr.value
        if (
            isinstance(expr, ast.UnaryOp)
            and isinstance(expr.op, (ast.USub, ast.UAdd))
            and isinstance(expr.operand, ast.Constant)
            and isinstance(expr.operand.value, (int, float))
            and not isinstance(expr.operand.value, bool)
        ):
            return -expr.operand.value if isinstance(expr.op, ast.USub) else expr.operand.value
        if isinstance(expr, ast.Name):
            binding = self.lookup(path, expr.id)
            if binding is not None and isinstance(binding.node, (ast.Assign, ast.AnnAssign)):
                value = binding.node.value
                assert value is not None
                return self.constant(binding.path, value, construct, depth + 1)
        self.fail(path, construct, f"`{ast.unparse(expr)}` is not a literal the extractor can evaluate")

    def is_field_specifier(self, path: str, expr: ast.expr) -> bool:
        return self.external(path, expr) in _FIELD_SPECIFIERS

    def literal_values(self, path: str, expr: ast.expr, construct: str, depth: int = 0) -> list[Any]:
        """The values of a ``Literal[...]`` type: nested Literals, aliases (followed through imports) and unions of
        them are resolved; anything else is undecidable."""
        if depth > _MAX_DEPTH:
            self.fail(path, construct, "Literal alias chain too deep")
        if isinstance(expr, ast.Subscript):
            head = self.typing_name(path, expr.value)
            elts = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            if head == "Literal":
                out: list[Any] = []
                for elt in elts:
                    if isinstance(elt, ast.Constant) and (elt.value is None or isinstance(elt.value, (str, int, bool))):
                        out.append(elt.value)
                    else:
                        out.extend(self.literal_values(path, elt, construct, depth + 1))
                return out
            if head == "Union":
                return [v for elt in elts for v in self.literal_values(path, elt, construct, depth + 1)]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            return self.literal_values(path, expr.left, construct, depth + 1) + self.literal_values(
                path, expr.right, construct, depth + 1
            )
        if isinstance(expr, ast.Name):
            binding = self.lookup(path, expr.id)
            if binding is not None and isinstance(binding.node, (ast.Assign, ast.AnnAssign)):
                value = binding.node.value
                assert value is not None
                return self.literal_values(binding.path, value, f"{construct} -> {expr.id}", depth + 1)
            where = binding.external if binding is not None and binding.external else "not a module-level alias"
            self.fail(path, construct, f"`{expr.id}` cannot be resolved to a Literal ({where})")
        self.fail(path, construct, f"`{ast.unparse(expr)}` is not a Literal, a Literal alias or a union of them")

    def union_members(self, path: str, expr: ast.expr, construct: str) -> list[ast.expr]:
        """``A | B | None``, ``Optional[A]``, ``Union[A, B]`` -> [A, B] (None dropped); a string annotation is
        parsed first."""
        if isinstance(expr, ast.Constant) and expr.value is None:
            return []
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            try:
                parsed = ast.parse(expr.value, mode="eval").body
            except SyntaxError:
                self.fail(path, construct, f"string annotation {expr.value!r} does not parse")
            return self.union_members(path, parsed, construct)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            return self.union_members(path, expr.left, construct) + self.union_members(path, expr.right, construct)
        if isinstance(expr, ast.Subscript):
            head = self.typing_name(path, expr.value)
            if head == "Optional":
                return self.union_members(path, expr.slice, construct)
            if head == "Union":
                elts = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
                return [m for elt in elts for m in self.union_members(path, elt, construct)]
        return [expr]


def _dotted(expr: ast.expr) -> str:
    """``a.b.c`` for names and attributes, the callee for a call (a decorator with arguments)."""
    if isinstance(expr, ast.Call):
        return _dotted(expr.func)
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = _dotted(expr.value)
        return f"{base}.{expr.attr}" if base else ""
    return ""


# --------------------------------------------------------------------------
# Classes: dataclass kind, fields, class constants, methods
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: str
    annotation: ast.expr
    value: ast.expr | None
    doc: str
    classvar: bool


@dataclass
class ConfigClass:
    """One config class of a release: where it is and what its body declares."""

    reader: Reader
    path: str
    node: ast.ClassDef
    kind: str
    """``pydantic`` or ``dataclasses`` (a dataclass of that kind), '' (a plain class)."""
    fields: dict[str, Field] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.node.name}"

    def construct(self, member: str) -> str:
        return f"{self.node.name}.{member}"

    def init_fields(self) -> list[str]:
        """The names ``__init__`` accepts as keywords: not ClassVar, not ``_private``, not ``init=False``."""
        if not self.kind:
            self.reader.fail(self.path, self.node.name, "not a dataclass: its keys are not its class body")
        return [f.name for f in self.fields.values() if not f.classvar and not f.name.startswith("_") and self.init(f)]

    def option_names(self) -> list[str]:
        """The keyword arguments the class accepts: its init fields, or a plain class's ``__init__`` parameters."""
        if self.kind:
            return self.init_fields()
        args = self._init().args
        return [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg != "self"]

    def _init(self) -> ast.FunctionDef:
        init = next(
            (st for st in self.node.body if isinstance(st, ast.FunctionDef) and st.name == "__init__"),
            None,
        )
        if init is None:
            self.reader.fail(self.path, self.node.name, "a plain class without __init__")
        return init

    def spec_call(self, f: Field) -> ast.Call | None:
        """The ``field(...)``/``Field(...)`` call declaring ``f``; None for a plain default. A default that calls
        anything else is undecidable (it may return a field specifier, e.g. one with ``init=False``)."""
        value = f.value
        if not isinstance(value, ast.Call):
            return None
        if self.reader.is_field_specifier(self.path, value.func):
            return value
        self.reader.fail(self.path, self.construct(f.name), f"default `{ast.unparse(value)[:60]}` is a call")

    def init(self, f: Field) -> bool:
        call = self.spec_call(f)
        if call is None:
            return True
        for kw in call.keywords:
            if kw.arg == "init":
                if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
                    return kw.value.value
                self.reader.fail(self.path, self.construct(f.name), f"init={ast.unparse(kw.value)} is not a literal")
            if kw.arg is None:
                self.reader.fail(self.path, self.construct(f.name), "field(**...) hides init")
        return True

    def deprecated(self, f: Field) -> bool:
        if f.doc.lstrip().lower().startswith("deprecated"):
            return True
        call = self.spec_call(f)
        if call is not None:
            for kw in call.keywords:
                if kw.arg == "deprecated":
                    if isinstance(kw.value, ast.Constant):
                        return bool(kw.value.value)
                    self.reader.fail(self.path, self.construct(f.name), "Field(deprecated=...) is not a literal")
        return False

    def default(self, name: str) -> Any:
        """The declared default of a field (dataclass) or ``__init__`` parameter (plain class); ``_REQUIRED``
        for a plain class's parameter without a default."""
        if not self.kind:
            return self._init_param_default(name)
        f = self.fields.get(name)
        if f is None or f.classvar:
            self.reader.fail(self.path, self.construct(name), "no such field")
        construct = self.construct(name)
        if f.value is None:
            self.reader.fail(self.path, construct, "a field without a default")
        call = self.spec_call(f)
        if call is None:
            return self.reader.constant(self.path, f.value, construct)
        for kw in call.keywords:
            if kw.arg == "default":
                return self.reader.constant(self.path, kw.value, construct)
            if kw.arg == "default_factory":
                self.reader.fail(self.path, construct, "a default_factory default")
        if call.args and self.reader.external(self.path, call.func) != "dataclasses.field":
            return self.reader.constant(self.path, call.args[0], construct)  # pydantic Field(default, ...)
        self.reader.fail(self.path, construct, f"`{ast.unparse(call)}` declares no default")

    def _init_param_default(self, name: str) -> Any:
        args = self._init().args
        positional = [*args.posonlyargs, *args.args]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        pairs = list(zip(positional, defaults, strict=True)) + list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
        for arg, dflt in pairs:
            if arg.arg == name:
                if dflt is None:
                    return _REQUIRED
                return self.reader.constant(self.path, dflt, self.construct(f"__init__({name})"))
        self.reader.fail(self.path, self.construct("__init__"), f"no parameter {name}")

    def classvar(self, name: str) -> Any:
        """The value of a class constant (``X: ClassVar[int] = 16``, or a plain ``X = 16``); ``_ABSENT`` if none."""
        f = self.fields.get(name)
        if f is not None and f.classvar:
            if f.value is None:
                self.reader.fail(self.path, self.construct(name), "ClassVar without a value")
            return self.reader.constant(self.path, f.value, self.construct(name))
        for st in self.node.body:
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets):
                return self.reader.constant(self.path, st.value, self.construct(name))
        return _ABSENT

    def methods(self) -> Iterator[ast.FunctionDef]:
        for st in self.node.body:
            if isinstance(st, ast.FunctionDef):
                yield st


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_REQUIRED = _Marker("<required>")
_ABSENT = _Marker("<absent>")


def _dataclass_kind(reader: Reader, path: str, node: ast.ClassDef) -> str:
    """``pydantic``/``dataclasses`` when a decorator makes ``node`` a dataclass of that kind, '' for a plain
    class; a decorator the extractor cannot see through is undecidable."""
    kinds: set[str] = set()
    for deco in node.decorator_list:
        kinds |= _decorator_kinds(reader, path, deco.func if isinstance(deco, ast.Call) else deco, node.name)
    if len(kinds) > 1:
        reader.fail(path, node.name, f"decorated as both {sorted(kinds)} dataclasses")
    return kinds.pop() if kinds else ""


def _decorator_kinds(reader: Reader, path: str, expr: ast.expr, owner: str) -> set[str]:
    """A dataclass maker itself, or a function of the release that calls one (vLLM's ``config``)."""
    construct = f"@{ast.unparse(expr)} on {owner}"
    ext = reader.external(path, expr)
    if ext:
        if ext in _DATACLASS_MAKERS:
            return {_DATACLASS_MAKERS[ext]}
        reader.fail(path, construct, f"unknown decorator {ext}: it may or may not make a dataclass")
    if not isinstance(expr, ast.Name):
        reader.fail(path, construct, "not a name the extractor can follow")
    binding = reader.lookup(path, expr.id)
    if binding is None or not isinstance(binding.node, ast.FunctionDef):
        reader.fail(path, construct, "not a function of the release")
    fn = binding.node
    kinds: set[str] = set()
    for call in ast.walk(fn):
        if isinstance(call, ast.Call) and _dotted(call.func).split(".")[-1] == "dataclass":
            ext = reader.external(binding.path, call.func)
            if ext in _DATACLASS_MAKERS:
                kinds.add(_DATACLASS_MAKERS[ext])
    return kinds  # empty: a decorator that only checks or registers the class


def config_class(reader: Reader, modname: str, name: str) -> ConfigClass:
    path, node = reader.find_class(modname, name)
    if node.bases or node.keywords:
        bases = ", ".join(ast.unparse(b) for b in [*node.bases, *node.keywords])
        reader.fail(path, node.name, f"has bases ({bases}) whose fields the extractor does not follow")
    cls = ConfigClass(reader, path, node, _dataclass_kind(reader, path, node))
    body = node.body
    for i, st in enumerate(body):
        if isinstance(st, ast.AnnAssign):
            if not isinstance(st.target, ast.Name):
                reader.fail(path, f"{node.name}.{ast.unparse(st.target)}", "an annotated non-name target")
            nxt = body[i + 1] if i + 1 < len(body) else None
            doc = ""
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                doc = nxt.value.value
            name = st.target.id
            if name in cls.fields:
                reader.fail(path, f"{node.name}.{name}", "annotated twice in the class body")
            cls.fields[name] = Field(name, st.annotation, st.value, doc, _is_classvar(reader, path, st.annotation))
        elif isinstance(st, (ast.If, ast.For, ast.While, ast.With, ast.Try)) and any(
            isinstance(n, ast.AnnAssign) for n in ast.walk(st)
        ):
            reader.fail(path, f"{node.name} line {st.lineno}", "fields declared inside a compound statement")
    return cls


def _is_classvar(reader: Reader, path: str, annotation: ast.expr) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        text = annotation.value
        try:
            annotation = ast.parse(text, mode="eval").body
        except SyntaxError:
            reader.fail(path, text, "string annotation does not parse")
    head = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    if _dotted(head).split(".")[-1] != "ClassVar":
        return False  # only a name spelled ClassVar can be one; other names are not followed
    if reader.typing_name(path, head) != "ClassVar":
        reader.fail(path, ast.unparse(annotation), "a ClassVar that is not typing.ClassVar")
    return True


def _qualified_functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    def visit(nodes: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for st in nodes:
            if isinstance(st, ast.ClassDef):
                yield from visit(st.body, f"{prefix}{st.name}.")
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}{st.name}", st
                yield from visit(st.body, f"{prefix}{st.name}.")

    yield from visit(tree.body, "")


def _own_nodes(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``fn``'s body, nested functions and classes excluded (they are reported on their own)."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.append(child)


def _is_self_attr(expr: ast.expr, attr: str) -> bool:
    return (
        isinstance(expr, ast.Attribute)
        and isinstance(expr.value, ast.Name)
        and expr.value.id == "self"
        and (expr.attr == attr)
    )


# --------------------------------------------------------------------------
# The five items
# --------------------------------------------------------------------------

Item = dict[str, Any]
"""One release's answer for one item: ``value``, the item's details, ``source`` (file:construct)."""


def speculative_keys(spec: ConfigClass) -> Item:
    keys = spec.init_fields()
    deprecated = [k for k in keys if spec.deprecated(spec.fields[k])]
    rejected = _rejected_when_set(spec, keys)
    return {"value": sorted(keys), "deprecated": sorted(deprecated), "rejected": rejected, "source": spec.where}


def _rejected_when_set(spec: ConfigClass, keys: list[str]) -> list[str]:
    """The keys a method of the class refuses outright: ``if self.<key> is not None: raise ...``."""
    out: set[str] = set()
    for fn in spec.methods():
        for node in ast.walk(fn):
            if not (isinstance(node, ast.If) and node.body and isinstance(node.body[0], ast.Raise)):
                continue
            test = node.test
            if (
                isinstance(test, ast.Compare)
                and isinstance(test.left, ast.Attribute)
                and _is_self_attr(test.left, test.left.attr)
                and test.left.attr in keys
                and len(test.ops) == 1
                and isinstance(test.ops[0], ast.IsNot)
                and isinstance(test.comparators[0], ast.Constant)
                and test.comparators[0].value is None
            ):
                out.add(test.left.attr)
    return sorted(out)


def speculative_methods(reader: Reader, spec: ConfigClass) -> Item:
    f = spec.fields.get("method")
    construct = spec.construct("method")
    if f is None or f.classvar:
        reader.fail(spec.path, construct, "SpeculativeConfig has no method field")
    values: list[Any] = []
    open_str = False
    sources: list[str] = []
    for member in reader.union_members(spec.path, f.annotation, construct):
        if isinstance(member, ast.Name) and member.id == "str" and reader.lookup(spec.path, "str") is None:
            open_str = True
            continue
        values.extend(reader.literal_values(spec.path, member, construct))
        if isinstance(member, ast.Name):
            binding = reader.lookup(spec.path, member.id)
            sources.append(f"{binding.path if binding else spec.path}:{member.id}")
        else:
            sources.append(f"{spec.path}:{construct}")
    validated = spec.kind == "pydantic"
    if values:
        if not all(isinstance(v, str) for v in values):
            reader.fail(spec.path, construct, f"non-string method values {values!r}")
        return {
            "value": sorted(set(values)),
            "kind": "literal",
            "open": open_str,
            "validated": validated,
            "source": ", ".join(sources),
        }
    if not open_str:
        reader.fail(spec.path, construct, f"annotation `{ast.unparse(f.annotation)}` names no method values")
    recognized = _recognized_methods(spec)
    if not recognized:
        reader.fail(spec.path, construct, "a plain str method the class never compares or assigns: undecidable")
    return {
        "value": recognized,
        "kind": "recognized",
        "open": True,
        "validated": validated,
        "source": f"{spec.where}.method",
    }


def _recognized_methods(spec: ConfigClass) -> list[str]:
    """The strings a str-typed ``method`` is compared with (``==``, ``in``) or set to in the class's methods."""
    out: set[str] = set()
    for fn in spec.methods():
        for node in ast.walk(fn):
            if isinstance(node, ast.Compare) and _is_self_attr(node.left, "method"):
                for comp in node.comparators:
                    elts = comp.elts if isinstance(comp, (ast.Tuple, ast.List, ast.Set)) else [comp]
                    out.update(e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
            elif isinstance(node, ast.Assign) and any(_is_self_attr(t, "method") for t in node.targets):
                out.update(_string_outcomes(node.value))
    return sorted(out)


def _string_outcomes(expr: ast.expr) -> list[str]:
    """The string literals an expression can evaluate to: a literal, or the branches of ``a if c else b``."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return [expr.value]
    if isinstance(expr, ast.IfExp):
        return _string_outcomes(expr.body) + _string_outcomes(expr.orelse)
    return []


def _declared(reader: Reader, cache: ConfigClass, engine: ConfigClass, name: str) -> tuple[Any, str]:
    """The declared default of a CacheConfig option, checked against EngineArgs' (the CLI's default): CacheConfig's
    where it declares one, EngineArgs' where CacheConfig's ``__init__`` requires the argument (0.8.2-0.8.4)."""
    declared = cache.default(name)
    source = f"{cache.where}.{name}"
    ef = engine.fields.get(name)
    if ef is None or ef.classvar:
        if declared is _REQUIRED:
            reader.fail(engine.path, engine.construct(name), f"CacheConfig requires {name}, EngineArgs has no default")
        return declared, source
    value = ef.value
    refers = (
        isinstance(value, ast.Attribute)
        and value.attr == name
        and isinstance(value.value, ast.Name)
        and value.value.id == cache.node.name
    )
    if refers:
        if declared is _REQUIRED:
            reader.fail(engine.path, engine.construct(name), "refers to a CacheConfig default that does not exist")
        return declared, source
    engine_default = engine.default(name)
    if declared is _REQUIRED:
        return engine_default, f"{engine.where}.{name}"
    if engine_default != declared or type(engine_default) is not type(declared):
        reader.fail(
            engine.path,
            engine.construct(name),
            f"EngineArgs default {engine_default!r} differs from {cache.construct(name)} default {declared!r}",
        )
    return declared, source


def block_size_default(reader: Reader, cache: ConfigClass, engine: ConfigClass) -> Item:
    declared, source = _declared(reader, cache, engine, "block_size")
    constant = cache.classvar("DEFAULT_BLOCK_SIZE")
    item: Item = {"value": None, "declared": declared, "DEFAULT_BLOCK_SIZE": None, "resolved_in": None}
    if constant is not _ABSENT:
        if not isinstance(constant, int) or isinstance(constant, bool):
            reader.fail(cache.path, cache.construct("DEFAULT_BLOCK_SIZE"), f"not an int: {constant!r}")
        item["DEFAULT_BLOCK_SIZE"] = constant
    if declared is not None:
        if not isinstance(declared, int) or isinstance(declared, bool):
            reader.fail(cache.path, cache.construct("block_size"), f"default {declared!r} is not an int")
        item["value"] = declared
    elif constant is not _ABSENT:
        sites = [
            f"{cache.where}.{fn.name}"
            for fn in cache.methods()
            if any(_assigns_from(node, "block_size", "DEFAULT_BLOCK_SIZE") for node in ast.walk(fn))
        ]
        if not sites:
            reader.fail(cache.path, cache.construct("DEFAULT_BLOCK_SIZE"), "declared but never applied to block_size")
        item["value"] = constant
        item["resolved_in"] = ", ".join(sites)
    else:
        value, site = _platform_block_size(reader)
        item["value"] = value
        item["resolved_in"] = site
    item["source"] = source
    return item


def _assigns_from(node: ast.AST, target: str, constant: str) -> bool:
    """``self.<target> = self.<constant>`` or ``object.__setattr__(self, "<target>", self.<constant>)``."""
    if isinstance(node, ast.Assign) and any(_is_self_attr(t, target) for t in node.targets):
        return _is_self_attr(node.value, constant)
    if isinstance(node, ast.Call) and _dotted(node.func).endswith("__setattr__") and len(node.args) == 3:
        name, value = node.args[1], node.args[2]
        return isinstance(name, ast.Constant) and name.value == target and _is_self_attr(value, constant)
    return False


def _platform_block_size(reader: Reader) -> tuple[int, str]:
    """The CUDA platform's ``if <cache_config>.block_size is None: <cache_config>.block_size = N``."""
    path = reader.module("vllm.platforms.cuda", "block_size default")
    found: list[tuple[int, str]] = []
    for qual, fn in _qualified_functions(reader.tree(path)):
        for node in _own_nodes(fn):
            if not (isinstance(node, ast.If) and _tests_none(node.test, "block_size")):
                continue
            for st in node.body:
                if isinstance(st, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and t.attr == "block_size" for t in st.targets
                ):
                    value = reader.constant(path, st.value, f"{qual}: block_size = {ast.unparse(st.value)}")
                    found.append((value, f"{path}:{qual}"))
    if len(found) != 1:
        reader.fail(
            path,
            "block_size default",
            f"CacheConfig declares None and no DEFAULT_BLOCK_SIZE; the CUDA platform sets it {len(found)} times",
        )
    return found[0]


def _tests_none(test: ast.expr, attr: str) -> bool:
    """``x.<attr> is None`` alone or as one operand of an ``and``."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return any(
        isinstance(p, ast.Compare)
        and isinstance(p.left, ast.Attribute)
        and p.left.attr == attr
        and len(p.ops) == 1
        and isinstance(p.ops[0], ast.Is)
        and isinstance(p.comparators[0], ast.Constant)
        and p.comparators[0].value is None
        for p in parts
    )


def gpu_memory_utilization_default(reader: Reader, cache: ConfigClass, engine: ConfigClass) -> Item:
    name = "gpu_memory_utilization"
    declared, source = _declared(reader, cache, engine, name)
    constant = cache.classvar("DEFAULT_GPU_MEMORY_UTILIZATION")
    item: Item = {
        "value": declared,
        "DEFAULT_GPU_MEMORY_UTILIZATION": None if constant is _ABSENT else constant,
        "resolution": None,
        "resolved_in": None,
    }
    if declared is None:
        resolvers = [fn for fn in cache.methods() if _guards_own_value(fn, name)]
        if len(resolvers) != 1:
            reader.fail(
                cache.path,
                cache.construct(name),
                f"declared None and {len(resolvers)} CacheConfig methods resolve it (need exactly one)",
            )
        fn = resolvers[0]
        item["resolution"] = _resolution_cases(reader, cache, fn, name)
        item["resolved_in"] = f"{cache.where}.{fn.name}"
    elif not isinstance(declared, float | int) or isinstance(declared, bool):
        reader.fail(cache.path, cache.construct(name), f"default {declared!r} is not a number")
    item["source"] = source
    return item


def _guards_own_value(fn: ast.FunctionDef, name: str) -> bool:
    """Whether ``fn`` starts (after its docstring) with ``if self.<name> is not None: return self.<name>``."""
    body = _without_docstring(fn.body)
    if not body or not isinstance(body[0], ast.If):
        return False
    first = body[0]
    test = first.test
    return (
        isinstance(test, ast.Compare)
        and _is_self_attr(test.left, name)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.IsNot)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
        and len(first.body) == 1
        and isinstance(first.body[0], ast.Return)
        and first.body[0].value is not None
        and _is_self_attr(first.body[0].value, name)
        and not first.orelse
    )


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1:]
    return body


def _resolution_cases(reader: Reader, cache: ConfigClass, fn: ast.FunctionDef, name: str) -> list[dict[str, Any]]:
    """``if self.<flag>: return <value>`` ... ``return <value>``, after the guard, as [{when, value}]."""
    construct = f"{cache.node.name}.{fn.name}"
    cases: list[dict[str, Any]] = []
    for st in _without_docstring(fn.body)[1:]:
        if isinstance(st, ast.If) and not st.orelse and len(st.body) == 1 and isinstance(st.body[0], ast.Return):
            if not (isinstance(st.test, ast.Attribute) and isinstance(st.test.value, ast.Name)):
                reader.fail(cache.path, construct, f"condition `{ast.unparse(st.test)}` is not a plain self.<field>")
            if st.test.value.id != "self" or st.test.attr not in cache.fields:
                reader.fail(cache.path, construct, f"condition `{ast.unparse(st.test)}` is not a field of the class")
            cases.append({"when": st.test.attr, "value": _resolved_value(reader, cache, st.body[0], construct)})
        elif isinstance(st, ast.Return):
            cases.append({"when": None, "value": _resolved_value(reader, cache, st, construct)})
            return cases
        else:
            reader.fail(cache.path, construct, f"line {st.lineno}: `{ast.unparse(st)[:60]}` is not a resolution case")
    reader.fail(cache.path, construct, f"no final return: {name} may stay None")


def _resolved_value(reader: Reader, cache: ConfigClass, ret: ast.Return, construct: str) -> Any:
    expr = ret.value
    if expr is None:
        reader.fail(cache.path, construct, "returns None")
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in ("self", "cls"):
        value = cache.classvar(expr.attr)
        if value is _ABSENT:
            reader.fail(cache.path, construct, f"returns `{ast.unparse(expr)}`, not a class constant")
        return value
    return reader.constant(cache.path, expr, construct)


def extensible_kv_cache(reader: Reader, cache: ConfigClass, engine: ConfigClass) -> Item:
    names = [n for n in cache.option_names() if "extensible" in n]
    if not names:
        return {"value": None, "source": None}
    if len(names) > 1:
        reader.fail(cache.path, cache.node.name, f"several extensible-KV-cache fields: {names}")
    name = names[0]
    default, source = _declared(reader, cache, engine, name)
    if default is not None and not isinstance(default, bool):
        reader.fail(cache.path, cache.construct(name), f"default {default!r} is not a bool")
    decided, set_false = _runtime_assignments(reader, name)
    if default is None and not decided:
        reader.fail(cache.path, cache.construct(name), "declared None and no function decides it")
    value = {"field": name, "default": default, "resolved_in": decided, "set_false_in": set_false}
    return {"value": value, "source": source}


def _runtime_assignments(reader: Reader, attr: str) -> tuple[list[str], list[str]]:
    """Functions of the release that assign ``<obj>.<attr>``: computed values, and the literal ``False``."""
    decided: set[str] = set()
    set_false: set[str] = set()
    for path in sorted(reader.src.names):
        if attr not in reader.src.text(path):
            continue
        for qual, fn in _qualified_functions(reader.tree(path)):
            for node in _own_nodes(fn):
                if not isinstance(node, ast.Assign):
                    continue
                if not any(isinstance(t, ast.Attribute) and t.attr == attr for t in node.targets):
                    continue
                where = f"{path}:{qual}"
                if isinstance(node.value, ast.Constant) and node.value.value is False:
                    set_false.add(where)
                elif isinstance(node.value, ast.Constant):
                    reader.fail(path, f"{qual}: {attr} = {node.value.value!r}", "a literal other than False")
                else:
                    decided.add(where)
    return sorted(decided), sorted(set_false)


# --------------------------------------------------------------------------
# One release, the table over releases, the report
# --------------------------------------------------------------------------


@dataclass
class ReleaseConfig:
    version: str
    items: dict[str, Item]


def extract_version(src: ReleaseSource) -> ReleaseConfig:
    """The five items of one release; ``UndecidableConstruct`` where the source says something unknown."""
    reader = Reader(src)
    spec = config_class(reader, "vllm.config", "SpeculativeConfig")
    cache = config_class(reader, "vllm.config", "CacheConfig")
    engine = config_class(reader, "vllm.engine.arg_utils", "EngineArgs")
    items = {
        "speculative_keys": speculative_keys(spec),
        "speculative_methods": speculative_methods(reader, spec),
        "block_size_default": block_size_default(reader, cache, engine),
        "gpu_memory_utilization_default": gpu_memory_utilization_default(reader, cache, engine),
        "extensible_kv_cache": extensible_kv_cache(reader, cache, engine),
    }
    return ReleaseConfig(src.version, items)


def _sig(item: Item) -> str:
    return json.dumps(item, sort_keys=True)


def build_table(results: list[ReleaseConfig]) -> dict[str, Any]:
    """One row per run of consecutive releases with the same answer (value, details and source)."""
    results = sorted(results, key=lambda r: version_key(r.version))
    table: dict[str, Any] = {
        "schema": 1,
        "generated_by": GENERATED_BY,
        "source": "PyPI vllm sdists/wheels (the flag extractor's cache), read statically",
        "notes": dict(NOTES),
        "versions": [r.version for r in results],
    }
    for name in ITEMS:
        rows: list[dict[str, Any]] = []
        for r in results:
            item = r.items[name]
            if rows and _sig({k: v for k, v in rows[-1].items() if k not in ("since", "until")}) == _sig(item):
                rows[-1]["until"] = r.version
            else:
                rows.append({"since": r.version, "until": r.version, **item})
        table[name] = rows
    return table


def _describe(old: Any, new: Any) -> str:
    if isinstance(old, list) and isinstance(new, list) and all(isinstance(x, str) for x in [*old, *new]):
        added = [x for x in new if x not in old]
        removed = [x for x in old if x not in new]
        parts = [f"added {', '.join(added)}"] if added else []
        parts += [f"removed {', '.join(removed)}"] if removed else []
        return "; ".join(parts) or "reordered"
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [k for k in {**old, **new} if old.get(k) != new.get(k)]
        return "; ".join(f"{k}: {_describe(old.get(k), new.get(k))}" for k in keys)
    return f"{json.dumps(old)} -> {json.dumps(new)}"


def change_report(table: dict[str, Any]) -> list[str]:
    """One line per item's first row and per change (``speculative_methods: 0.33.0 value: removed medusa``)."""
    lines: list[str] = []
    for name in ITEMS:
        rows: list[dict[str, Any]] = table[name]
        first = rows[0]
        if first["source"] is None:
            summary = "absent"
        elif isinstance(first["value"], list):
            summary = f"{len(first['value'])} values ({first['source']})"
        else:
            summary = f"{json.dumps(first['value'])} ({first['source']})"
        lines.append(f"{name}: {first['since']} {summary}")
        for prev, row in itertools.pairwise(rows):
            diffs = []
            for key in row:
                if key in ("since", "until") or prev.get(key) == row.get(key):
                    continue
                diffs.append(f"{key}: {_describe(prev.get(key), row.get(key))}")
            lines.append(f"  {row['since']}: " + " | ".join(diffs))
    return lines


def print_report(table: dict[str, Any], elapsed: float) -> None:
    versions = table["versions"]
    print(f"config semantics of {len(versions)} releases ({versions[0]}..{versions[-1]}) in {elapsed:.1f}s")
    for line in change_report(table):
        print(line)


__all__ = [
    "GENERATED_BY",
    "ITEMS",
    "ReleaseConfig",
    "UndecidableConstruct",
    "build_table",
    "change_report",
    "extract_version",
    "print_report",
]
