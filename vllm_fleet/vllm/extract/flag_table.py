"""One release's ``vllm serve`` arguments, and the table over releases."""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from vllm_fleet.vllm.extract.flag_interp import Frame, Interp, Project
from vllm_fleet.vllm.extract.flag_kwargs import KwargsFeatures, sort_key
from vllm_fleet.vllm.extract.flag_values import (
    UNKNOWN,
    ActionRef,
    ClassRef,
    EnumMember,
    Ext,
    FuncRef,
    LiteralT,
    Parser,
    TypeFn,
)
from vllm_fleet.vllm.extract.pysource import ReleaseSource
from vllm_fleet.vllm.extract.releases import print_warnings

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
            choices = sorted({c for c in choices if isinstance(c, (str, int, float))}, key=sort_key) or None
    metavar = kw.get("metavar")
    suggested: list[Any] | None = None
    if choices is None and isinstance(metavar, list):
        listed = {c for c in metavar if isinstance(c, (str, int, float)) and c != "None"}
        suggested = sorted(listed, key=sort_key)
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
        "group": raw.get("group"),
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
class ReleaseFlags:
    version: str
    artefact: str
    args: dict[str, dict[str, Any]]
    warnings: list[str]
    config_file: dict[str, Any]
    features: dict[str, Any]


def extract_version(source: ReleaseSource) -> ReleaseFlags:
    """Every argument ``vllm serve`` of this release accepts, by dest, read from its own parser-building code."""
    version = source.version
    project = Project(source)
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
    return ReleaseFlags(
        version=version,
        artefact=source.artefact,
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
    "group",
)  # fmt: skip


def _spec_tuple(spec: dict[str, Any]) -> str:
    return json.dumps({k: spec.get(k) for k in SPEC_KEYS}, sort_keys=True)


def build_table(results: list[ReleaseFlags]) -> dict[str, Any]:
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
                    ("group", "group"),
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
            "group": latest["group"],
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


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def print_report(table: dict[str, Any], results: list[ReleaseFlags], elapsed: float) -> None:
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
    print_warnings({r.version: r.warnings for r in results if r.warnings}, limit=12)
