"""The values the flag reader's interpreter computes with (modules, classes, functions, parsers, argparse kwargs).

``UNKNOWN`` is every value the static reading cannot decide (a call into torch, ``sys.argv``, ...).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any


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
    group: str | None = None
    """The title of the argument group this parser adds to (vLLM names each after its config class:
    ``ModelConfig``, ``CacheConfig``...); None for the parser itself or an untitled group."""


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


class ReturnValue(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class BreakLoop(Exception):
    pass


class ContinueLoop(Exception):
    pass


BUILTIN_NAMES = {
    "list", "dict", "tuple", "set", "frozenset", "sorted", "len", "str", "int", "float",
    "bool", "isinstance", "getattr", "hasattr", "super", "type", "range", "enumerate",
    "zip", "any", "all", "min", "max", "reversed", "print", "repr", "object",
}  # fmt: skip


@dataclass(frozen=True)
class Hint:
    kind: str  # bool int float str none dict list tuple set literal dataclass other any
    args: tuple[Any, ...] = ()
    name: str = ""
