"""A stack of `vllm-fleet-command` resources (the stack's keys on its explicit provider) moves to pulumi-command's
`command` package with the real engine: `deploy.migrate_commands` edits the state, no delete runs (the removal
playbook would take a live node out of service), and the next `up` runs nothing at all -- no create, no update."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.inline_stack import inline_stack

pytestmark = pytest.mark.e2e


def test_vllm_fleet_command_stack_moves_to_pulumi_command_without_running_anything(tmp_path: Path) -> None:
    import pulumi
    import pulumi_command
    from pulumi import automation as auto

    from vllm_fleet.deploy import ensure_engine, migrate_commands
    from vllm_fleet.pulumi.commands import API_KEY, CommandProvider, LocalCommand
    from vllm_fleet.pulumi.stack_secrets import SECRETS_ENV

    engine = ensure_engine()
    mark = tmp_path / "mark"
    runs = {action: f"echo {action} $NODE >> {mark}" for action in ("create", "update", "delete")}
    phase = {"new": False}

    def program() -> None:
        key = pulumi.Config().require_secret("apiKey")
        stack = f"{pulumi.get_project()}/{pulumi.get_stack()}"
        provider = None if phase["new"] else CommandProvider("commands", api_key=key)  # 0.3: keys on the provider
        for node in ("node1", "node2"):
            parent = pulumi.ComponentResource("vllm-fleet:index:GpuNode", node)
            env = {"NODE": node, "VLLM_FLEET_NODE": json.dumps({"host": {"name": node}})}
            if phase["new"]:  # the program now: pulumi_command, the stack named, its keys in stack config
                pulumi_command.local.Command(
                    f"{node}-converge", **runs, environment={**env, SECRETS_ENV: stack},
                    opts=pulumi.ResourceOptions(parent=parent),
                )  # fmt: skip
                continue
            LocalCommand(
                f"{node}-converge", **runs, environment=env, secret_environment={"VLLM_FLEET_API_KEY": API_KEY},
                opts=pulumi.ResourceOptions(parent=parent, provider=provider),
            )  # fmt: skip

    st = inline_stack(engine, "vllm-fleet-command-migration-test", program, tmp_path)
    try:
        st.set_config("apiKey", auto.ConfigValue(value="k-" + "9" * 12, secret=True))
        st.up(color="never")
        assert sorted(mark.read_text().splitlines()) == ["create node1", "create node2"]

        logged: list[str] = []
        done = migrate_commands(st, logged.append)
        assert len(done) == 3 and all(line.startswith("state: ") for line in logged)
        resources = st.export_stack().deployment["resources"]
        types = sorted({r["type"] for r in resources})
        assert not [t for t in types if "vllm-fleet-command" in t], types
        state = json.dumps(resources)
        assert "k-999999999999" not in state and "ciphertext" not in state  # the keys left the state

        phase["new"] = True
        preview = st.preview(color="never")
        assert set(preview.change_summary) == {"same"}, preview.change_summary
        result = st.up(color="never")
        assert set(result.summary.resource_changes or {}) == {"same"}, result.summary.resource_changes
        assert sorted(mark.read_text().splitlines()) == ["create node1", "create node2"]  # nothing ran
        assert migrate_commands(st, logged.append) == []  # done once

        st.destroy(color="never")  # the converge's delete, through the command package's provider
        assert sorted(mark.read_text().splitlines())[-2:] == ["delete node1", "delete node2"]
    finally:
        st.workspace.remove_stack(st.name, force=True)
