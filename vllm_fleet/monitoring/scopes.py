"""Who is monitored: the fleet's nodes, and the scopes their rules are written for.

A node comes from the resolved fleet (``NodeSpec``, a stack config's plan) or from the audit's view of an
inventory host (``Desired``: the same profile data, the exact config file). A *scope* is the nodes that share a
vLLM release and the same effective profile (SLOs, speculation, cache settings): one set of thresholds. Its
rules select ``profile="P"`` when it holds every node of that profile on that release, else the hosts by name
(per-host overrides). With ``--profile`` alone there are no nodes: one scope per profile, selected by profile.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from vllm_fleet.monitoring import series
from vllm_fleet.profiles.model import DecodeProfile

if TYPE_CHECKING:
    from vllm_fleet.audit.evidence import Desired
    from vllm_fleet.fleet.plan import NodeSpec


@dataclass(frozen=True)
class MonitoredNode:
    name: str
    target: str
    """``address:port`` Prometheus scrapes ``/metrics`` on."""
    hardware: str
    profile: str
    profile_data: dict[str, Any]
    vllm_version: str
    config_hash: str
    sentinel_target: str | None = None
    """``address:port`` of the node's sentinel (readiness, wedge, cordon, watchdog); None: the node runs none."""

    @classmethod
    def from_spec(cls, node: NodeSpec, sentinel_port: int | None = None) -> MonitoredNode:
        url = urlsplit(node.endpoint)
        return cls(
            name=node.name,
            target=url.netloc,
            hardware=node.hardware,
            profile=node.profile,
            profile_data=node.profile_data,
            vllm_version=node.vllm_version,
            config_hash=node.config_hash,
            sentinel_target=None
            if sentinel_port is None
            else f"{_bracketed(url.hostname or node.address)}:{sentinel_port}",
        )

    @classmethod
    def from_desired(cls, desired: Desired, sentinel_port: int | None = None) -> MonitoredNode:
        """An inventory host as the audit resolves it; the hash is the one of the exact config file, as in a plan."""
        profile = DecodeProfile.model_validate(desired.profile_data)
        address = f"[{desired.address}]" if ":" in desired.address else desired.address
        return cls(
            name=desired.host,
            target=f"{address}:{desired.port}",
            hardware=profile.hardware,
            profile=desired.profile,
            profile_data=desired.profile_data,
            vllm_version=desired.vllm_version,
            config_hash=hashlib.sha256(desired.config_text.encode()).hexdigest(),
            sentinel_target=None if sentinel_port is None else f"{address}:{sentinel_port}",
        )


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class Scope:
    """Nodes sharing a release and an effective profile: one set of thresholds."""

    vllm_version: str
    profile: DecodeProfile
    hosts: tuple[str, ...]
    """The nodes (empty: profile mode, no nodes known)."""
    by_host: bool
    """Select the hosts by name (the profile's nodes on this release do not all share these thresholds)."""

    @property
    def speculative(self) -> bool:
        return self.profile.speculative is not None

    def matchers(self) -> dict[str, str]:
        """Label matchers: ``{"label": 'op"value"'}``."""
        out = {
            "job": f'="{series.JOB}"',
            "vllm_version": f'="{self.vllm_version}"',
            "profile": f'="{self.profile.name}"',
        }
        if self.by_host:
            # Host names are [a-z0-9-] (HostSpec): nothing to escape in RE2 or in a PromQL string (re.escape's
            # "\-" would be an invalid escape in the latter).
            out["host"] = f'=~"{"|".join(self.hosts)}"'
        return out

    def selector(self, *, job: bool = True, extra: dict[str, str] | None = None) -> str:
        """``{job="vllm", vllm_version="…", profile="…"[, host=~"…"]…}``; ``extra``: label → full matcher."""
        m = self.matchers()
        if not job:
            m.pop("job")
        m.update(extra or {})
        return "{" + ", ".join(f"{k}{v}" for k, v in m.items()) + "}"

    @property
    def id(self) -> str:
        """The ``scope`` label of its alerts: the profile, with the hosts when selected by host."""
        return self.profile.name + (f"[{','.join(self.hosts)}]" if self.by_host else "")

    @property
    def label(self) -> str:
        """A short name for rule names and notes."""
        return self.profile.name + (f" ({', '.join(self.hosts)})" if self.by_host else "")


def release_selector(version: str, **extra: str) -> str:
    parts = [f'job="{series.JOB}"', f'vllm_version="{version}"', *(f"{k}{v}" for k, v in extra.items())]
    return "{" + ", ".join(parts) + "}"


def scopes_of(nodes: list[MonitoredNode]) -> list[Scope]:
    """The nodes grouped into scopes, in the order of first appearance."""
    groups: dict[tuple[str, str, str], list[MonitoredNode]] = {}
    for n in nodes:
        key = (n.vllm_version, n.profile, json.dumps(n.profile_data, sort_keys=True))
        groups.setdefault(key, []).append(n)
    per_profile: dict[tuple[str, str], int] = {}
    for version, profile, _ in groups:
        per_profile[(version, profile)] = per_profile.get((version, profile), 0) + 1
    return [
        Scope(
            vllm_version=version,
            profile=DecodeProfile.model_validate(members[0].profile_data),
            hosts=tuple(m.name for m in members),
            by_host=per_profile[(version, profile)] > 1,
        )
        for (version, profile, _), members in groups.items()
    ]


def profile_scopes(profiles: list[DecodeProfile]) -> list[Scope]:
    """``--profile`` alone: one scope per profile, at its pinned release."""
    return [Scope(p.vllm_version, p, (), False) for p in profiles]
