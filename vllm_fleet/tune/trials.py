"""A trial: one candidate started and measured (or pruned, or failed), its figures per concurrency level, and its
verdict against the SLOs. Plain data: the tuning journal holds trials as JSON, and a resumed run reads them back.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from vllm_fleet.probes.stream_client import StreamTiming, percentile
from vllm_fleet.tune.workload import SLO

Status = Literal["measured", "stopped", "pruned", "failed"]
"""measured: every repeat ran; stopped: early, clearly worse than the incumbent after its first repeat; pruned:
never started (the planner); failed: the converge or the server failed (vLLM's own error kept)."""


@dataclass
class Level:
    """One concurrency level of a trial, its repeats pooled."""

    concurrency: int
    requests: int = 0
    errors: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    """Per finished request: concurrency × its output tokens / its latency, the throughput the level would have if
    every request were this one (the noise rule's samples)."""
    error_texts: list[str] = field(default_factory=list)

    def add(self, results: Sequence[StreamTiming | str], wall_s: float) -> None:
        """One repeat's client results."""
        self.wall_s += wall_s
        for r in results:
            self.requests += 1
            if isinstance(r, str):
                self.errors += 1
                if len(self.error_texts) < 5:
                    self.error_texts.append(r)
                continue
            self.output_tokens += r.output_tokens
            self.ttft_s.append(r.ttft_s)
            self.itl_s.extend(r.itl_s)
            if r.latency_s > 0:
                self.rates.append(self.concurrency * r.output_tokens / r.latency_s)

    @property
    def throughput(self) -> float:
        """Output tokens per second of the level (all repeats)."""
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 1.0

    def ttft_p95(self) -> float | None:
        return percentile(self.ttft_s, 95) if self.ttft_s else None

    def itl_p95(self) -> float | None:
        return percentile(self.itl_s, 95) if self.itl_s else None

    def violations(self, slo: SLO) -> dict[str, float]:
        """SLO -> measured / limit, for each SLO this level breaks (empty: it meets them all)."""
        out: dict[str, float] = {}
        for name, limit, measured in (
            ("ttft_p95", slo.ttft_p95_s, self.ttft_p95()),
            ("itl_p95", slo.itl_p95_s, self.itl_p95()),
        ):
            if limit is not None and (measured is None or measured > limit):
                out[name] = float("inf") if measured is None else measured / limit
        if self.error_rate > slo.error_rate:
            out["error_rate"] = float("inf") if slo.error_rate == 0 else self.error_rate / slo.error_rate
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "requests": self.requests,
            "errors": self.errors,
            "throughput_tok_s": round(self.throughput, 2),
            "ttft_p50_s": round(percentile(self.ttft_s, 50), 6) if self.ttft_s else None,
            "ttft_p95_s": round(v, 6) if (v := self.ttft_p95()) is not None else None,
            "itl_p50_s": round(percentile(self.itl_s, 50), 6) if self.itl_s else None,
            "itl_p95_s": round(v, 6) if (v := self.itl_p95()) is not None else None,
            "itl_mean_s": round(statistics.mean(self.itl_s), 6) if self.itl_s else None,
        }


@dataclass
class Trial:
    key: str
    point: dict[str, Any]
    status: Status
    reason: str = ""
    """Why pruned, failed or stopped (the planner's words, vLLM's own error, the noise rule's figures)."""
    levels: list[Level] = field(default_factory=list)
    repeats: int = 0
    planner: dict[str, Any] = field(default_factory=dict)
    """The planner's figures for the candidate: KV capacity, sequences at max length, roofline."""
    seconds: float = 0.0
    """Wall time the trial took (converge and measurement)."""
    number: int = 0
    """Its place among the trials started (0: pruned, never started)."""

    @property
    def started(self) -> bool:
        return self.status != "pruned"

    @property
    def measured(self) -> bool:
        return self.status in ("measured", "stopped") and bool(self.levels)

    def best_level(self, slo: SLO) -> Level | None:
        """The level of highest throughput among those meeting every SLO; None when none does."""
        ok = [lv for lv in self.levels if not lv.violations(slo)]
        return max(ok, key=lambda lv: lv.throughput) if ok else None

    def score(self, slo: SLO) -> float | None:
        """Throughput at the SLO (tokens/s), None when infeasible or not measured."""
        best = self.best_level(slo) if self.measured else None
        return best.throughput if best else None

    def nearest_level(self, slo: SLO) -> Level | None:
        """For an infeasible trial: the level that breaks its SLOs least (its worst measured/limit the lowest)."""
        if not self.levels:
            return None
        return min(self.levels, key=lambda lv: (max(lv.violations(slo).values(), default=0.0), -lv.throughput))

    def violation(self, slo: SLO) -> float:
        """How far the nearest level is from the SLOs (worst measured/limit; 0 when a level meets them)."""
        level = self.nearest_level(slo)
        return max(level.violations(slo).values(), default=0.0) if level else float("inf")

    def why_infeasible(self, slo: SLO) -> str:
        level = self.nearest_level(slo)
        if level is None:
            return self.reason or self.status
        broken = level.violations(slo)
        parts = []
        for name, ratio in broken.items():
            if name == "error_rate":
                parts.append(f"error rate {level.error_rate:.1%} > {slo.error_rate:.1%}")
            else:
                limit = slo.ttft_p95_s if name == "ttft_p95" else slo.itl_p95_s
                parts.append(f"{name} {ratio * (limit or 0):.3g} s > {limit:g} s")
        return f"at concurrency {level.concurrency}: " + ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trial:
        levels = [Level(**lv) for lv in data.get("levels", [])]
        return cls(**{**data, "levels": levels})
