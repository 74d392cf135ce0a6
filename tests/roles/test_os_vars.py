"""The one OS-variables loader (roles/os_vars): every node role uses it, and per-OS files exist only where values
differ. The loader itself runs against this machine with ansible-playbook (local connection, check mode)."""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
NODE_ROLES = ("nvidia_repo", "nvidia_driver", "cuda_toolkit", "vllm", "vllm_service")
SUPPORTED: list[str] = yaml.safe_load((ROLES / "os_vars" / "defaults" / "main.yml").read_text())["os_vars_supported"]
OS_FAMILY = {"Debian": "Debian", "Ubuntu": "Debian"}
Run = Callable[..., Any]
Tool = Callable[[str], str]


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text()) if path.is_file() else None
    return data or {}


def os_vars_file(role: str, platform_name: str) -> Path | None:
    """The file roles/os_vars picks for a platform: Ansible's first_found over the same candidate list."""
    distribution, version = platform_name.split("-", 1)
    candidates = [f"{distribution}-{version}", f"{distribution}-{version.split('.')[0]}", distribution]
    candidates.append(OS_FAMILY[distribution])
    found = [ROLES / role / "vars" / f"{c}.yml" for c in candidates if (ROLES / role / "vars" / f"{c}.yml").is_file()]
    return found[0] if found else None


@pytest.mark.parametrize("role", NODE_ROLES)
def test_every_node_role_loads_its_os_vars_through_the_one_loader(role: str) -> None:
    tasks = yaml.safe_load((ROLES / role / "tasks" / "os-vars.yml").read_text())
    assert tasks == [
        {
            "name": "Load the OS variables (one loader for every role, roles/os_vars)",
            "ansible.builtin.import_role": {"name": "os_vars"},
            "vars": {"os_vars_role": role},
        }
    ]
    others = [p for p in ROLES.glob("*/tasks/*.yml") if "first_found" in p.read_text() and p.parts[-3] != "os_vars"]
    assert others == [], f"a second OS-vars loader: {others}"


@pytest.mark.parametrize("role", NODE_ROLES)
def test_every_supported_platform_gets_every_os_variable(role: str) -> None:
    common = set(load(ROLES / role / "vars" / "main.yml"))
    per_platform = {}
    for name in SUPPORTED:
        chosen = os_vars_file(role, name)
        per_platform[name] = common | set(load(chosen) if chosen else {})
    assert len({frozenset(v) for v in per_platform.values()}) == 1, per_platform
    assert any(v.startswith(f"_{role}_os_") for v in per_platform[SUPPORTED[0]]), f"{role}: no OS variables"


@pytest.mark.parametrize("role", NODE_ROLES)
def test_a_per_os_file_exists_only_where_values_differ(role: str) -> None:
    files = sorted(p for p in (ROLES / role / "vars").glob("*.yml") if p.name != "main.yml")
    contents = [load(p) for p in files]
    for i, a in enumerate(contents):
        for j in range(i + 1, len(contents)):
            assert a != contents[j], f"{files[i].name} and {files[j].name} are copies: keep one (or vars/main.yml)"
    used = {os_vars_file(role, name) for name in SUPPORTED}
    assert set(files) <= used, f"{role}: vars files no supported platform loads: {set(files) - used}"


def play(tmp_path: Path, role: str, shown: str) -> Path:
    book = tmp_path / "play.yml"
    book.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {"ansible.builtin.import_role": {"name": role, "tasks_from": "os-vars.yml"}},
                        {"ansible.builtin.debug": {"msg": f"LOADED={{{{ {shown} }}}}"}},
                    ],
                }
            ]
        )
    )
    return book


def ansible_playbook(run: Run, tool: Tool, book: Path, **extra: Any) -> Any:
    argv = [tool("ansible-playbook"), "-i", "localhost,", "-c", "local", "--check", str(book)]
    argv += [
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        json.dumps({"os_vars_supported": SUPPORTED, **extra}),
    ]
    return run(argv, timeout=300, ANSIBLE_ROLES_PATH=str(ROLES))


def test_the_loader_refuses_an_unsupported_os_before_loading(run: Run, tool: Tool, tmp_path: Path) -> None:
    proc = ansible_playbook(run, tool, play(tmp_path, "cuda_toolkit", "1"), os_vars_supported=["Plan9-4"])
    assert proc.returncode != 0
    assert "cuda_toolkit supports Plan9-4; this host runs" in proc.stdout, proc.stdout[-3000:]
    assert "LOADED=" not in proc.stdout


def test_the_loader_loads_this_hosts_per_os_file(run: Run, tool: Tool, tmp_path: Path) -> None:
    release = platform.freedesktop_os_release() if hasattr(platform, "freedesktop_os_release") else {}
    name = f"{release.get('NAME', '').split()[0] if release.get('NAME') else '?'}-{release.get('VERSION_ID', '?')}"
    if name not in SUPPORTED:
        pytest.skip(f"this machine runs {name}, not one of the supported platforms {SUPPORTED}")
    chosen = os_vars_file("nvidia_repo", name)
    assert chosen is not None
    expected = load(chosen)["_nvidia_repo_os_distro"]
    proc = ansible_playbook(run, tool, play(tmp_path, "nvidia_repo", "_nvidia_repo_os_distro"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"LOADED={expected}" in proc.stdout


def test_a_role_with_no_per_os_file_loads_without_one(run: Run, tool: Tool, tmp_path: Path) -> None:
    """cuda_toolkit keeps its values in vars/main.yml: first_found finds nothing there, and that is no error (a
    lab converge once failed on exactly this)."""
    assert sorted(p.name for p in (ROLES / "cuda_toolkit" / "vars").glob("*.yml")) == ["main.yml"]
    proc = ansible_playbook(run, tool, play(tmp_path, "cuda_toolkit", "'no per-OS file, no error'"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "LOADED=no per-OS file, no error" in proc.stdout
