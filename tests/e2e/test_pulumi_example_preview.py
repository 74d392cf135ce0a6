"""`pulumi preview` of the example sovereign fleet with the real engine, reaching no host."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_fleet.paths import project_root

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

    from vllm_fleet.deploy import ensure_engine

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
        # stack + 3 GpuNodes + (preflight, converge, smoke) per host
        assert creates == 1 + 3 + 3 * 3, preview.change_summary
        assert "gpu-l40-a" in preview.stdout
    finally:
        st.workspace.remove_stack("example", force=True)
