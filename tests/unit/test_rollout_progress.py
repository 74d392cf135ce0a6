"""The rollout's progress display from engine event sequences, built with the Automation API's own event classes
in the shapes the real engine sends (recorded from `pulumi up` of a program with the GpuNode names: a debug
diagnostic per registration, the plan note as an info diagnostic, the error diagnostic before the failed step)."""

from __future__ import annotations

import io
import re
from itertools import count
from pathlib import Path

import pytest
from pulumi.automation import (
    DiagnosticEvent,
    EngineEvent,
    OpType,
    ResOpFailedEvent,
    ResourcePreEvent,
    ResOutputsEvent,
    StepEventMetadata,
    SummaryEvent,
)
from rich.console import Console

from vllm_fleet.project.paths import project_root
from vllm_fleet.pulumi.names import RolloutPlan, node_step_name, pause_name, split_node_step
from vllm_fleet.rollout.live import RolloutWatch
from vllm_fleet.rollout.progress import ROLLED_BACK_MARKER, Progress, change_lines, render

STACK = "urn:pulumi:lab::vllm-fleet::"
COMMAND = "command:local:Command"  # every step of a node (pulumi_command's local.Command)
_seq = count()


def urn(host: str, step: str) -> str:
    """A node's command URN, spelt out (not through the name helpers: this pins the names the program makes)."""
    return f"{STACK}vllm-fleet:index:GpuNode${COMMAND}::{host}-{step}"


def meta(op: str, urn: str) -> StepEventMetadata:
    kind = urn.split("::")[2].rsplit("$", 1)[-1]
    return StepEventMetadata(
        op=OpType(op), urn=urn, type=kind, provider=f"{STACK}pulumi:providers:command::default_1_2_1::id"
    )


def event(t: float, **kind: object) -> EngineEvent:
    return EngineEvent(sequence=next(_seq), timestamp=int(t), **kind)  # type: ignore[arg-type]


def pre(t: float, op: str, urn: str) -> EngineEvent:
    return event(t, resource_pre_event=ResourcePreEvent(meta(op, urn)))


def outs(t: float, op: str, urn: str) -> EngineEvent:
    return event(t, res_outputs_event=ResOutputsEvent(meta(op, urn)))


def failed(t: float, op: str, urn: str) -> EngineEvent:
    return event(t, res_op_failed_event=ResOpFailedEvent(meta(op, urn), status=1, steps=0))


def diag(t: float, message: str, severity: str = "info", urn: str | None = None) -> EngineEvent:
    prefix = None if severity == "info" else f"{severity}: "
    return event(t, diagnostic_event=DiagnosticEvent(message, "never", severity, urn=urn, prefix=prefix))


def summary(t: float) -> EngineEvent:
    return event(t, summary_event=SummaryEvent(False, int(t), {}, {}))


def plan_note(t: float, plan: RolloutPlan) -> EngineEvent:
    return diag(t, plan.message() + "\n")


def step(t0: float, t1: float, host: str, name: str, op: str) -> list[EngineEvent]:
    return [pre(t0, op, urn(host, name)), outs(t1, op, urn(host, name))]


def engine_noise(t: float) -> list[EngineEvent]:
    """What every run sends that is no host's step: the stack, the provider, the API key's version, components."""
    return [
        diag(t, "resource registration prepared: ty=vllm-fleet:index:GpuNode, name=node1\n", "debug"),
        pre(t, "same", f"{STACK}pulumi:pulumi:Stack::vllm-fleet-lab"),
        pre(t, "same", f"{STACK}pulumi:providers:command::default_1_2_1"),
        outs(t, "same", f"{STACK}pulumi:providers:command::default_1_2_1"),
        pre(t, "same", f"{STACK}command:local:Command::api-key-version"),
        outs(t, "same", f"{STACK}command:local:Command::api-key-version"),
        pre(t, "same", f"{STACK}vllm-fleet:index:GpuNode::node1"),
        outs(t, "same", f"{STACK}vllm-fleet:index:GpuNode::node1"),
    ]


def feed(p: Progress, events: list[EngineEvent]) -> list[str]:
    lines: list[str] = []
    for e in events:
        lines += change_lines(p, p.apply(e), float(e.timestamp))
    return lines


def phases(p: Progress) -> dict[str, str]:
    return {h.name: h.phase for h in p.hosts.values()}


CANARY = RolloutPlan(batches=[["node1"], ["node2"], ["node3"]], canary=True, smoke=True)


