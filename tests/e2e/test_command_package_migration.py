"""A stack of `vllm-fleet-command` resources (the stack's keys on its explicit provider) moves to pulumi-command's
`command` package with the real engine, and no delete runs (the removal playbook would take a live node out of
service): through `vllm-fleet up` (`deploy.migrate_commands` edits the state), the next `up` runs nothing at all --
no create, no update; through a plain `pulumi up`, the GpuNode's aliases make it an in-place update."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.inline_stack import inline_stack

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("edit", [True, False], ids=["vllm-fleet-up", "plain-pulumi-up"])
def test_vllm_fleet_command_stack_moves_to_pulumi_command_without_a_delete(tmp_path: Path, edit: bool) -> None:
    import pulumi
    import pulumi_command
    from pulumi import automation as auto

    from tests.e2e.legacy_commands import API_KEY, CommandProvider, LocalCommand
    from vllm_fleet.deploy.engine import ensure_engine, migrate_commands
    from vllm_fleet.pulumi.gpu_node import was
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
                    opts=pulumi.ResourceOptions(parent=parent, aliases=was("local")),
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
        if edit:
            done = migrate_commands(st, logged.append)
            assert len(done) == 3 and all(line.startswith("state: ") for line in logged)
            resources = st.export_stack().deployment["resources"]
            assert not [r["type"] for r in resources if "vllm-fleet-command" in r["type"]]
            state = json.dumps(resources)
            assert "k-999999999999" not in state and "ciphertext" not in state  # the keys left the state

        phase["new"] = True
        preview = st.preview(color="never")
        if edit:
            assert set(preview.change_summary) == {"same"}, preview.change_summary
        result = st.up(color="never")
        ran = sorted(mark.read_text().splitlines())
        if edit:
            assert set(result.summary.resource_changes or {}) == {"same"}, result.summary.resource_changes
            assert ran == ["create node1", "create node2"]  # nothing ran
        else:  # the alias: the same resource, its inputs changed (secret_environment gone): updated in place
            assert ran == ["create node1", "create node2", "update node1", "update node2"], ran
        resources = st.export_stack().deployment["resources"]
        assert not [r["type"] for r in resources if "vllm-fleet-command" in r["type"]]
        assert migrate_commands(st, logged.append) == []  # nothing (left) to move
        assert set(st.preview(color="never").change_summary) == {"same"}

        st.destroy(color="never")  # the converge's delete, through the command package's provider
        deletes = sorted(line for line in mark.read_text().splitlines() if line.startswith("delete"))
        assert deletes == ["delete node1", "delete node2"]
    finally:
        st.workspace.remove_stack(st.name, force=True)
