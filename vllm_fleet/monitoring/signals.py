"""What the monitoring reads from vLLM, resolved per release through the metric table: the one place it is named.

Each signal is a curated concern of the table (``vllm_fleet.vllm.metrics_table.family_for``: the same answer smoke
and audit get) or, for the few families the table has no concern for yet, the family's name, looked up in the
table for the release (``metric_spec``), so a name that release lacks is ``None`` here, never a query that can
only ever return nothing. Every rule and dashboard query is built from a ``ReleaseMetrics`` of this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from vllm_fleet.vllm import metrics_table
from vllm_fleet.vllm.metrics_table import MetricSpec

Signal = Literal[
    "ttft",
    "itl",
    "tpot",
    "e2e_latency",
    "queue_time",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "running",
    "waiting",
    "kv_cache_usage",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "request_success",
    "spec_accepted_tokens",
    "spec_draft_tokens",
    "spec_drafts",
    "cache_config_info",
]

CONCERN_SIGNALS: tuple[Signal, ...] = (
    "ttft",
    "itl",
    "e2e_latency",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "running",
    "waiting",
    "kv_cache_usage",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "spec_accepted_tokens",
    "spec_draft_tokens",
    "spec_drafts",
    "cache_config_info",
)
"""Signals that are concerns of the metric table (its ``concerns`` section, validated by the extractor)."""

FAMILY_SIGNALS: dict[Signal, str] = {
    # Per-request mean time per output token: (decode time) / (tokens - 1). With speculation one ITL observation
    # covers every token accepted in a step, so this is the per-token latency a user sees (vLLM >= 0.11.0).
    "tpot": "vllm:request_time_per_output_token_seconds",
    "queue_time": "vllm:request_queue_time_seconds",
    "request_success": "vllm:request_success",
}
"""Signals the table has no concern for (yet): the family name, looked up in the table for each release."""

SPECULATIVE_SIGNALS: frozenset[Signal] = frozenset({"spec_accepted_tokens", "spec_draft_tokens", "spec_drafts"})
"""Families vLLM creates only with a ``--speculative-config``."""

LATENCY_SIGNALS: tuple[Signal, ...] = ("ttft", "itl", "tpot", "e2e_latency", "queue_time")
"""The histograms (seconds) recorded as rates of buckets and as p50/p95."""

FINISHED_REASON_LABEL = "finished_reason"
ABORT_REASON = "abort"
ERROR_REASON = "error"
"""``vllm:request_success{finished_reason}`` values (vLLM's ``FinishReason``, ``vllm/v1/engine/__init__.py``: stop,
length, abort, error, repetition; all five are pre-created at 0 in the recorded 0.32.0 scrapes). ``abort``: the
client went away or the request was cancelled; ``error``: a request-level internal error, always an HTTP 500. The
table records label names, not values: these two are the only label values the monitoring spells itself."""

BUCKET_FAMILY: dict[Signal, str] = {
    "ttft": "time_to_first_token",
    "itl": "inter_token_latency",
    "tpot": "inter_token_latency",
    "e2e_latency": "request_latency",
    "queue_time": "request_latency",
}
"""vLLM's bucket-family key of each latency histogram, as ``--custom-histogram-buckets`` takes them (vLLM 0.32.0
``vllm/v1/metrics/buckets.py`` ``BucketFamilyKey``; the TPOT histogram shares the ITL family's buckets)."""


@dataclass(frozen=True)
class ReleaseMetrics:
    """The families one vLLM release exposes for each signal (None: the release has none)."""

    version: str
    families: dict[Signal, MetricSpec | None]

    def get(self, signal: Signal) -> MetricSpec | None:
        return self.families[signal]

    def require(self, signal: Signal) -> MetricSpec:
        spec = self.families[signal]
        if spec is None:
            raise KeyError(f"vLLM {self.version} exposes no family for {signal!r}")
        return spec

    def sample(self, signal: Signal) -> str:
        """The exposed sample carrying the value: ``X_total`` of a counter, ``X_count`` of a histogram, ``X``."""
        return metrics_table.sample_name(self.require(signal))

    def bucket(self, signal: Signal) -> str:
        return metrics_table.bucket_sample(self.require(signal))

    def has(self, signal: Signal) -> bool:
        return self.families[signal] is not None

    def samples_queried(self) -> set[str]:
        """Every sample name a rule built from this release may query (for the staleness test)."""
        out: set[str] = set()
        for spec in self.families.values():
            if spec is not None:
                out.update(spec.samples)
        return out


@cache
def release_metrics(version: str) -> ReleaseMetrics:
    families: dict[Signal, MetricSpec | None] = {}
    for signal in CONCERN_SIGNALS:
        families[signal] = metrics_table.family_for(version, signal)
    for signal, name in FAMILY_SIGNALS.items():
        families[signal] = metrics_table.metric_spec(version, name)
    return ReleaseMetrics(version, families)


__all__ = [
    "ABORT_REASON",
    "BUCKET_FAMILY",
    "ERROR_REASON",
    "FINISHED_REASON_LABEL",
    "LATENCY_SIGNALS",
    "SPECULATIVE_SIGNALS",
    "ReleaseMetrics",
    "Signal",
    "release_metrics",
]
