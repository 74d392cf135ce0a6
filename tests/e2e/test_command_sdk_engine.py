"""The pulumi_command SDK against the real engine, offline: the SDK asks for the `command` plugin at its own version
and the engine runs ours (tools/build_pulumi_engine.sh installs it as `resource-command-v<version>`). Local
commands only: create runs once, an input change updates in place, a `triggers` change replaces, destroy deletes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.inline_stack import inline_stack

pytestmark = pytest.mark.e2e


def test_pulumi_command_sdk_runs_on_our_provider(tmp_path: Path) -> None:
    import pulumi
    import pulumi_command

    from vllm_fleet.deploy.engine import ensure_engine

    engine = ensure_engine()
    sdk_version = json.loads((Path(pulumi_command.__file__).parent / "pulumi-plugin.json").read_text())["version"]
    plugin = engine.home / "plugins" / f"resource-command-v{sdk_version}"
    assert (plugin / "pulumi-resource-command").is_file() and (plugin / ".vllm-fleet").is_file()
    log = tmp_path / "log"
    inputs = {"v": "1", "trigger": "t1"}

    def program() -> None:
        cmd = pulumi_command.local.Command(
            "node1-converge",
            create=f'echo "create $V" >> {log}; echo out-$V',
            update=f'echo "update $V prev=$PULUMI_COMMAND_STDOUT" >> {log}; echo out-$V',
            delete=f'echo "delete $V" >> {log}',
            environment={"V": inputs["v"]},
            triggers=[inputs["trigger"]],
        )
        pulumi.export("stdout", cmd.stdout)

    st = inline_stack(engine, "vllm-fleet-command-sdk-test", program, tmp_path)

    def ran() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    try:
        assert st.up(color="never").outputs["stdout"].value == "out-1"
        assert ran() == ["create 1"]
        resources = {r["type"]: r for r in st.export_stack().deployment["resources"]}
        assert "command:local:Command" in resources and "pulumi:providers:command" in resources
        assert resources["pulumi:providers:command"]["inputs"].get("version") == sdk_version

        st.up(color="never")  # nothing changed: nothing runs
        assert ran() == ["create 1"]

        inputs["v"] = "2"  # an input: update in place, with the last output
        assert st.up(color="never").outputs["stdout"].value == "out-2"
        assert ran() == ["create 1", "update 2 prev=out-1"]

        inputs["trigger"] = "t2"  # a trigger: replaced (the new one created, then the old one deleted)
        st.up(color="never")
        assert ran()[2:] == ["create 2", "delete 2"]

        st.destroy(color="never")
        assert ran()[-1] == "delete 2"
    finally:
        st.workspace.remove_stack(st.name, force=True)
