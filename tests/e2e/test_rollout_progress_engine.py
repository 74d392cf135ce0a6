"""The progress display fed by the real engine: `deploy.up` of a program shaped like the fleet's (GpuNode
components, their preflight/converge/smoke commands and the rollout pause under the program's own names, the plan
note), whose commands are `true`, `sleep` and `exit 3` on the controller. No host is reached."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

pytestmark = pytest.mark.e2e


def fake_fleet(version: str, failing: str | None) -> Any:
    import pulumi
    from pulumi_command.local import Command as LocalCommand

    from vllm_fleet.pulumi.names import GPU_NODE_TYPE, RolloutPlan, node_step_name, pause_name

    class Node(pulumi.ComponentResource):
        def __init__(self, name: str, after: list[pulumi.Resource], took: int) -> None:
            super().__init__(GPU_NODE_TYPE, name, None, pulumi.ResourceOptions(depends_on=after))
            child = pulumi.ResourceOptions(parent=self)
            pre = LocalCommand(node_step_name(name, "preflight"), create="true", opts=child)
            work = "exit 3" if name == failing else f"sleep {took}"
            converge = LocalCommand(
                node_step_name(name, "converge"),
                create=work,
                update=work,
                environment={"VERSION": version},
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[pre])),
            )
            self.gate = LocalCommand(
                node_step_name(name, "smoke"),
                create="true",
                update="true",
                environment={"VERSION": version},
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[converge])),
            )
            self.register_outputs({})

    def program() -> None:
        plan = RolloutPlan(batches=[["a"], ["b", "c"]], new=[["d"]], canary=True, smoke=True, pause_s=1)
        pulumi.log.info(plan.message())
        canary = Node("a", [], 1)
        pause = LocalCommand(
            pause_name(0),
            create="sleep 1",
            update="sleep 1",
            environment={"VERSION": version},
            opts=pulumi.ResourceOptions(depends_on=[canary.gate]),
        )
        Node("b", [pause], 1)
        Node("c", [pause], 1)
        Node("d", [], 3)  # a new host, still converging when the canary fails

    return program


def test_the_engines_events_drive_the_display(tmp_path: Path) -> None:
    from pulumi import automation as auto

    from vllm_fleet.deploy.engine import Engine, ensure_engine, up
    from vllm_fleet.rollout.live import RolloutWatch

    built = ensure_engine(lambda _line: None)
    (tmp_path / "state").mkdir()
    (tmp_path / "passphrase").write_text("test")
    engine = Engine(built.bin_dir, built.home, tmp_path / "state", tmp_path / "passphrase")
    opts = auto.LocalWorkspaceOptions(
        pulumi_home=str(engine.home),
        env_vars=engine.env(),
        secrets_provider="passphrase",
        pulumi_command=auto.PulumiCommand(root=str(engine.bin_dir.parent), skip_version_check=True),
    )

    def run(version: str, failing: str | None = None) -> tuple[RolloutWatch, str]:
        text = io.StringIO()
        st = auto.create_or_select_stack(
            stack_name="progress", project_name="progress", program=fake_fleet(version, failing), opts=opts
        )
        with RolloutWatch(Console(file=text, force_terminal=False, width=200), tmp_path / "up.log") as watch:
            try:
                up(st, on_output=watch.on_output, on_event=watch.on_event)
            except auto.CommandError:
                watch.finish(stopped=True)
        return watch, text.getvalue()

    def phases(watch: RolloutWatch) -> dict[str, str]:
        return {h.name: h.phase for h in watch.progress.hosts.values()}

    first, lines = run("1")
    assert phases(first) == dict.fromkeys("abcd", "done"), lines
    assert "a (batch 1/2 canary): provisioning" in lines and "d (new 1/1): done" in lines
    assert "rollout (finished): batch 2 of 2 · new hosts 1/1 · hosts done 4/4 · failures 0" in lines
    assert "pause after batch 1" in lines  # the pause ran, and the header said so
    assert "Updating (progress)" in (tmp_path / "up.log").read_text()  # Pulumi's own output, in its log

    again, lines = run("1")
    assert phases(again) == dict.fromkeys("abcd", "unchanged"), lines

    failed, lines = run("2", failing="a")
    assert phases(failed) == {"a": "failed", "b": "untouched", "c": "untouched", "d": "interrupted"}, lines
    assert failed.progress.hosts["a"].detail == "converge: exit 3:"
    assert "rollout (stopped): batch 1 of 2 · new hosts 0/1 · hosts done 0/4 · failures 1" in lines
