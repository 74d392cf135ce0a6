"""vLLM's ``get_kwargs`` (dataclass field type hint -> argparse kwargs), re-implemented per release."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_fleet.vllm.extract.flag_values import UNKNOWN, ActionRef, Hint, TypeFn

if TYPE_CHECKING:
    from vllm_fleet.vllm.extract.flag_interp import Project


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
        return TypeFn(_py_type_name(vals[0]) if vals else "str"), sorted(vals, key=sort_key)
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


def sort_key(v: Any) -> tuple[str, Any]:
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
        vals = sorted(lit.args, key=sort_key)
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
