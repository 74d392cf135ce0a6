"""The candidates a tuning run may try: the article's levers, as the pinned release and the hardware have them,
derived from a starting profile, and pruned by the planner before any is started.

A *point* gives each searched lever a value; the other fields stay the starting profile's. Each lever's values
are ordered, and the search walks them from the start's value in the planner's monotone direction first
(``up_first``: more sequences or tokens per step is more throughput until a latency SLO or the KV capacity says
stop).

Levers, where they apply:

* ``max_num_seqs`` -- powers of two around the start's; above the workload's highest concurrency only the first
  value is kept (the workload never runs more sequences: the others measure the same);
* ``max_num_batched_tokens`` -- powers of two from 256 to 16384 with the start's own value;
* ``enable_chunked_prefill`` -- on and off, where the release has the flag;
* ``speculative`` -- off, or the start's method (n-gram when it has none: it needs no drafter) with k of 2 and 4;
* ``kv_cache_dtype`` -- ``auto`` and ``fp8``, only on hardware with FP8 units;
* ``gpu_memory_utilization`` -- 0.85, 0.9, 0.95, only where the release's memory model makes it the KV budget (a
  fraction of the device's total, up to 0.33 on CUDA, and no fixed ``kv_cache_memory_bytes``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from vllm_fleet.catalog import load_hardware
from vllm_fleet.profiles.model import CacheConfig, DecodeProfile, SpeculativeConfig
from vllm_fleet.profiles.planner import plan
from vllm_fleet.profiles.validate import check_profile
from vllm_fleet.vllm import flags

Value = int | float | bool | str
Point = dict[str, Value]


class SpaceError(ValueError):
    """A ``--lever`` the release or the hardware does not have, or a value out of shape: the message says which."""


@dataclass(frozen=True)
class Lever:
    name: str
    values: tuple[Value, ...]
    up_first: bool = True
    """Walk towards the end of ``values`` first (the planner's direction of more throughput)."""


@dataclass
class Space:
    start: Point
    levers: list[Lever]
    notes: list[str] = field(default_factory=list)
    """Why a lever is not searched (the release, the hardware, the memory model)."""

    def points(self) -> Iterator[Point]:
        """Every point of the grid over the levers' values (the exhaustive search)."""
        for values in product(*(lever.values for lever in self.levers)):
            yield {lever.name: v for lever, v in zip(self.levers, values, strict=True)}

    @property
    def size(self) -> int:
        n = 1
        for lever in self.levers:
            n *= len(lever.values)
        return n

    def describe(self) -> dict[str, Any]:
        return {"start": self.start, "levers": {lv.name: list(lv.values) for lv in self.levers}}


LEVERS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "speculative",
    "kv_cache_dtype",
    "gpu_memory_utilization",
)
_SCHEDULER = {"max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"}
_CACHE = {"kv_cache_dtype", "gpu_memory_utilization"}
_DEST = {"speculative": "speculative_config"}


def point_key(point: Mapping[str, Value]) -> str:
    """A point as one stable string (the journal's key): ``max_num_seqs=8,speculative=off``."""
    return ",".join(f"{k}={json.dumps(point[k]) if isinstance(point[k], bool) else point[k]}" for k in sorted(point))


def speculative_value(profile: DecodeProfile) -> str:
    s = profile.speculative
    return "off" if s is None else f"{s.method}:{s.num_speculative_tokens}"


def start_point(profile: DecodeProfile, levers: list[str]) -> Point:
    p = plan(profile)
    sched, cache = profile.scheduler, profile.cache
    known: dict[str, Value] = {
        "max_num_seqs": sched.max_num_seqs,
        "max_num_batched_tokens": sched.max_num_batched_tokens or p.max_num_batched_tokens,
        "enable_chunked_prefill": True if sched.enable_chunked_prefill is None else sched.enable_chunked_prefill,
        "speculative": speculative_value(profile),
        "kv_cache_dtype": cache.kv_cache_dtype,
        "gpu_memory_utilization": round(p.gpu_memory_utilization, 4),
    }
    return {name: known[name] for name in levers}


def apply_point(profile: DecodeProfile, point: Mapping[str, Value]) -> DecodeProfile:
    """The starting profile with the point's lever values."""
    sched = {k: v for k, v in point.items() if k in _SCHEDULER}
    cache = {k: v for k, v in point.items() if k in _CACHE}
    update: dict[str, Any] = {}
    if sched:
        update["scheduler"] = profile.scheduler.model_copy(update=sched)
    if cache:
        update["cache"] = profile.cache.model_copy(update=cache)
    if "speculative" in point:
        update["speculative"] = _speculative(profile, str(point["speculative"]))
    return profile.model_copy(update=update) if update else profile


def _speculative(profile: DecodeProfile, value: str) -> SpeculativeConfig | None:
    if value == "off":
        return None
    method, _, k = value.partition(":")
    base = profile.speculative
    if base is not None and base.method == method:
        return base.model_copy(update={"num_speculative_tokens": int(k)})
    return SpeculativeConfig.model_validate({"method": method, "num_speculative_tokens": int(k)})


def _sorted(values: tuple[Value, ...] | list[Value]) -> tuple[Value, ...]:
    return tuple(sorted(set(values), key=float))


def _powers(low: int, high: int) -> list[int]:
    out, v = [], 1
    while v <= high:
        if v >= low:
            out.append(v)
        v *= 2
    return out