def test_a_healthy_rollout_with_a_canary() -> None:
    p = Progress()
    lines = feed(p, [plan_note(100, CANARY), *engine_noise(100)])
    assert phases(p) == {"node1": "waiting", "node2": "waiting", "node3": "waiting"} and lines == []

    lines += feed(p, [*step(101, 102, "node1", "preflight", "same"), pre(102, "update", urn("node1", "converge"))])
    assert render(p, 130) == [
        "rollout: batch 1 of 3 · hosts done 0/3 · failures 0 · 30s",
        "host   batch       state       elapsed  detail",
        "node1  1/3 canary  converging  28s",
        "node2  2/3         waiting     -",
        "node3  3/3         waiting     -",
    ]
    lines += feed(
        p,
        [
            outs(180, "update", urn("node1", "converge")),
            *step(180, 190, "node1", "smoke", "update"),
            *step(190, 191, "node2", "preflight", "same"),
            *step(191, 260, "node2", "converge", "update"),
            *step(260, 265, "node2", "smoke", "update"),
            *step(265, 266, "node3", "preflight", "same"),
            *step(266, 330, "node3", "converge", "update"),
            *step(330, 335, "node3", "smoke", "update"),
            outs(335, "same", f"{STACK}pulumi:pulumi:Stack::vllm-fleet-lab"),
            summary(335),
        ],
    )
    assert phases(p) == {"node1": "done", "node2": "done", "node3": "done"}
    assert render(p, 400) == [
        "rollout (finished): batch 3 of 3 · hosts done 3/3 · failures 0 · 5m00s",
        "host   batch       state  elapsed  detail",
        "node1  1/3 canary  done   1m28s",
        "node2  2/3         done   1m14s",
        "node3  3/3         done   1m09s",
    ]
    # Off a terminal: one line per change, the host's own step first, in the order the engine ran them.
    assert lines == [
        "[2s] node1 (batch 1/3 canary): converging",
        "[1m20s] node1 (batch 1/3 canary): smoke",
        "[1m30s] node1 (batch 1/3 canary): done after 1m28s",
        "[1m31s] node2 (batch 2/3): converging",
        "[2m40s] node2 (batch 2/3): smoke",
        "[2m45s] node2 (batch 2/3): done after 1m14s",
        "[2m46s] node3 (batch 3/3): converging",
        "[3m50s] node3 (batch 3/3): smoke",
        "[3m55s] node3 (batch 3/3): done after 1m09s",
        "[3m55s] rollout (finished): batch 3 of 3 · hosts done 3/3 · failures 0 · 3m55s",
    ]
    assert not any("\x1b" in line for line in lines)  # no cursor or colour codes in the log form


def test_a_failed_canary_stops_the_later_batches_and_says_it_rolled_back() -> None:
    error = (
        'exit 2: fatal: [node1]: FAILED! => {"msg": "node1: the new deployment of vllm@main (profile cpu-lab, '
        "vLLM 0.32.0) did not become healthy: crashed. Restored the last-known-good\n config (/etc/vllm/main.yaml.lkg) "
        'and unit: the server is healthy on them again."}\n'
    )
    p = Progress()
    feed(p, [plan_note(0, CANARY), *engine_noise(0), *step(1, 2, "node1", "preflight", "same")])
    feed(p, [pre(2, "update", urn("node1", "converge"))])
    lines = feed(
        p, [diag(200, error, "error", urn("node1", "converge")), failed(200, "update", urn("node1", "converge"))]
    )
    assert lines == [
        "[3m20s] node1 (batch 1/3 canary): rolled back after 3m18s (converge failed: back on its last-known-good)"
    ]
    lines = feed(p, [diag(201, "update failed\n", "error"), summary(201)])
    assert phases(p) == {"node1": "rolled back", "node2": "untouched", "node3": "untouched"}
    assert lines[0] == "[3m21s] rollout (stopped): batch 1 of 3 · hosts done 0/3 · failures 1 · 3m21s"
    assert lines[1:] == [
        "[3m21s] node2 (batch 2/3): untouched (the rollout stopped before it)",
        "[3m21s] node3 (batch 3/3): untouched (the rollout stopped before it)",
    ]
    assert render(p, 201)[2] == "node1  1/3 canary  rolled back  3m18s    converge failed: back on its last-known-good"


