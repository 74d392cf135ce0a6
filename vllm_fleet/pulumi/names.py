"""What the Pulumi program tells the engine, read back by the rollout's progress display: in one place.

The program (``gpu_node.py``, ``program.py``) names its resources with these functions, and the progress display
(``vllm_fleet/rollout/progress.py``) maps the engine's events back to hosts and steps with the same functions.
The names are part of every existing stack's state: changing one replaces that resource (a converge's delete is
the removal playbook), so they stay byte for byte what they are.

Pure: no Pulumi import (the program and the display both load it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

Step = Literal["preflight", "converge", "smoke"]
GPU_NODE_TYPE = "vllm-fleet:index:GpuNode"
"""The GpuNode component's type: its children's URNs carry it in their qualified type (``GpuNode$...``)."""
NODE_STEPS: tuple[Step, ...] = ("preflight", "converge", "smoke")
"""A node's child commands, in the order they run (smoke only when the gate is on)."""
PAUSE_PREFIX = "rollout-pause-"


def node_step_name(host: str, step: Step) -> str:
    """The resource name of ``host``'s ``step`` command (``node1-converge``)."""
    return f"{host}-{step}"


def split_node_step(name: str) -> tuple[str, Step] | None:
    """``(host, step)`` of a node's command resource name, or None for any other name."""
    for step in NODE_STEPS:
        host = name.removesuffix(f"-{step}")
        if host != name and host:
            return host, step
    return None


def pause_name(k: int) -> str:
    """The resource name of the wait after rollout batch ``k`` (0-based)."""
    return f"{PAUSE_PREFIX}{k}"


def pause_batch(name: str) -> int | None:
    """The batch (0-based) a pause resource name follows, or None for any other name."""
    rest = name.removeprefix(PAUSE_PREFIX)
    return int(rest) if rest != name and rest.isdigit() else None


PLAN_PREFIX = "vllm-fleet rollout plan: "
"""How the program's plan note (an info diagnostic, once per run) starts; JSON follows."""


@dataclass(frozen=True)
class RolloutPlan:
    """The order the program registered the hosts in: what the engine's events alone do not say."""

    batches: list[list[str]] = field(default_factory=list)
    """Serving hosts, batch by batch (the first one alone when ``canary``)."""
    new: list[list[str]] = field(default_factory=list)
    """Hosts not serving yet, in provisioning waves (beside the rollout)."""
    canary: bool = False
    """The first batch is the canary."""
    smoke: bool = True
    """Each host's last step is its smoke gate (else its converge)."""
    pause_s: float = 0.0
    cordoned: dict[str, str] = field(default_factory=dict)
    """Serving hosts a person cordoned, each with its reason: in no batch, left as they are."""

    def message(self) -> str:
        doc = {
            "batches": self.batches,
            "new": self.new,
            "canary": self.canary,
            "smoke": self.smoke,
            "pause_s": self.pause_s,
            "cordoned": self.cordoned,
        }
        return PLAN_PREFIX + json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_message(cls, message: str) -> RolloutPlan | None:
        """The plan in a diagnostic's text, or None if the text is not the plan note (or not a valid one)."""
        text = message.strip()
        if not text.startswith(PLAN_PREFIX):
            return None
        try:
            doc = json.loads(text.removeprefix(PLAN_PREFIX))
            plan = cls(
                batches=[[str(h) for h in b] for b in doc["batches"]],
                new=[[str(h) for h in w] for w in doc["new"]],
                canary=bool(doc["canary"]),
                smoke=bool(doc["smoke"]),
                pause_s=float(doc["pause_s"]),
                cordoned={str(h): str(r) for h, r in (doc.get("cordoned") or {}).items()},
            )
        except (ValueError, KeyError, TypeError):
            return None
        return plan
