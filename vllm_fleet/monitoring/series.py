"""The monitoring's own vocabulary: the scrape job, the target labels, and the release-independent series the
recording rules write (``vllm_fleet:*``), which the alerts and every dashboard panel read.

vLLM renames its families between releases (``gpu_cache_usage_perc`` → ``kv_cache_usage_perc``,
``time_per_output_token_seconds`` → ``inter_token_latency_seconds``); the per-release recording rules map each
release's own names (from the metric table, ``signals.py``) onto these, so a dashboard keeps working across a
fleet that runs several releases, and no query outside the recording rules spells a vLLM name.
"""

from __future__ import annotations

from vllm_fleet.monitoring.signals import Signal

JOB = "vllm"
"""The Prometheus scrape job of the vLLM nodes (``up{job="vllm"}``)."""
SENTINEL_JOB = "vllm-sentinel"
"""The nodes' sentinels (roles/vllm_service/files/vllm_sentinel.py): readiness, wedge, cordon, watchdog."""

TARGET_LABELS = ("host", "profile", "hardware", "vllm_version", "config_hash")
"""Labels each file_sd target carries (``targets/vllm.json``)."""

KEEP = ("host", "profile", "hardware", "vllm_version", "instance")
"""Labels every recorded series keeps: the node, not its engines or models. ``config_hash`` is dropped so that a
rollout (a new hash) does not start a new series."""

WINDOW = "5m"
"""Rate window of every recorded rate and of the alerts."""

PREFIX = "vllm_fleet"


def keep(*extra: str) -> str:
    """``host, profile, …`` for ``sum by (…)``."""
    return ", ".join((*KEEP, *extra))


_LATENCY_NAMES: dict[Signal, str] = {
    "ttft": "ttft_seconds",
    "itl": "itl_seconds",
    "tpot": "tpot_seconds",
    "e2e_latency": "e2e_latency_seconds",
    "queue_time": "queue_time_seconds",
}


def bucket_rate(signal: Signal) -> str:
    """Per-node rate of a latency histogram's buckets (keeps ``le``)."""
    return f"{PREFIX}:{_LATENCY_NAMES[signal]}_bucket:rate{WINDOW}"


def count_rate(signal: Signal) -> str:
    """Per-node rate of a latency histogram's observations."""
    return f"{PREFIX}:{_LATENCY_NAMES[signal]}_count:rate{WINDOW}"


def quantile(signal: Signal, q: int) -> str:
    """``histogram_quantile(q/100, …)`` of the node's buckets (q: 50 or 95)."""
    return f"{PREFIX}:{_LATENCY_NAMES[signal]}:p{q}_{WINDOW}"


def slo(signal: Signal) -> str:
    """The profile's p95 SLO (seconds) as a series, one per scope: the line a dashboard draws."""
    return f"{PREFIX}:slo:{_LATENCY_NAMES[signal]}_p95"


def slo_bucket(signal: Signal) -> str:
    """The bucket boundary the SLO alert really uses (seconds, see docs/monitoring.md#slo-buckets)."""
    return f"{PREFIX}:slo:{_LATENCY_NAMES[signal]}_p95_bucket"


GENERATION_TOKENS_RATE = f"{PREFIX}:generation_tokens:rate{WINDOW}"
PROMPT_TOKENS_RATE = f"{PREFIX}:prompt_tokens:rate{WINDOW}"
KV_CACHE_USAGE = f"{PREFIX}:kv_cache_usage:max"
"""The node's KV-cache usage, 0..1: the highest of its engines (a share is never summed)."""
PREEMPTIONS_INCREASE = f"{PREFIX}:preemptions:increase{WINDOW}"
RUNNING = f"{PREFIX}:requests_running:sum"
WAITING = f"{PREFIX}:requests_waiting:sum"
REQUESTS_FINISHED_RATE = f"{PREFIX}:requests_finished:rate{WINDOW}"
"""Finished requests per second by ``finished_reason``."""
PREFIX_CACHE_HIT_RATIO = f"{PREFIX}:prefix_cache_hit:ratio{WINDOW}"
SPEC_ACCEPTANCE_RATIO = f"{PREFIX}:spec_acceptance:ratio{WINDOW}"
"""Accepted / drafted tokens."""
SPEC_TOKENS_PER_DRAFT = f"{PREFIX}:spec_accepted_tokens_per_draft:ratio{WINDOW}"
"""Accepted tokens per speculation step (add 1 for the tokens one step emits)."""
SLO_SPEC_ACCEPTANCE = f"{PREFIX}:slo:spec_acceptance_min"
SLO_PREEMPTIONS = f"{PREFIX}:slo:preemptions_max_per_{WINDOW}"