def test_an_unreachable_host_fails_at_its_preflight_with_the_engines_error() -> None:
    p = Progress()
    plan = RolloutPlan(batches=[["node1", "node2"], ["node3"]], smoke=True)
    feed(p, [plan_note(0, plan), *step(1, 5, "node1", "preflight", "update")])
    feed(p, [pre(1, "update", urn("node2", "preflight"))])
    # The engine sends the error diagnostic, then the failed step; the other host of the batch finishes.
    ssh = "exit 255: ssh: connect to host 10.0.0.2 port 22: No route to host\n\n"
    feed(p, [diag(11, ssh, "error", urn("node2", "preflight")), failed(11, "update", urn("node2", "preflight"))])
    feed(p, [*step(5, 40, "node1", "converge", "update"), *step(40, 45, "node1", "smoke", "update"), summary(46)])
    assert phases(p) == {"node1": "done", "node2": "failed", "node3": "untouched"}
    assert p.hosts["node2"].detail == "preflight: exit 255: ssh: connect to host 10.0.0.2 port 22: No route to host"
    assert render(p, 46)[0] == "rollout (stopped): batch 1 of 2 · hosts done 1/3 · failures 1 · 46s"


def test_new_hosts_are_provisioned_side_by_side_beside_the_rollout() -> None:
    plan = RolloutPlan(batches=[["node1"]], new=[["node4", "node5"], ["node6"]], smoke=True)
    p = Progress()
    feed(p, [plan_note(0, plan), *engine_noise(0), *step(1, 2, "node1", "preflight", "same")])
    feed(p, [*step(1, 3, "node4", "preflight", "create"), *step(1, 3, "node5", "preflight", "create")])
    feed(p, [pre(3, "create", urn("node4", "converge")), pre(3, "create", urn("node5", "converge"))])
    feed(p, [pre(2, "update", urn("node1", "converge"))])
    assert phases(p) == {"node1": "converging", "node4": "provisioning", "node5": "provisioning", "node6": "waiting"}
    assert render(p, 63) == [
        "rollout: batch 1 of 1 · new hosts 0/3 · hosts done 0/4 · failures 0 · 1m03s",
        "host   batch    state         elapsed  detail",
        "node1  1/1      converging    1m01s",
        "node4  new 1/2  provisioning  1m02s",
        "node5  new 1/2  provisioning  1m02s",
        "node6  new 2/2  waiting       -",
    ]
    feed(p, [outs(300, "create", urn("node4", "converge")), *step(300, 302, "node4", "smoke", "create")])
    feed(p, [outs(310, "create", urn("node5", "converge")), *step(310, 312, "node5", "smoke", "create")])
    feed(p, [*step(312, 313, "node6", "preflight", "create"), *step(313, 600, "node6", "converge", "create")])
    feed(p, [*step(600, 602, "node6", "smoke", "create")])
    assert phases(p)["node6"] == "done" and phases(p)["node1"] == "converging"
    assert render(p, 602)[0] == "rollout: batch 1 of 1 · new hosts 3/3 · hosts done 3/4 · failures 0 · 10m02s"


def test_a_no_op_run_leaves_every_host_unchanged() -> None:
    p = Progress()
    events = [plan_note(0, CANARY), *engine_noise(0)]
    for host in ("node1", "node2", "node3"):
        events += [*step(1, 1, host, "preflight", "same"), *step(1, 1, host, "converge", "same")]
        events += step(1, 1, host, "smoke", "same")
    lines = feed(p, [*events, summary(2)])
    assert phases(p) == {"node1": "unchanged", "node2": "unchanged", "node3": "unchanged"}
    assert render(p, 2)[0] == "rollout (finished): batch 3 of 3 · hosts done 3/3 · failures 0 · 2s"
    assert lines[0] == "[1s] node1 (batch 1/3 canary): unchanged"


def test_a_cordoned_host_is_shown_skipped_with_its_reason_and_stays_so() -> None:
    p = Progress()
    plan = RolloutPlan(batches=[["node1"]], cordoned={"node2": "GPU 0 Xid 79"}, smoke=True)
    assert RolloutPlan.from_message(plan.message()) == plan
    events = [plan_note(0, plan), *engine_noise(0)]
    events += [*step(1, 5, "node1", "preflight", "same"), *step(5, 20, "node1", "converge", "update")]
    events += step(20, 30, "node1", "smoke", "update")
    for name in ("preflight", "converge", "smoke"):  # the engine keeps its last inputs: every step is `same`
        events += step(1, 1, "node2", name, "same")
    lines = feed(p, [*events, summary(31)])
    assert phases(p) == {"node1": "done", "node2": "cordoned"}
    table = render(p, 31)
    assert table[0] == "rollout (finished): batch 1 of 1 · hosts done 1/1 · failures 0 · cordoned 1 (skipped) · 31s"
    assert table[-1].split() == ["node2", "cordoned", "cordoned", "-", "skipped:", "GPU", "0", "Xid", "79;", "uncordon",
                                 "it", "to", "roll", "it"]  # fmt: skip
    assert not any("node2" in line for line in lines)  # no step of it ran, so nothing changed


