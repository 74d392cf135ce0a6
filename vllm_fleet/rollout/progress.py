"""The rollout's live progress: the Pulumi engine's events in, per-host state and its text out (pure).

The engine's own event stream (the Automation API's ``on_event``) is the source of truth: a step starting
(``ResourcePreEvent``), finishing (``ResOutputsEvent``) or failing (``ResOpFailedEvent``, with the error in a
``DiagnosticEvent`` on the same URN). Its URNs name the resources the program created, mapped back to a host and
a step with the program's own name functions (``vllm_fleet.pulumi.names``). The batch of each host comes from the
program's plan note, an info diagnostic (``RolloutPlan``). Anything else (the provider, the API key's version,
another program's resources) is ignored.

What a host does inside its converge (drain, restart, health) is the role's, on the host: the engine sees one
converge step. Its journal has the finer phase, and the final report (``report.py``) reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pulumi.automation import EngineEvent, OpType, StepEventMetadata

from vllm_fleet.pulumi.names import GPU_NODE_TYPE, RolloutPlan, Step, pause_batch, split_node_step

Phase = Literal[
    "waiting",
    "preflight",
    "provisioning",
    "converging",
    "smoke",
    "done",
    "unchanged",
    "failed",
    "rolled back",
    "interrupted",
    "untouched",
    "cordoned",
]
Group = Literal["batch", "new", "cordoned", "?"]
FINISHED: tuple[Phase, ...] = ("done", "unchanged", "failed", "rolled back", "interrupted", "untouched", "cordoned")
FAILED: tuple[Phase, ...] = ("failed", "rolled back")
CONVERGING: tuple[Phase, ...] = ("provisioning", "converging")
ROLLED_BACK_MARKER = "Restored the last-known-good config"
"""What the vllm_service role's failure says when the host is back on its last-known-good (tasks/rollback.yml)."""
ROLLOUT = ""
"""The key of a change of the rollout itself (a pause, the end) among the changed hosts ``apply`` returns."""
_RUNS = {OpType.CREATE, OpType.UPDATE, OpType.REPLACE, OpType.CREATE_REPLACEMENT}
"""Steps that run a command (same, read, refresh and deletes run none of a node's steps)."""


@dataclass
class HostProgress:
    name: str
    group: Group = "?"
    """``batch``: a serving host, rolled in batch ``index``; ``new``: provisioned in wave ``index``; ``cordoned``: a
    serving host a person cordoned, left as it is."""
    index: int = 0
    phase: Phase = "waiting"
    started: float | None = None
    ended: float | None = None
    ran: bool = False
    """A step of this host ran a command (else every step was ``same``: the host is unchanged)."""
    detail: str = ""
    activity: str = ""
    """What its converge is doing now (draining, restarting …: ``rollout/phases.py``), while it converges."""
    activity_since: float | None = None
    """When the converge began that activity (the phase writer's clock)."""

    @property
    def state(self) -> str:
        """The phase, with the converge's activity while it runs: ``converging › draining``."""
        return f"{self.phase} › {self.activity}" if self.activity and self.phase in CONVERGING else self.phase

    def state_at(self, now: float) -> str:
        """``state`` with how long the activity has lasted: ``converging › waiting for the vLLM install
        (background, 2m10s)``, ``converging › restarting (12s)``: what a host waits for, and since when."""
        if not (self.activity and self.phase in CONVERGING and self.activity_since is not None):
            return self.state
        took = clock(max(0.0, now - self.activity_since))
        activity = f"{self.activity[:-1]}, {took})" if self.activity.endswith(")") else f"{self.activity} ({took})"
        return f"{self.phase} › {activity}"


