"""Static checks of the roles and playbooks: ansible-lint (production profile), syntax checks, documented APIs."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
PLAYBOOKS = ROOT / "playbooks"
NODE_ROLES = ("nvidia_repo", "nvidia_driver", "cuda_toolkit", "vllm", "vllm_service")
Run = Callable[..., Any]
Tool = Callable[[str], str]

PLAYBOOK_FILES = sorted(p.name for p in PLAYBOOKS.glob("*.yml"))


def test_there_are_the_verb_playbooks() -> None:
    assert {"site.yml", "rollout.yml", "validate.yml", "remove.yml"} <= set(PLAYBOOK_FILES)


def test_ansible_lint_production_profile(run: Run, tool: Tool) -> None:
    proc = run([tool("ansible-lint"), "--nocolor", "-f", "pep8", "--profile", "production"], timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "Profile 'production' was required, and it passed" in proc.stdout + proc.stderr


@pytest.mark.parametrize("playbook", PLAYBOOK_FILES)
def test_syntax_check(run: Run, tool: Tool, playbook: str) -> None:
    proc = run([tool("ansible-playbook"), "--syntax-check", "-i", "localhost,", f"playbooks/{playbook}"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("role", NODE_ROLES)
def test_role_layout(role: str) -> None:
    base = ROLES / role
    for rel in ("defaults/main.yml", "meta/main.yml", "meta/argument_specs.yml", "handlers/main.yml", "tasks/main.yml"):
        assert (base / rel).is_file(), f"{role}: missing {rel}"
    # per-OS variables: roles/os_vars loads them (tests/roles/test_os_vars.py)
    assert (base / "tasks" / "os-vars.yml").is_file(), f"{role}: missing tasks/os-vars.yml"


def _defaults_with_comments(role: str) -> tuple[dict[str, object], list[str], list[str]]:
    """(defaults, variables without a comment right above them, variables documented as commented-out lines)."""
    path = ROLES / role / "defaults" / "main.yml"
    data = yaml.safe_load(path.read_text()) or {}
    lines = path.read_text().splitlines()
    undocumented = []
    for i, line in enumerate(lines):
        m = re.match(r"^([a-z_][a-z0-9_]*):", line)
        if m and not (i > 0 and lines[i - 1].startswith("#")):
            undocumented.append(m.group(1))
    commented = re.findall(r"^# ([a-z_][a-z0-9_]*):\s*$", path.read_text(), flags=re.M)
    return data, undocumented, commented


@pytest.mark.parametrize("role", [*NODE_ROLES, "preflight"])
def test_defaults_are_the_documented_api(role: str) -> None:
    defaults, undocumented, commented = _defaults_with_comments(role)
    assert undocumented == [], f"{role}: variables without a comment above them: {undocumented}"
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options = specs["main"]["options"]
    assert set(defaults) <= set(options), (
        f"{role}: defaults missing from argument_specs: {set(defaults) - set(options)}"
    )
    for name, spec in options.items():
        assert spec.get("description"), f"{role}: {name} has no description in argument_specs"
        if spec.get("required"):
            assert name in commented, f"{role}: required {name} must be documented in defaults as '# {name}:'"
        else:
            assert name in defaults, f"{role}: {name} is in argument_specs but has no default"
    for name in defaults:
        assert name.startswith(role + "_"), f"{role}: {name} lacks the role prefix"
