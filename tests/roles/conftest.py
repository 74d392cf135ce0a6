"""Fixtures for the Ansible side: paths, and a runner for ansible-playbook / ansible-lint from the project venv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    """A console script of the interpreter running the tests (the project venv), else from PATH."""
    here = Path(sys.executable).parent / name
    if here.is_file():
        return str(here)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: install the project's dev dependencies (pip install -e '.[dev]')")
    return found


def ansible_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_DEPRECATION_WARNINGS": "0",
            "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            "PY_COLORS": "0",
        }
    )
    env.update(extra)
    return env


Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def tool() -> Callable[[str], str]:
    """Path of a console script (ansible-playbook, ansible-lint) of the project venv."""
    return _tool


@pytest.fixture
def run() -> Run:
    """Run a command from the repository root with Ansible's environment; never raises on a non-zero exit."""

    def _run(argv: Sequence[str], timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), cwd=ROOT, env=ansible_env(**env), capture_output=True, text=True, timeout=timeout, check=False
        )

    return _run
