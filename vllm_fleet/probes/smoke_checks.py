"""Checks of a node's `/metrics` against its decode profile: pure functions over parsed scrapes.

Metric names come from the metric table keyed by vLLM version (vllm/metrics_table.py), never from memory. A scrape
comes from a node, so it is untrusted: it is parsed line by line in the text exposition format (family names as
prometheus_client's parser gives them: a counter without its ``_total``), refused whole only when larger than
``MAX_SCRAPE_BYTES``, and every line that is not a sample (bad syntax, a NaN, a histogram bucket whose ``le`` is
missing or not a number, a negative counter) is a *problem* of the scrape, reported as a failed check, never an
exception. Samples are kept compactly (their label text undecoded until asked for), so a scrape's memory stays a
small multiple of its size. Used by `vllm-fleet smoke` (live) and `vllm-fleet metrics check` (saved scrapes).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.planner import Plan
from vllm_fleet.vllm import memory_model, metrics_table

Status = Literal["pass", "fail", "skip", "warn"]

MAX_SCRAPE_BYTES = 32 * 1024 * 1024
"""Largest scrape parsed (32 MiB: a 70B model's /metrics with every histogram is well under 1 MiB)."""
MAX_PROBLEMS = 20
"""Problems of one scrape kept word for word; beyond that they are counted."""
START_TIME = "process_start_time_seconds"
"""The gauge every prometheus_client process exposes (vLLM's included): when the process started."""


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


class ScrapeError(ValueError):
    """A scrape refused whole (over the size cap)."""


_LABEL_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"'
_SAMPLE = re.compile(
    rf"[ \t]*([a-zA-Z_:][a-zA-Z0-9_:]*)"
    rf"(?:\{{[ \t]*((?:{_LABEL_PAIR}[ \t]*(?:,[ \t]*)?)*)\}})?"
    r"[ \t]+(\S+)(?:[ \t]+-?[0-9]+)?[ \t]*\r?$"
)
_LE = re.compile(r'(?:^|,)[ \t]*le[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")
_SUFFIXES = {
    "counter": ("_total", "_created", ""),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created", ""),
}


def _decode(raw: str) -> dict[str, str]:
    """``{a="x",b="y\\"z"}``'s inner text as a dict, escapes undone."""
    return {k: _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), v) for k, v in _LABEL.findall(raw)}


