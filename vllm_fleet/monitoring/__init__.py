"""`vllm-fleet monitoring`: Prometheus targets, recording and alerting rules, and Grafana dashboards for a fleet,
generated from the metric table of each vLLM release the fleet runs (docs/monitoring.md).

signals (what is read, per release, from the table) → scopes (nodes sharing a release and a profile) →
recording / alerts / rules (pure: rule files as data) and dashboards (grafana-foundation-sdk) → write (the one
edge: the output directory).
"""

from __future__ import annotations

from vllm_fleet.fleet.plan import FleetPlan
from vllm_fleet.fleet.role_vars import sentinel_port
from vllm_fleet.monitoring.scopes import MonitoredNode, Scope, profile_scopes, scopes_of
from vllm_fleet.monitoring.write import Written, write_monitoring


def fleet_nodes(plan: FleetPlan) -> list[MonitoredNode]:
    port = sentinel_port(plan.role_vars)
    return [MonitoredNode.from_spec(n, port) for n in plan.nodes]


__all__ = [
    "MonitoredNode",
    "Scope",
    "Written",
    "fleet_nodes",
    "profile_scopes",
    "scopes_of",
    "sentinel_port",
    "write_monitoring",
]
