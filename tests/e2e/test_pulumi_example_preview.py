"""`pulumi preview` of the example sovereign fleet with the real engine, reaching no host."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_fleet.project.paths import project_root

pytestmark = pytest.mark.e2e


def project_copy(tmp: Path) -> Path:
    """The program in a scratch dir (so stack init's encryption salt never touches the checkout)."""
    root = project_root()
    spec = yaml.safe_load((root / "Pulumi.yaml").read_text())
    spec["runtime"]["options"]["virtualenv"] = str(root / ".venv")
    (tmp / "Pulumi.yaml").write_text(yaml.safe_dump(spec))
    shutil.copy(root / "__main__.py", tmp / "__main__.py")
    shutil.copy(root / "Pulumi.example.yaml", tmp / "Pulumi.example.yaml")
    return tmp


def test_example_fleet_previews(tmp_path: Path) -> None:
    from pulumi import automation as auto

    from vllm_fleet.deploy.engine import ensure_engine

    engine = ensure_engine()
    work = project_copy(tmp_path)
    st: Any = auto.create_or_select_stack(
        stack_name="example",
        work_dir=str(work),
        opts=auto.LocalWorkspaceOptions(
            pulumi_home=str(engine.home),
            env_vars=engine.env(),
            secrets_provider="passphrase",
            pulumi_command=auto.PulumiCommand(root=str(engine.bin_dir.parent), skip_version_check=True),
        ),
    )
    try:
        preview = st.preview(color="never")
        creates = preview.change_summary.get(auto.OpType.CREATE, 0)
        # stack + 3 GpuNodes + (preflight, converge, smoke) per host (no apiKey here: no api-key-version; the
        # default `command` provider is not counted)
        assert creates == 1 + 3 + 3 * 3, preview.change_summary
        assert "gpu-l40-a" in preview.stdout
    finally:
        st.workspace.remove_stack("example", force=True)


def test_preview_refuses_what_validate_refuses_with_the_same_words(tmp_path: Path) -> None:
    """Hostile values in a stack file: `pulumi preview` fails before any resource is registered, naming each field
    exactly as `vllm-fleet validate Pulumi.<stack>.yaml` does (one code path), and no host is reached."""
    import json
    import os
    import subprocess
    import sys

    from vllm_fleet.deploy.engine import ensure_engine

    engine = ensure_engine()
    work = project_copy(tmp_path)
    stack = yaml.safe_load((work / "Pulumi.example.yaml").read_text())
    fleet = stack["config"]["vllm-fleet:fleet"]
    fleet["hosts"][0]["overrides"]["model"] = {"served_model_name": "{{ lookup('pipe','id -un') }}-X"}
    fleet["hosts"][1]["address"] = "-oProxyCommand=touch /tmp/pwned"
    fleet["hosts"][2]["ssh_user"] = "root -oProxyCommand=x"
    fleet["role_vars"]["vllm_service_environment"] = {"NOTE": "a\nExecStartPre=+/bin/sh -c id"}
    fleet["role_vars"]["nvidia_driver_verison"] = "580.95.05"
    stack_file = work / "Pulumi.hostile.yaml"
    stack_file.write_text(yaml.safe_dump(stack))

    validate = subprocess.run(
        [sys.executable, "-m", "vllm_fleet.cli", "validate", str(stack_file)], capture_output=True, text=True
    )
    assert validate.returncode == 1
    lines = [line.removeprefix(f"{stack_file}: ") for line in validate.stdout.splitlines()]
    assert len(lines) == 5, lines

    env = {**os.environ, **engine.env()}
    run = {"cwd": work, "env": env, "capture_output": True, "text": True, "timeout": 600}
    subprocess.run(["pulumi", "stack", "init", "hostile", "--secrets-provider", "passphrase"], check=True, **run)
    try:
        preview = subprocess.run(["pulumi", "preview", "--stack", "hostile", "--json"], **run)
        assert preview.returncode != 0
        # json: the program's error, then no resource step beyond the stack itself
        out = preview.stdout + preview.stderr
        for line in lines:
            assert line.replace("\n", "\\n") in out or json.dumps(line)[1:-1] in out, (line, out[-3000:])
        assert "pwned" not in "".join(p.name for p in Path("/tmp").iterdir())
    finally:
        subprocess.run(["pulumi", "stack", "rm", "hostile", "--force", "--yes"], **run)
