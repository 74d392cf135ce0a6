"""The resolved fleet as plain data: what the Pulumi program registers, one ``NodeSpec`` per host.

``vllm_fleet.fleet.spec.plan_fleet`` computes it (validation, profiles, rendering, planning: the pure core); the
program only reads it. Being plain JSON-able data, it can be memoised (``vllm_fleet.pulumi.plan_cache``), so
a no-op ``pulumi up`` does not pay for importing and running the core again. This module imports nothing heavy.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from vllm_fleet.project.digest import json_digest

if TYPE_CHECKING:
    from vllm_fleet.profiles.loader import Problem


class FleetError(Exception):
    """The fleet spec is invalid: every problem of every host, as ``hosts[i](name).field: message``."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("invalid fleet spec:\n" + "\n".join(f"  {p}" for p in problems))


@dataclass(frozen=True)
class NodeSpec:
    """One host, resolved: connection, profile, and the exact vLLM config it will run."""

    name: str
    address: str
    ssh_port: int
    ssh_user: str
    host_key: str | None
    hardware: str
    host: dict[str, Any]
    """The host entry of the fleet spec, defaults filled in."""
    profile: str
    """Profile name."""
    profile_data: dict[str, Any]
    """The profile after per-host overrides (what the smoke gate judges against)."""
    vllm_version: str
    vllm_config: dict[str, Any]
    """The `vllm serve --config` mapping for the pinned vLLM version."""
    config_hash: str
    """sha256 of the exact config file the host gets."""
    endpoint: str


def system_digest(converge_digest: str, node: NodeSpec, role_vars: dict[str, Any]) -> str:
    """Everything a host's full converge depends on but the server's own config: the converge's files, the host
    entry less its profile and overrides, the vLLM release and the role variables. A host whose last full converge
    recorded this digest (playbooks/tasks/system-stamp-write.yml) only has its server rolled."""
    host = {k: v for k, v in node.host.items() if k not in ("profile", "overrides")}
    return json_digest([converge_digest, host, node.vllm_version, role_vars])


@dataclass(frozen=True)
class ConvergeInput:
    """What one node's converge reads: made once from the plan (:meth:`of`), carried to the converge as JSON in
    ``VLLM_FLEET_NODE`` (:meth:`to_json`, :meth:`from_json`), and the one value the roles' variables are derived
    from (``role_vars.extravars``) by the converge, the fleet validator and the audit alike."""

    host: dict[str, Any]
    """The host entry of the fleet spec, defaults filled in (name, address, ssh_port, ssh_user, host_key, …)."""
    profile: str
    profile_data: dict[str, Any]
    vllm_version: str
    vllm_config: dict[str, Any]
    """In render order: the order the role writes the config file in (its sha256 is ``config_hash``)."""
    config_hash: str
    role_vars: dict[str, Any]
    system_digest: str | None = None
    """Everything but the server's own config (the Pulumi program's): a host whose last full converge wrote the
    same digest only rolls the server."""

    @classmethod
    def of(cls, node: NodeSpec, role_vars: dict[str, Any], system_digest: str | None = None) -> ConvergeInput:
        return cls(
            host=node.host,
            profile=node.profile,
            profile_data=node.profile_data,
            vllm_version=node.vllm_version,
            vllm_config=node.vllm_config,
            config_hash=node.config_hash,
            role_vars=role_vars,
            system_digest=system_digest,
        )

    @property
    def name(self) -> str:
        return str(self.host["name"])

    def as_dict(self) -> dict[str, Any]:
        """The JSON form's mapping, keys in the order every stack's state holds them (system_digest first)."""
        out: dict[str, Any] = {} if self.system_digest is None else {"system_digest": self.system_digest}
        return out | {k: v for k, v in asdict(self).items() if k != "system_digest"}

    def to_json(self) -> str:
        # Not key-sorted: vllm_config's order is the config file's. Byte for byte what earlier releases wrote, so
        # an existing stack's inputs do not change.
        return json.dumps(self.as_dict())

    @classmethod
    def from_json(cls, text: str) -> ConvergeInput:
        data = json.loads(text)
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class FleetPlan:
    nodes: list[NodeSpec]
    batch_size: int | str = 1
    """Hosts per rollout batch, or a share of the serving hosts (``"25%"``)."""
    role_vars: dict[str, Any] = field(default_factory=dict)
    canary: bool = True
    """The first rollout batch is one host."""
    pause_s: float = 0
    """Wait between rollout batches."""
    provision_parallel: int = 4
    """New (not yet serving) hosts converged at once."""
    analysis: dict[str, float] | None = None
    """The canary analysis's thresholds (spec.AnalysisSpec's fields); None: no analysis."""

    def batch_hosts(self, serving: int) -> int:
        """Hosts per rollout batch when ``serving`` hosts are in the rollout (a share rounds up, at least 1)."""
        if isinstance(self.batch_size, str):
            return max(1, -(-serving * int(self.batch_size.rstrip("%")) // 100))
        return self.batch_size

    def batches(self, nodes: list[NodeSpec] | None = None) -> list[list[NodeSpec]]:
        """Rollout order of ``nodes`` (default: all): the canary alone, then ``batch_size`` at a time."""
        nodes = self.nodes if nodes is None else nodes
        size = self.batch_hosts(len(nodes))
        head = nodes[:1] if self.canary and size > 1 else []
        rest = nodes[len(head) :]
        return ([head] if head else []) + [rest[i : i + size] for i in range(0, len(rest), size)]

    def provision_waves(self, nodes: list[NodeSpec]) -> list[list[NodeSpec]]:
        """New hosts, ``provision_parallel`` at a time: nothing to protect, so no canary and no pause."""
        n = self.provision_parallel
        return [nodes[i : i + n] for i in range(0, len(nodes), n)]

    def to_json(self) -> str:
        # Insertion order kept: a node's vllm_config is in render order, which is the order the role writes the
        # config file in (so the file's sha256 is the plan's config_hash and the audit's desired text).
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> FleetPlan:
        data = json.loads(text)
        return cls(
            nodes=[NodeSpec(**n) for n in data["nodes"]],
            batch_size=data["batch_size"],
            role_vars=data["role_vars"],
            canary=data.get("canary", True),
            pause_s=data.get("pause_s", 0),
            provision_parallel=data.get("provision_parallel", 4),
            analysis=data.get("analysis"),
        )
