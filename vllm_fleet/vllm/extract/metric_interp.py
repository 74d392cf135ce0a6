"""Every Prometheus metric a release creates, found by a path-sensitive static reading of its source.

Every call that constructs a ``prometheus_client`` metric (``Counter``/``Gauge``/``Histogram``/``Summary``/
``Info``/``Enum``, also through vLLM's ``self._counter_cls``-style indirections) with a ``vllm:`` name is found in
every module of the release, and a small abstract interpreter evaluates its arguments: names built from
variables, f-strings, loops and comprehensions over literal lists, label lists such as ``labelnames + ["engine"]``,
literal buckets. Each value is a list of alternatives, each with the path conditions under which it holds
(enclosing ``if``\\ s, early ``return`` guards), evaluated against vLLM's defaults (``SWITCHES``).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from vllm_fleet.vllm.extract.metric_conditions import (
    MAX_FEATURES,
    Cond,
    Scenario,
    consistent,
    merge_conds,
)
from vllm_fleet.vllm.extract.pysource import (
    ReleaseSource,
    assignment,
    compare,
    is_hashable,
    module_name,
    resolve_relative,
)

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
class ClassName:
    name: str


@dataclass(frozen=True)
class ModuleName:
    name: str


@dataclass(frozen=True)
class InfoDict:
    """``config.metrics_info()``: the config's ``__dict__`` as str labels (plus keys vLLM adds)."""

    source: str
    keys: tuple[str, ...]


Alt = tuple[Any, tuple[Cond, ...]]
"""One possible value of an expression, and the path conditions under which it has it."""
MAX_ALTS = 24
MAX_LOOP = 64
_ENABLED = "<enabled>"


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


def load_module(src: ReleaseSource, path: str) -> ModuleInfo:
    tree = src.tree(path)
    info = ModuleInfo(path=path, modname=module_name(path), tree=tree, lines=src.text(path).splitlines())
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
                    mod = resolve_relative(info.modname, st.level, st.module, is_pkg)
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


class MetricScan:
    """One release: modules on demand, the metric definitions found, and who instantiates which class."""

    def __init__(self, src: ReleaseSource) -> None:
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
            return [(ClassName(name), ())]
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
                return [(ModuleName(target), ())]
            if target in ("prometheus_client", "prometheus_client.metrics") and attr in METRIC_KINDS:
                return [(MetricCtor(METRIC_KINDS[attr]), ())]
            if target.startswith("vllm") and depth < 6:
                other = self.module_by_name(target)
                if other is not None:
                    return self.resolve_global(other, attr, depth + 1)
                sub = self.module_by_name(f"{target}.{attr}")
                if sub is not None:
                    return [(ModuleName(f"{target}.{attr}"), ())]
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
                if isinstance(val, ClassName):
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
            parts = module_name(path).split(".")
            for i in range(1, len(parts)):
                pkg = self.src.module_path(".".join(parts[:i]))
                if pkg and pkg not in seen:
                    todo.append(pkg)
            try:
                tree = self.src.tree(path)
            except SyntaxError:
                continue
            for target in _module_level_imports(tree, module_name(path), path.endswith("/__init__.py")):
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
                    mod = resolve_relative(modname, st.level, st.module, is_pkg)
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


class Ctx:
    """Evaluation of one function body (or a module body) with path conditions."""

    def __init__(
        self, project: MetricScan, mod: ModuleInfo, cls: ast.ClassDef | None, func: str, env: dict[str, list[Alt]]
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
            elif (assigned := assignment(st)) is not None:
                targets, value = assigned
                vals = self.eval(value, conds)
                for t in targets:
                    self.bind(t, vals, conds)
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
            self.walk_block(st.body, merge_conds(conds, elem[1]))
            self.stmt = stmt
        self.walk_block(st.orelse, conds)

    def bind(self, target: ast.expr, vals: list[Alt], conds: tuple[Cond, ...]) -> None:
        vals = [(v, merge_conds(conds, c)) for v, c in vals]
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
            return compare(node.ops[0], left, right)
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
                if len(kk) != 1 or isinstance(kk[0][0], Unknown) or not is_hashable(kk[0][0]):
                    return [(Unknown(ast.unparse(node)), ())]
                out[kk[0][0]] = vv[0][0] if len(vv) == 1 else Unknown(ast.unparse(v))
            return [(out, ())]
        if isinstance(node, ast.BinOp):
            res: list[Alt] = []
            for (lv, lc), (rv, rc) in itertools.product(self.eval(node.left, conds), self.eval(node.right, conds)):
                if consistent(lc, rc):
                    res.append((_binop(node.op, lv, rv, node), merge_conds(lc, rc)))
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
            body = [(v, merge_conds((test,), vc)) for v, vc in self.eval(node.body, (*conds, test))]
            neg = test.negate()
            other = [(v, merge_conds((neg,), vc)) for v, vc in self.eval(node.orelse, (*conds, neg))]
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
            if isinstance(v, ClassName):
                where = self.p.find_class(self.mod, v.name)
                attr = self.p.class_attr(where[0], where[1], node.attr) if where else None
                if attr is not None:
                    res.extend((av, merge_conds(c, ac)) for av, ac in attr)
                    continue
            if isinstance(v, ModuleName):
                if v.name in ("prometheus_client", "prometheus_client.metrics") and node.attr in METRIC_KINDS:
                    res.append((MetricCtor(METRIC_KINDS[node.attr]), c))
                    continue
                mod = self.p.module_by_name(v.name) if v.name.startswith("vllm") else None
                if mod is not None:
                    res.extend((rv, merge_conds(c, rc)) for rv, rc in self.p.resolve_global(mod, node.attr))
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
                if not consistent(c, vc):
                    continue
                if isinstance(s, str) and isinstance(v, (str, int, float)) and part.format_spec is None:
                    nxt.append((s + str(v), merge_conds(c, vc)))
                else:
                    nxt.append((Unknown(ast.unparse(node)), merge_conds(c, vc)))
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
            if not consistent(*(c for _, c in combo)):
                continue
            items: list[Any] = []
            cs: list[Cond] = []
            for v, c in combo:
                if isinstance(v, tuple) and len(v) == 2 and v[0] == "*" and isinstance(v[1], list):
                    items.extend(v[1])
                else:
                    items.append(v)
                cs.extend(c)
            out.append((tuple(items) if isinstance(node, ast.Tuple) else items, merge_conds(cs)))
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
                if isinstance(v, dict) and is_hashable(k) and k in v:
                    res.append((v[k], merge_conds(c, kc)))
                    continue
                if isinstance(v, (list, tuple)) and isinstance(k, int) and -len(v) <= k < len(v):
                    res.append((v[k], merge_conds(c, kc)))
                    continue
            except TypeError:
                pass
            res.append((Unknown(ast.unparse(node)), merge_conds(c, kc)))
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
                ecs = merge_conds(cs, elem[1])
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
            if isinstance(f, ClassName):
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
            if not consistent(conds, nc, dc, lc):
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
                    conds=merge_conds(conds, nc, dc, lc),
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
            va = [(v, merge_conds(c, (cond,))) for v, c in old]
        if vb is old:
            vb = [(v, merge_conds(c, (cond.negate(),))) for v, c in old]
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
