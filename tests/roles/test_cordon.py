"""The vllm_service role's cordon entry point (tasks_from: cordon), run by ansible-playbook on this machine: a
cordon writes the reason where the sentinel reads it, a reason that is not one printable line is refused before
anything is written, and an uncordon removes the file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.roles.conftest import Run

PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: vllm_service
        tasks_from: cordon
"""


def _cordon(run: Run, tool: object, tmp_path: Path, **values: object) -> tuple[int, str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    extra = tmp_path / "extra.json"
    extra.write_text(
        json.dumps({"vllm_service_config_dir": str(tmp_path), "ansible_python_interpreter": sys.executable, **values})
    )
    result = run([tool("ansible-playbook"), "-i", "localhost,", str(play), "-e", f"@{extra}"])  # type: ignore[operator]
    return result.returncode, result.stdout + result.stderr


def test_a_cordon_is_written_with_its_reason_and_an_uncordon_removes_it(run: Run, tool: object, tmp_path: Path) -> None:
    rc, out = _cordon(
        run, tool, tmp_path, vllm_service_cordon_reason="GPU 0 Xid 79, ticket 4711", vllm_service_cordon_by="by ops"
    )
    assert rc == 0, out
    assert (tmp_path / "main.cordon").read_text() == "GPU 0 Xid 79, ticket 4711\nby ops\n"
    rc, out = _cordon(run, tool, tmp_path, vllm_service_cordon=False)
    assert rc == 0, out
    assert not (tmp_path / "main.cordon").exists()


@pytest.mark.parametrize(
    "reason",
    ["", "two\nlines", "\x1b]0;owned\x07", "x" * 201],
    ids=["none", "two-lines", "terminal-markup", "too-long"],
)
def test_a_reason_that_is_not_one_printable_line_is_refused(
    run: Run, tool: object, tmp_path: Path, reason: str
) -> None:
    rc, out = _cordon(run, tool, tmp_path, vllm_service_cordon_reason=reason)
    assert rc != 0 and "vllm_service_cordon_reason: say why the node is cordoned" in out, out
    assert not (tmp_path / "main.cordon").exists()
