"""The smoke line the main job prints for a node, run as printed against a real vLLM that requires an API key."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.vllm.conftest import lab_profile
from vllm_fleet.cli.up_report import smoke_line
from vllm_fleet.lab.local_vllm import serve

pytestmark = pytest.mark.vllm


def test_the_printed_smoke_line_passes_where_a_bare_one_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "lab-api-key"
    key.write_text("sk-lab-test-0123456789abcdef\n")
    key.chmod(0o600)
    with serve(lab_profile(), extra_argv=["--api-key", key.read_text().strip()], log=tmp_path / "serve.log") as url:
        line = smoke_line(url, "cpu-lab", key)
        printed = subprocess.run(shlex.split(line), capture_output=True, text=True, timeout=300, check=False)
        bare = subprocess.run(shlex.split(smoke_line(url, "cpu-lab", None)), capture_output=True, text=True,
                              timeout=300, check=False)  # fmt: skip
    assert printed.returncode == 0, printed.stdout + printed.stderr
    assert bare.returncode != 0 and "401" in bare.stdout + bare.stderr  # what a newcomer met before