def test_without_the_smoke_gate_a_host_is_done_after_its_converge() -> None:
    p = Progress()
    feed(p, [plan_note(0, RolloutPlan(batches=[["node1"]], smoke=False)), *step(0, 1, "node1", "preflight", "same")])
    feed(p, [*step(1, 30, "node1", "converge", "update")])
    assert phases(p) == {"node1": "done"}


def test_the_pause_between_batches_shows_in_the_header() -> None:
    plan = RolloutPlan(batches=[["node1"], ["node2"]], canary=True, smoke=True, pause_s=30)
    p = Progress()
    feed(
        p, [plan_note(0, plan), *step(0, 1, "node1", "preflight", "same"), *step(1, 50, "node1", "converge", "update")]
    )
    feed(p, [*step(50, 60, "node1", "smoke", "update")])
    lines = feed(p, [pre(60, "update", f"{STACK}command:local:Command::{pause_name(0)}")])
    assert lines == [
        "[1m00s] rollout: batch 1 of 2 (pause after batch 1: 0s of 30s) · hosts done 1/2 · failures 0 · 1m00s"
    ]
    assert render(p, 75)[0].startswith("rollout: batch 1 of 2 (pause after batch 1: 15s of 30s)")
    feed(p, [outs(90, "update", f"{STACK}command:local:Command::{pause_name(0)}")])
    assert render(p, 91)[0] == "rollout: batch 1 of 2 · hosts done 1/2 · failures 0 · 1m31s"
    # A pause that does not run (no host of its batch changed) is no pause.
    q = Progress()
    assert q.apply(pre(1, "same", f"{STACK}command:local:Command::{pause_name(0)}")) == [] and q.pause is None


def test_unknown_resources_and_messages_are_ignored() -> None:
    p = Progress()
    feed(p, [plan_note(0, CANARY)])
    before = [(h.name, h.phase, h.started) for h in p.hosts.values()]
    ignored = [
        *engine_noise(1),
        # Not a GpuNode's child, though named like one; another program's component's child; a node's unknown child.
        pre(2, "create", f"{STACK}command:local:Command::node1-converge"),
        pre(2, "create", f"{STACK}other:index:Thing$command:local:Command::node2-smoke"),
        pre(2, "create", f"{STACK}vllm-fleet:index:GpuNode$command:local:Command::node1-backup"),
        failed(3, "create", f"{STACK}command:local:Command::node1-converge"),
        diag(3, "boom\n", "error", f"{STACK}command:local:Command::node1-converge"),
        diag(3, "warning: something about a plugin\n", "warning"),
        diag(3, "vllm-fleet rollout plan: {not json\n"),
        diag(3, 'vllm-fleet rollout plan: {"batches": 3}\n'),
        pre(3, "create", f"{STACK}command:local:Command::rollout-pause-x"),
        event(3),
    ]
    for e in ignored:
        assert p.apply(e) == [], e
    assert [(h.name, h.phase, h.started) for h in p.hosts.values()] == before and p.pause is None
    assert p.plan == CANARY


def test_a_host_missing_from_the_plan_is_still_shown() -> None:
    p = Progress()
    feed(p, [*step(0, 5, "node9", "preflight", "create"), pre(5, "create", urn("node9", "converge"))])
    assert render(p, 10)[2] == "node9  -      provisioning  10s"


def test_a_run_that_ends_mid_step_leaves_the_host_interrupted() -> None:
    p = Progress()
    feed(p, [plan_note(0, CANARY), pre(1, "update", urn("node1", "converge"))])
    changed = p.finish(30, stopped=True)
    assert phases(p) == {"node1": "interrupted", "node2": "untouched", "node3": "untouched"}
    assert changed == ["", "node1", "node2", "node3"] and p.finish(31, stopped=True) == []
    # A run that failed before the engine said anything (the lab did not come up): nothing to report.
    assert Progress().finish(5, stopped=True) == []


