"""Upgrading a 0.1 stack: its Python dynamic-provider commands are forgotten, never deleted (no `remove` runs)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

# A stand-in for a 0.1 converge resource: its delete leaves a mark, as the removal playbook would act.
LEGACY_PROVIDER = """
from pathlib import Path
from pulumi.dynamic import CreateResult, ResourceProvider


class LegacyCommand(ResourceProvider):
    def create(self, props):
        return CreateResult(id_="legacy", outs=props)

    def delete(self, _id, props):
        Path(props["mark"]).write_text("delete ran")
"""


def test_legacy_dynamic_commands_are_forgotten_not_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pulumi
    from pulumi import automation as auto

    from vllm_fleet.deploy.engine import LEGACY_COMMAND_TYPE, ensure_engine, forget_legacy_commands

    engine = ensure_engine()
    (tmp_path / "legacy_provider.py").write_text(LEGACY_PROVIDER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import legacy_provider  # type: ignore[import-not-found]

    class Legacy(pulumi.dynamic.Resource):  # 0.1's `_Command`: type pulumi-python:dynamic:Resource
        def __init__(self, name: str, opts: pulumi.ResourceOptions) -> None:
            super().__init__(legacy_provider.LegacyCommand(), name, {"mark": str(mark)}, opts)

    mark = tmp_path / "mark"
    phase = {"legacy": True}

    def program() -> None:
        parent = pulumi.ComponentResource("vllm-fleet:index:GpuNode", "node1")
        if phase["legacy"]:
            first = Legacy("node1-preflight", pulumi.ResourceOptions(parent=parent))
            Legacy("node1-converge", pulumi.ResourceOptions(parent=parent, depends_on=[first]))

    env = {**engine.env(), "PYTHONPATH": str(tmp_path)}
    st: Any = auto.create_or_select_stack(
        stack_name=f"migrate-{secrets.token_hex(3)}",
        project_name="vllm-fleet-migration-test",
        program=program,
        opts=auto.LocalWorkspaceOptions(
            work_dir=str(tmp_path),
            pulumi_home=str(engine.home),
            env_vars=env,
            secrets_provider="passphrase",
            pulumi_command=auto.PulumiCommand(root=str(engine.bin_dir.parent), skip_version_check=True),
        ),
    )
    try:
        st.up(color="never")
        logged: list[str] = []
        forgotten = forget_legacy_commands(st, logged.append)
        assert [u.rsplit("::", 1)[-1] for u in forgotten] == ["node1-converge", "node1-preflight"]
        assert all("its delete is not run" in line for line in logged)
        types = [r["type"] for r in st.export_stack().deployment["resources"]]
        assert LEGACY_COMMAND_TYPE not in types and "vllm-fleet:index:GpuNode" in types
        phase["legacy"] = False
        st.up(color="never")  # the program no longer has them: nothing left to delete
        assert not mark.exists(), "a legacy command's delete ran"
        assert forget_legacy_commands(st, logged.append) == []
    finally:
        st.destroy(color="never")
        st.workspace.remove_stack(st.name, force=True)