def _shown(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


class _Samples(Mapping[str, list[tuple[dict[str, str], float]]]):
    """``{sample_name: [(labels, value), …]}``, the labels decoded when a name is looked up."""

    def __init__(self, rows: dict[str, list[tuple[str, float]]]) -> None:
        self._rows = rows

    def __getitem__(self, name: str) -> list[tuple[dict[str, str], float]]:
        return [(_decode(raw), value) for raw, value in self._rows[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


@dataclass
class Scrape:
    """Samples by exposed name (``samples[name]``: ``[(labels, value), …]``), family names and types, the names of
    the samples that only grow (counters, histogram counts and buckets), and what in the text was not a sample."""

    rows: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    """{sample_name: [(label text, value), …]}: the compact form ``samples`` decodes."""
    families: set[str] = field(default_factory=set)
    types: dict[str, str] = field(default_factory=dict)
    monotonic: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    more_problems: int = 0

    @property
    def samples(self) -> _Samples:
        return _Samples(self.rows)

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)
        else:
            self.more_problems += 1

    def total(self, name: str, **match: str) -> float | None:
        rows = self.rows.get(name, [])
        if match:
            values = [v for raw, v in rows if all(_decode(raw).get(k) == x for k, x in match.items())]
        else:
            values = [v for _, v in rows]
        return sum(values) if values else None

    def buckets(self, name: str) -> list[tuple[float, float]]:
        """(upper bound, cumulative count) of a histogram, summed over label sets (engines, models)."""
        acc: dict[float, float] = {}
        for raw, value in self.rows.get(f"{name}_bucket", []):
            le = _decode(raw).get("le")
            if le is None:
                continue  # reported as a problem when parsed
            try:
                bound = float(le)
            except ValueError:
                continue
            acc[bound] = acc.get(bound, 0.0) + value
        return sorted(acc.items())

    def counters(self) -> dict[tuple[str, str], float]:
        """Every series that only grows while the process lives: {(sample name, label text): value}."""
        return {(name, raw): v for name in self.monotonic for raw, v in self.rows.get(name, [])}


def read_scrape(path: Path, max_bytes: int = MAX_SCRAPE_BYTES) -> Scrape:
    """A saved scrape, its size checked before it is read; OSError or ScrapeError (a ValueError) otherwise."""
    size = path.stat().st_size
    if size > max_bytes:
        raise ScrapeError(_too_large(str(path), size, max_bytes))
    return parse_scrape(path.read_bytes().decode("utf-8", errors="replace"), max_bytes=max_bytes)


def _too_large(what: str, size: int, cap: int) -> str:
    return (
        f"{what}: {size:,} bytes, over the {cap // (1024 * 1024)} MiB cap on a scrape (MAX_SCRAPE_BYTES); "
        "a /metrics this large is not vLLM's: check the URL or the file"
    )


def parse_scrape(text: str, max_bytes: int = MAX_SCRAPE_BYTES) -> Scrape:
    """Parse the text exposition format; raise ScrapeError only for a text over ``max_bytes`` characters."""
    if len(text) > max_bytes:
        raise ScrapeError(_too_large("scrape", len(text), max_bytes))
    scrape = Scrape()
    family, kind = "", "untyped"
    members: dict[str, str] = {}
    pos, end, number = 0, len(text), 0
    while pos < end:
        stop = text.find("\n", pos)
        if stop < 0:
            stop = end
        start, pos, number = pos, stop + 1, number + 1
        m = _SAMPLE.match(text, start, stop)
        if m is not None:
            _add_sample(scrape, m, number, *((family, kind, members[m[1]]) if m[1] in members else (m[1], "", "")))
            continue
        line = text[start:stop].strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                family, kind = parts[2], parts[3].strip()
                if kind == "counter":
                    family = family.removesuffix("_total")
                scrape.types[family] = kind
                members = {family + suffix: suffix for suffix in _SUFFIXES.get(kind, ("",))}
            continue
        scrape.problem(f"line {number}: not `name{{labels}} value [timestamp]`: {_shown(line)}")
    return scrape


def _add_sample(scrape: Scrape, m: re.Match[str], number: int, family: str, kind: str, suffix: str) -> None:
    """One sample line, ``suffix`` its part of ``family`` (a sample outside the family of the last # TYPE is a
    family of its own, untyped)."""
    name, raw = m[1], m[2] or ""
    try:
        value = float(m[3])
    except ValueError:
        scrape.problem(f"line {number}: {name}: value {_shown(m[3])} is not a number")
        return
    if math.isnan(value):
        scrape.problem(f"line {number}: {_where(name, raw)} is NaN")
        return
    if suffix == "_bucket":
        le = _LE.search(raw)
        if le is None:
            scrape.problem(f"line {number}: {_where(name, raw)}: a histogram bucket without its le label")
            return
        try:
            float(le[1])
        except ValueError:
            scrape.problem(f"line {number}: {_where(name, raw)}: le={le[1][:40]!r} is not a bucket bound")
            return
    grows = (kind == "counter" and suffix in ("_total", "")) or suffix in ("_bucket", "_count")
    if grows and value < 0:
        scrape.problem(f"line {number}: counter {_where(name, raw)} is negative ({value:g}): a counter never is")
        return
    scrape.families.add(family)
    if grows:
        scrape.monotonic.add(name)
    scrape.rows.setdefault(name, []).append((raw, value))


def _where(name: str, raw: str) -> str:
    return _shown(f"{name}{{{raw}}}" if raw else name)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus's histogram_quantile: linear interpolation inside the bucket that holds rank q·count."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


def _delta_buckets(after: Scrape, before: Scrape | None, name: str) -> list[tuple[float, float]]:
    old = dict(before.buckets(name)) if before else {}
    return [(le, count - old.get(le, 0.0)) for le, count in after.buckets(name)]


def _delta(after: Scrape, before: Scrape | None, name: str) -> float | None:
    now = after.total(name)
    if now is None:
        return None
    return now - ((before.total(name) or 0.0) if before else 0.0)


def _sample(version: str, concern: str) -> tuple[str, str] | None:
    """(family name, exposed sample name) for a concern on this vLLM version."""
    spec = metrics_table.family_for(version, concern)
    if spec is None:
        return None
    return spec.name, metrics_table.sample_name(spec)


def _fmt(value: float) -> str:
    return f"{value:g}"


def cache_config_expectations(profile: DecodeProfile, plan: Plan | None) -> dict[str, str]:
    """`vllm:cache_config_info` labels the profile fixes, as vLLM prints them."""
    expect: dict[str, str] = {"cache_dtype": profile.cache.kv_cache_dtype}
    if profile.cache.kv_cache_memory_bytes is None:
        if profile.cache.gpu_memory_utilization is not None:  # unset from 0.34: the release resolves it
            expect["gpu_memory_utilization"] = _fmt(profile.cache.gpu_memory_utilization)
    else:
        expect["kv_cache_memory_bytes"] = str(profile.cache.kv_cache_memory_bytes)
    if profile.cache.block_size is not None:
        expect["block_size"] = str(profile.cache.block_size)
    if profile.cache.enable_prefix_caching is not None:
        expect["enable_prefix_caching"] = str(profile.cache.enable_prefix_caching)
    return expect


def kv_capacity_check(plan: Plan, labels: dict[str, str]) -> Check | None:
    """The node's real KV capacity (``num_gpu_blocks`` × block size) against the plan. Where the profile fixes the KV
    size it must match (2 %: a gate). Otherwise every real deployment calibrates the planner: the check reports the
    planner's error for this node, a warning beyond the memory model's stated uncertainty (not a gate: the node
    serves; the plan's judgments of it are what is off). None where the node does not say its block count."""
    raw = labels.get("num_gpu_blocks")
    if not raw or raw == "None":
        return None
    try:
        blocks = int(float(raw))
    except (ValueError, OverflowError):
        return Check(
            "kv_capacity", "fail", f"vllm:cache_config_info label num_gpu_blocks={raw[:40]!r} is not a block count"
        )
    if plan.kv_budget_fixed:
        ratio = blocks / plan.kv_capacity_blocks if plan.kv_capacity_blocks else math.inf
        detail = f"node {blocks} blocks, planner {plan.kv_capacity_blocks} (ratio {ratio:.4f}, tolerance 2 %)"
        return Check("kv_capacity", "pass" if abs(ratio - 1) <= 0.02 else "fail", detail)
    try:
        block = int(labels.get("block_size") or plan.block_size)
    except ValueError:
        block = plan.block_size
    real = blocks * block * (plan.kv_bytes_per_token + plan.draft_kv_bytes_per_token)
    if real <= 0:
        return Check("kv_capacity", "warn", f"node {blocks} blocks: no KV cache to compare with the planner's")
    off = plan.kv_budget_bytes - real
    within = abs(off) <= max(memory_model.UNCERTAINTY * real, memory_model.UNCERTAINTY_BYTES)
    detail = (
        f"node {blocks} blocks of {block} tokens = {real / 1024**3:.2f} GiB of KV per GPU, planner "
        f"{plan.kv_budget_bytes / 1024**3:.2f} GiB ({off / real:+.1%}; its stated uncertainty: "
        f"{memory_model.UNCERTAINTY:.0%} or {memory_model.UNCERTAINTY_BYTES / 1024**3:.2f} GiB)"
    )
    return Check("kv_capacity", "pass" if within else "warn", detail)


def _same(label: str, want: str, got: str) -> bool:
    try:
        return math.isclose(float(want), float(got), rel_tol=1e-9)
    except ValueError:
        return want == got


def check_metrics(
    profile: DecodeProfile,
    after: Scrape,
    before: Scrape | None = None,
    plan: Plan | None = None,
    version: str | None = None,
) -> list[Check]:
    """Every check a rollout is gated on, from a before/after pair (the probe's window), or from one scrape:
    then every counter and histogram counts from the process start, and the figures are since-start ones.
    A pair whose counters went down is a restart between the scrapes (judged from the restart: ``after`` alone) or,
    when ``before``'s process is the later one, a swapped pair (judged the right way round); either is a failed
    check saying so. What in a scrape was not a sample (its problems) is a failed check too."""
    v = version or profile.vllm_version
    out: list[Check] = []
    speculative = profile.speculative is not None

    for which, scrape in (("scrape", after), ("--before scrape", before)):
        if scrape is not None and (scrape.problems or scrape.more_problems):
            more = f"; and {scrape.more_problems} more" if scrape.more_problems else ""
            out.append(Check(f"{which} problems", "fail", f"{which}: " + "; ".join(scrape.problems) + more))
    window = before is not None
    if before is not None:
        order, after, before = _scrape_order(after, before)
        if order is not None:
            out.append(order)

    required = metrics_table.required_for(v, speculative=speculative)
    missing = sorted(f for f in required if f not in after.families)
    out.append(
        Check(
            "families",
            "fail" if missing else "pass",
            f"missing: {', '.join(missing)}" if missing else f"{len(required)} families required by vLLM {v} present",
        )
    )

    info = _sample(v, "cache_config_info")
    rows = after.samples.get(info[1], []) if info else []
    if not rows:
        out.append(Check("cache_config", "fail", "vllm:cache_config_info not exposed"))
    else:
        out.extend(_cache_config_checks(profile, plan, rows))

    gen = _sample(v, "generation_tokens")
    moved = _delta(after, before, gen[1]) if gen else None
    if before is None and window:
        # A restart between the scrapes: the window's counters are the later scrape's, since the restart.
        ok = bool(moved and moved > 0)
        out.append(
            Check("tokens", "pass" if ok else "fail", f"generation tokens +{_fmt(moved or 0)} since the restart")
        )
    elif before is None:
        # One scrape: counters count from the process start, so what follows is since-start, not the probe's.
        out.append(Check("tokens", "skip", f"generation tokens since start: {_fmt(moved or 0)} (no probe window)"))
    else:
        ok = bool(moved and moved > 0)
        out.append(Check("tokens", "pass" if ok else "fail", f"generation tokens +{_fmt(moved or 0)}"))

    pre = _sample(v, "preemptions")
    preempted = _delta(after, before, pre[1]) if pre else None
    budget = profile.slo.max_preemptions
    if preempted is None:
        # A missing counter is not zero preemptions: the budget cannot be checked.
        counter = pre[1] if pre else f"the preemption counter of vLLM {v}"
        out.append(Check("preemptions", "fail", f"{counter} not exposed: cannot check the budget ({budget})"))
    else:
        ok = preempted <= budget
        out.append(Check("preemptions", "pass" if ok else "fail", f"{_fmt(preempted)} (budget {budget})"))

    if speculative:
        acc, draft = _sample(v, "spec_accepted_tokens"), _sample(v, "spec_draft_tokens")
        d_acc = _delta(after, before, acc[1]) if acc else None
        d_draft = _delta(after, before, draft[1]) if draft else None
        floor = profile.slo.min_spec_acceptance_rate or 0.0
        if not d_draft or d_acc is None:
            out.append(Check("spec_acceptance", "fail", "no draft tokens counted: is speculative decoding on?"))
        else:
            rate = d_acc / d_draft
            out.append(
                Check(
                    "spec_acceptance",
                    "pass" if rate >= floor else "fail",
                    f"{rate:.3f} = {_fmt(d_acc)} accepted / {_fmt(d_draft)} drafted (minimum {floor})",
                )
            )

    for concern, slo, label in (
        ("ttft", profile.slo.ttft_p95_s, "TTFT p95"),
        ("itl", profile.slo.itl_p95_s, "ITL p95"),
    ):
        fam = _sample(v, concern)
        p95 = histogram_quantile(0.95, _delta_buckets(after, before, fam[0])) if fam else None
        if p95 is None:
            out.append(Check(concern, "skip" if slo is None else "fail", f"{label}: no observations"))
        elif slo is None:
            out.append(Check(concern, "pass", f"{label} {p95 * 1000:.1f} ms (no SLO)"))
        else:
            out.append(
                Check(
                    concern, "pass" if p95 <= slo else "fail", f"{label} {p95 * 1000:.1f} ms (SLO {slo * 1000:.0f} ms)"
                )
            )
    return out


def _cache_config_checks(
    profile: DecodeProfile, plan: Plan | None, rows: list[tuple[dict[str, str], float]]
) -> list[Check]:
    """``vllm:cache_config_info`` against the profile, every engine's row (a node may run several engines)."""
    expected = cache_config_expectations(profile, plan)
    out: list[Check] = []
    wrong: list[str] = []
    unseen: set[str] = set()
    checked = 0
    for labels, _ in rows:
        engine = f"engine {labels['engine']!r}: " if len(rows) > 1 and "engine" in labels else ""
        wrong += [
            f"{engine}{k}: profile {want!r}, node {labels.get(k)!r}"
            for k, want in expected.items()
            if k in labels and not _same(k, want, labels[k])
        ]
        unseen.update(k for k in expected if k not in labels)
        checked = max(checked, len(expected) - len([k for k in expected if k not in labels]))
    if wrong or checked:
        engines = f" on {len(rows)} engines" if len(rows) > 1 else ""
        detail = "; ".join(wrong) or f"{checked} label(s) match the profile{engines}"
        out.append(Check("cache_config", "fail" if wrong else "pass", detail))
    if unseen:
        # Not exposed by this release: nothing to compare, so not a pass.
        out.append(
            Check("cache_config_unverifiable", "skip", f"not verifiable, the node has no label {sorted(unseen)}")
        )
    if plan is not None:
        capacities = []
        for labels, _ in rows:
            capacity = kv_capacity_check(plan, labels)
            if capacity is not None and len(rows) > 1 and "engine" in labels:
                capacity = Check(capacity.name, capacity.status, f"engine {labels['engine']!r}: {capacity.detail}")
            if capacity is not None:
                capacities.append(capacity)
        if capacities:
            worst = next((c for c in capacities if c.status == "fail"), None) or next(
                (c for c in capacities if c.status == "warn"), capacities[0]
            )
            detail = "; ".join(c.detail for c in capacities) if len(capacities) > 1 else worst.detail
            out.append(Check("kv_capacity", worst.status, detail))
    return out


def _scrape_order(after: Scrape, before: Scrape) -> tuple[Check | None, Scrape, Scrape | None]:
    """(a check when the counters went down, the scrape to judge, the one to take deltas from: None to judge the
    later scrape alone). Counters only grow while a process lives: one that went down means the process restarted
    between the scrapes, or the two were given the wrong way round."""
    old, new = before.counters(), after.counters()
    common = [key for key in new if key in old]
    fell = [key for key in common if new[key] < old[key]]
    if not fell:
        return None, after, before
    rose = any(new[key] > old[key] for key in common)
    start_old, start_new = before.total(START_TIME), after.total(START_TIME)
    if start_old is not None and start_new is not None:
        swapped = start_old >= start_new
        why = f"{START_TIME}: --before's process started at {start_old:.0f}, the scrape's at {start_new:.0f}"
    else:
        swapped = not rose
        why = f"every counter is higher in --before (no {START_TIME} to tell)"
    # The example named: vLLM's own counters first, then any other counter, then histogram counts.
    name, raw = min(fell, key=lambda k: (not k[0].startswith("vllm:"), not k[0].endswith("_total"), k))
    example = f"{name}{{{raw}}}" if raw else name
    example = f"{_shown(example)} {_fmt(old[(name, raw)])} → {_fmt(new[(name, raw)])}"
    if swapped:
        detail = (
            f"--before and the scrape look swapped: {len(fell)} counter(s) went down ({example}) and {why}; "
            "pass the earlier scrape as --before (judged here the other way round)"
        )
        return Check("scrape_order", "fail", detail), before, after
    detail = (
        f"restart between scrapes: {len(fell)} counter(s) went down ({example}; {why}); the counters are judged "
        "from the restart, the later scrape alone"
    )
    return Check("scrape_order", "fail", detail), after, None