@dataclass
class Progress:
    """Per-host state of one ``pulumi up``; feed it every engine event with ``apply``."""

    plan: RolloutPlan = field(default_factory=RolloutPlan)
    hosts: dict[str, HostProgress] = field(default_factory=dict)
    started_at: float | None = None
    pause: tuple[int, float] | None = None
    """The batch (0-based) whose pause runs now, and since when."""
    finished: bool = False
    stopped: bool = False
    """The run ended with a failure (later hosts untouched)."""
    _errors: dict[str, str] = field(default_factory=dict)
    _steps: dict[str, tuple[str, Step]] = field(default_factory=dict)

    def apply(self, event: EngineEvent) -> list[str]:
        """Take one engine event; return the hosts whose phase changed (``ROLLOUT``: the rollout's own state)."""
        at = float(event.timestamp)
        if self.started_at is None:
            self.started_at = at
        if (diag := event.diagnostic_event) is not None:
            plan = RolloutPlan.from_message(diag.message)
            if plan is not None:
                return self._set_plan(plan)
            if diag.severity == "error" and diag.urn:
                self._errors[diag.urn] = diag.message
                return self._explain(diag.urn)
            return []
        if (pre := event.resource_pre_event) is not None:
            return self._pre(pre.metadata, at)
        if (outs := event.res_outputs_event) is not None:
            return self._outputs(outs.metadata, at)
        if (failed := event.res_op_failed_event) is not None:
            return self._failed(failed.metadata, at)
        if event.summary_event is not None:
            return self.finish(at, stopped=any(h.phase in FAILED for h in self.hosts.values()))
        return []

    def note_activities(self, activities: dict[str, tuple[str, float]]) -> list[str]:
        """Take what each converge is doing now (``rollout.phases.read_activities``); return the hosts whose
        activity changed. Only a converging host takes one, and only one reported since its step began."""
        changed = []
        for name, (activity, since) in activities.items():
            host = self.hosts.get(name)
            if host is None or host.phase not in CONVERGING or activity == host.activity:
                continue
            if host.started is not None and since < host.started:
                continue
            host.activity, host.activity_since = activity, since
            changed.append(name)
        return changed

    def finish(self, at: float, *, stopped: bool) -> list[str]:
        """The run ended (``stopped``: by a failure); hosts never started are left untouched then. Nothing to say
        when the engine never sent an event (the run failed before `pulumi up`)."""
        if self.finished or self.started_at is None:
            return []
        self.finished, self.stopped, self.pause = True, stopped, None
        changed = [ROLLOUT]
        for h in self.hosts.values():
            if h.phase == "waiting" and stopped:
                h.phase, h.detail = "untouched", "the rollout stopped before it"
            elif h.phase not in FINISHED and h.phase != "waiting":
                h.phase, h.ended, h.detail = "interrupted", at, "the run ended before this host finished"
            else:
                continue
            changed.append(h.name)
        return changed

    def _set_plan(self, plan: RolloutPlan) -> list[str]:
        self.plan = plan
        groups: list[tuple[Group, int, list[str]]] = [("batch", k, b) for k, b in enumerate(plan.batches)]
        groups += [("new", k, w) for k, w in enumerate(plan.new)]
        groups += [("cordoned", 0, list(plan.cordoned))]
        for group, index, names in groups:
            for name in names:
                host = self.hosts.setdefault(name, HostProgress(name))
                host.group, host.index = group, index
                if group == "cordoned":
                    host.phase = "cordoned"
                    host.detail = f"skipped: {plan.cordoned[name]}; uncordon it to roll it"
        self.hosts = {**{n: self.hosts[n] for _, _, names in groups for n in names}, **self.hosts}
        return [ROLLOUT]

    def _node_step(self, meta: StepEventMetadata) -> tuple[HostProgress, Step] | None:
        """The host and step of a node's command: its URN's qualified type says its parent is a GpuNode."""
        if meta.urn in self._steps:
            name, step = self._steps[meta.urn]
            return self.hosts[name], step
        parts = meta.urn.split("::")
        if len(parts) != 4 or not parts[2].startswith(GPU_NODE_TYPE + "$"):
            return None
        found = split_node_step(parts[3])
        if found is None:
            return None
        name, step = found
        self._steps[meta.urn] = found
        return self.hosts.setdefault(name, HostProgress(name)), step

    def _pre(self, meta: StepEventMetadata, at: float) -> list[str]:
        k = _pause(meta)
        if k is not None:
            if meta.op in _RUNS:
                self.pause = (k, at)
                return [ROLLOUT]
            return []
        found = self._node_step(meta)
        if found is None or meta.op not in _RUNS:
            return []
        host, step = found
        if host.phase == "cordoned":
            return []
        host.ran = True
        host.started = host.started if host.started is not None else at
        host.phase = _running(step, meta.op)
        host.activity, host.activity_since = "", None
        return [host.name]

    def _outputs(self, meta: StepEventMetadata, at: float) -> list[str]:
        if _pause(meta) is not None:
            if self.pause is None:
                return []
            self.pause = None
            return [ROLLOUT]
        found = self._node_step(meta)
        if found is None:
            return []
        host, step = found
        if step != ("smoke" if self.plan.smoke else "converge") or host.phase in FINISHED:
            return []
        host.phase = "done" if host.ran else "unchanged"
        host.ended = at if host.ran else None
        return [host.name]

    def _failed(self, meta: StepEventMetadata, at: float) -> list[str]:
        found = self._node_step(meta)
        if found is None:
            return []
        host, step = found
        host.phase, host.ended = "failed", at
        host.detail = f"{step} failed"
        return self._explain(meta.urn) or [host.name]

    def _explain(self, urn: str) -> list[str]:
        """A failed host's detail from its error diagnostic (which may come before or after the failure)."""
        if urn not in self._steps or urn not in self._errors:
            return []
        host = self.hosts[self._steps[urn][0]]
        if host.phase not in FAILED:
            return []
        message = self._errors[urn]
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        host.detail = f"{self._steps[urn][1]}: {_shorten(lines[-1] if lines else 'failed')}"
        if ROLLED_BACK_MARKER in " ".join(message.split()):
            host.phase = "rolled back"
            host.detail = f"{self._steps[urn][1]} failed: back on its last-known-good"
        return [host.name]