def _derived(profile: DecodeProfile, name: str, start: Value, max_concurrency: int) -> tuple[Value, ...]:
    if name == "max_num_seqs":
        values = sorted(set(_powers(1, 256)) | {int(start)})
        above = [v for v in values if v >= max_concurrency]
        keep = {above[0], int(start)} if above else {int(start)}
        return tuple(v for v in values if v < max_concurrency or v in keep)
    if name == "max_num_batched_tokens":
        return tuple(sorted(set(_powers(256, 16384)) | {int(start)}))
    if name == "enable_chunked_prefill":
        return (True, False)
    if name == "speculative":
        base = profile.speculative
        method = base.method if base is not None else "ngram"
        ks = sorted({2, 4} | ({base.num_speculative_tokens} if base is not None else set()))
        return ("off", *(f"{method}:{k}" for k in ks))
    if name == "kv_cache_dtype":
        return ("auto", "fp8")
    return tuple(sorted({0.85, 0.9, 0.95} | {float(start)}))


def _why_not(profile: DecodeProfile, name: str) -> str | None:
    """Why a lever is not searched on this profile's release and hardware; None when it is."""
    release = profile.vllm_version
    if not flags.has_arg(release, _DEST.get(name, name)):
        return f"{name}: vLLM {release} has no such argument"
    hw = load_hardware(profile.hardware)
    if name == "kv_cache_dtype" and not hw.fp8:
        return f"kv_cache_dtype: {hw.name} has no FP8 units (an FP8 KV cache would dequantise in software)"
    if name == "gpu_memory_utilization":
        p = plan(profile)
        if hw.architecture == "cpu":
            return "gpu_memory_utilization: no GPU (the KV cache is the profile's fixed kv_cache_memory_bytes)"
        if p.kv_budget_fixed:
            return "gpu_memory_utilization: the profile fixes the KV cache (cache.kv_cache_memory_bytes)"
        if p.extensible_kv_cache:
            return (
                f"gpu_memory_utilization: vLLM {release} sizes the KV cache from the memory free after warm-up "
                "(extensible KV cache): the fraction is a cap for a shared GPU, not a lever"
            )
    return None


def _parse_value(name: str, text: str) -> Value:
    t = text.strip()
    try:
        if name in ("max_num_seqs", "max_num_batched_tokens"):
            n = int(t)
            if n < 1:
                raise ValueError
            return n
        if name == "gpu_memory_utilization":
            f = float(t)
            if not 0 < f <= 1:
                raise ValueError
            return f
        if name == "enable_chunked_prefill":
            return {"true": True, "on": True, "false": False, "off": False}[t.lower()]
        if name == "speculative":
            if t == "off":
                return t
            method, sep, k = t.partition(":")
            if not sep or not 1 <= int(k) <= 16:
                raise ValueError
            drafter = {} if method == "ngram" else {"model": "org/drafter"}  # the method's name checked, not a drafter
            SpeculativeConfig.model_validate({"method": method, "num_speculative_tokens": int(k), **drafter})
            return t
        if name == "kv_cache_dtype":
            CacheConfig.model_validate({"kv_cache_dtype": t})
            return t
    except (ValueError, KeyError, TypeError):
        pass
    examples = {
        "max_num_seqs": "2,4,8", "max_num_batched_tokens": "512,2048", "enable_chunked_prefill": "true,false",
        "speculative": "off,ngram:4", "kv_cache_dtype": "auto,fp8", "gpu_memory_utilization": "0.85,0.9",
    }  # fmt: skip
    raise SpaceError(f"--lever {name}={text[:40]!r}: not a value of {name}; write e.g. --lever {name}={examples[name]}")


def parse_levers(specs: list[str]) -> dict[str, tuple[Value, ...]]:
    """``--lever name=v1,v2`` (repeatable) -> lever -> its values, in the order given (sorted for numbers)."""
    out: dict[str, tuple[Value, ...]] = {}
    for spec in specs:
        name, sep, rest = spec.partition("=")
        name = name.strip()
        if name not in LEVERS:
            raise SpaceError(f"--lever {name[:40]!r}: unknown; the levers are {', '.join(LEVERS)}")
        if not sep or not rest.strip():
            raise SpaceError(f"--lever {name}: give its values, e.g. --lever {name}=…,…")
        values = [_parse_value(name, v) for v in rest.split(",") if v.strip()]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        out[name] = _sorted(values) if numeric else tuple(dict.fromkeys(values))
    return out


def derive_space(
    profile: DecodeProfile, max_concurrency: int, chosen: Mapping[str, tuple[Value, ...]] | None = None
) -> Space:
    """The space around ``profile``: every lever that applies (or only ``chosen``'s, with their values); the start's
    value is always one of a lever's values."""
    notes: list[str] = []
    names = list(chosen) if chosen else list(LEVERS)
    searched = []
    for name in names:
        why = _why_not(profile, name)
        if why:
            if chosen:
                raise SpaceError(f"--lever {why}")
            notes.append(why)
        else:
            searched.append(name)
    start = start_point(profile, searched)
    levers = []
    for name in searched:
        values = chosen[name] if chosen else _derived(profile, name, start[name], max_concurrency)
        if start[name] not in values:
            values = (start[name], *values) if isinstance(start[name], str | bool) else _sorted((*values, start[name]))
        levers.append(Lever(name, values, up_first=name != "speculative" or start[name] == "off"))
    return Space(start, levers, notes)


def prune(candidate: DecodeProfile) -> str | None:
    """Why the candidate is never started, or None: the planner's errors (a config that does not fit the memory,
    that the release or the renderer refuses, a scheduler the release would reject)."""
    errors, _ = check_profile(candidate)
    if errors:
        return "planner: " + "; ".join(f"{e.field}: {e.message}" for e in errors)[:600]
    return None
