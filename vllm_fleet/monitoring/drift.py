"""Config drift as Prometheus sees it: the live ``vllm:cache_config_info`` labels against the node's desired ones.

The desired labels are the audit's and the smoke gate's (``smoke_checks.cache_config_expectations``: what the
profile fixes), spelt as vLLM prints them: ``metrics_info()`` is ``str()`` of each CacheConfig field, so a float
field reads ``1.0`` where the smoke gate's number-tolerant comparison writes ``1``. Labels the release does not
expose (the table's label set of the family for that release) cannot be compared and are left out.
"""

from __future__ import annotations

from vllm_fleet.monitoring.signals import ReleaseMetrics
from vllm_fleet.probes.smoke_checks import cache_config_expectations
from vllm_fleet.profiles.model import DecodeProfile


def desired_labels(profile: DecodeProfile, metrics: ReleaseMetrics) -> tuple[dict[str, str], list[str]]:
    """(label → value as vLLM prints it, labels the release does not expose)."""
    exposed = set(metrics.require("cache_config_info").labels)
    desired: dict[str, str] = {}
    unseen: list[str] = []
    for key, value in cache_config_expectations(profile, None).items():
        if key not in exposed:
            unseen.append(key)
            continue
        field = getattr(profile.cache, key, None)
        desired[key] = str(field) if isinstance(field, float) else value
    return dict(sorted(desired.items())), sorted(unseen)