def _pause(meta: StepEventMetadata) -> int | None:
    parts = meta.urn.split("::")
    return pause_batch(parts[3]) if len(parts) == 4 and "$" not in parts[2] else None


def _running(step: Step, op: OpType) -> Phase:
    if step == "converge":
        return "provisioning" if op == OpType.CREATE else "converging"
    return step


def _shorten(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def clock(seconds: float) -> str:
    """``41s``, ``2m05s``, ``1h02m``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def batch_label(p: Progress, h: HostProgress) -> str:
    if h.group == "batch":
        label = f"{h.index + 1}/{len(p.plan.batches)}"
        return label + " canary" if p.plan.canary and h.index == 0 else label
    if h.group == "new":
        return f"new {h.index + 1}/{len(p.plan.new)}"
    if h.group == "cordoned":
        return "cordoned"
    return "-"


def header(p: Progress, now: float) -> str:
    """``rollout: batch 2 of 3 · hosts done 1/4 · failures 0 · 1m05s``."""
    hosts = list(p.hosts.values())
    n = len(p.plan.batches)
    started = [h.index for h in hosts if h.group == "batch" and h.phase not in ("waiting", "untouched")]
    parts = [f"batch {max(started) + 1 if started else 0} of {n}" if n else "no serving host to roll"]
    if p.pause is not None:
        parts[0] += f" (pause after batch {p.pause[0] + 1}: {clock(now - p.pause[1])} of {p.plan.pause_s:g}s)"
    if p.plan.new:
        new = [h for h in hosts if h.group == "new"]
        parts.append(f"new hosts {sum(h.phase in ('done', 'unchanged') for h in new)}/{len(new)}")
    rolled = [h for h in hosts if h.group != "cordoned"]
    parts.append(f"hosts done {sum(h.phase in ('done', 'unchanged') for h in rolled)}/{len(rolled)}")
    parts.append(f"failures {sum(h.phase in FAILED for h in hosts)}")
    if cordoned := len(hosts) - len(rolled):
        parts.append(f"cordoned {cordoned} (skipped)")
    parts.append(clock(now - p.started_at) if p.started_at is not None else "0s")
    state = " (stopped)" if p.stopped else " (finished)" if p.finished else ""
    return f"rollout{state}: " + " · ".join(parts)


def elapsed(h: HostProgress, now: float) -> str:
    if h.started is None:
        return "-"
    return clock((h.ended if h.ended is not None else now) - h.started)


def render(p: Progress, now: float) -> list[str]:
    """The header and one aligned row per host (host, batch, state, elapsed, detail): the live table's text."""
    rows = [("host", "batch", "state", "elapsed", "detail")]
    rows += [(h.name, batch_label(p, h), h.state_at(now), elapsed(h, now), h.detail) for h in p.hosts.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    table = ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    return [header(p, now), *(line.rstrip() for line in table)]


def change_lines(p: Progress, changed: list[str], now: float) -> list[str]:
    """One line per change (for a log or CI, no cursor codes): the host's new state, or the rollout's header."""
    since = clock(now - p.started_at) if p.started_at is not None else "0s"
    out = []
    for name in dict.fromkeys(changed):
        if name == ROLLOUT:
            if p.pause is not None or p.finished:
                out.append(f"[{since}] {header(p, now)}")
            continue
        h = p.hosts[name]
        detail = f" ({h.detail})" if h.detail else ""
        took = f" after {elapsed(h, now)}" if h.phase in FINISHED and h.started is not None else ""
        group = f"batch {batch_label(p, h)}" if h.group == "batch" else batch_label(p, h)
        out.append(f"[{since}] {h.name} ({group}): {h.state}{took}{detail}")
    return out