def test_names_go_both_ways() -> None:
    for host in ("node1", "web-smoke", "a-converge-b"):
        for s in ("preflight", "converge", "smoke"):
            assert split_node_step(node_step_name(host, s)) == (host, s)  # type: ignore[arg-type]
    assert node_step_name("node1", "converge") == "node1-converge" and pause_name(2) == "rollout-pause-2"
    assert split_node_step("node1") is None and split_node_step("-smoke") is None
    plan = RolloutPlan(batches=[["a"], ["b", "c"]], new=[["d"]], canary=True, smoke=False, pause_s=2.5)
    assert RolloutPlan.from_message(plan.message() + "\n") == plan
    assert RolloutPlan.from_message("something else") is None


def test_the_rolled_back_marker_is_what_the_role_says() -> None:
    """The role's failure message (a folded YAML string) still holds the words the display looks for."""
    text = (project_root() / "roles" / "vllm_service" / "tasks" / "rollback.yml").read_text(encoding="utf-8")
    assert ROLLED_BACK_MARKER in re.sub(r"\s+", " ", text)


def test_the_program_notes_its_plan_for_the_display(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.test_pulumi_program import example_fleet, run_program

    fleet = example_fleet()
    fleet["rollout"] = {"batch_size": 1, "pause_s": 5}
    endpoints = {h["name"]: f"http://{h['address']}:8000" for h in fleet["hosts"]}
    monkeypatch.setattr(
        "vllm_fleet.pulumi.program.serving_endpoints", lambda _e: {endpoints["gpu-4090-a"], endpoints["gpu-4090-b"]}
    )
    monkeypatch.setattr("vllm_fleet.pulumi.program.cordoned_nodes", lambda _s: {})
    notes: list[str] = []
    monkeypatch.setattr("pulumi.log.info", lambda msg, *a, **kw: notes.append(msg))
    mocks = run_program(fleet)
    plans = [p for p in map(RolloutPlan.from_message, notes) if p is not None]
    expected = [["gpu-4090-a"], ["gpu-4090-b"]]
    assert plans == [RolloutPlan(batches=expected, new=[["gpu-l40-a"]], canary=True, smoke=True, pause_s=5)]
    # Every command the program registered for a node maps back to its host and step.
    steps = {split_node_step(r.name) for r in mocks.resources if r.typ.startswith("command:")}
    assert {s for s in steps if s is not None} == {
        (h, s) for h in ("gpu-4090-a", "gpu-4090-b", "gpu-l40-a") for s in ("preflight", "converge", "smoke")
    }


def watch_run(console: Console, log: Path) -> RolloutWatch:
    with RolloutWatch(console, log, clock=lambda: 100.0) as watch:
        watch.on_output("Updating (lab):\n")
        for e in [plan_note(0, CANARY), *step(1, 2, "node1", "preflight", "same")]:
            watch.on_event(e)
        watch.on_event(pre(2, "update", urn("node1", "converge")))
        watch.on_event(diag(50, "exit 2: broke\n\n", "error", urn("node1", "converge")))
        watch.on_event(failed(50, "update", urn("node1", "converge")))
        watch.finish(stopped=True)  # the Automation API raised: no summary came
    return watch


def test_off_a_terminal_the_watch_prints_a_line_per_change_and_logs_pulumi(tmp_path: Path) -> None:
    text = io.StringIO()
    watch_run(Console(file=text, force_terminal=False, width=200), tmp_path / "up.log")
    assert text.getvalue().splitlines() == [
        f"pulumi's own output: {tmp_path / 'up.log'}",
        "[1m40s] node1 (batch 1/3 canary): converging",
        "[1m40s] node1 (batch 1/3 canary): failed after 48s (converge: exit 2: broke)",
        "[1m40s] rollout (stopped): batch 1 of 3 · hosts done 0/3 · failures 1 · 1m40s",
        "[1m40s] node2 (batch 2/3): untouched (the rollout stopped before it)",
        "[1m40s] node3 (batch 3/3): untouched (the rollout stopped before it)",
    ]
    assert (tmp_path / "up.log").read_text() == "Updating (lab):\n"


def test_on_a_terminal_the_watch_leaves_the_last_table(tmp_path: Path) -> None:
    text = io.StringIO()
    watch_run(Console(file=text, force_terminal=True, width=200), tmp_path / "up.log")
    screen = text.getvalue()
    assert "\x1b[" in screen  # a live display: cursor movement
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)
    assert "rollout (stopped): batch 1 of 3 · hosts done 0/3 · failures 1 · 1m40s" in plain
    assert "node1  1/3 canary  failed     48s      converge: exit 2: broke" in plain
    assert "node3  3/3         untouched  -        the rollout stopped before it" in plain
