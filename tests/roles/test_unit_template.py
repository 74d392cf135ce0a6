"""templates/vllm.service.j2, rendered the way the Python side renders it (plain Jinja2, trim_blocks=True):
systemd must accept it without a single complaint, and its sandbox must score <= 2.5 in `systemd-analyze security`.
Also: Ansible (the role's lookup + copy) renders both shared templates to the same bytes as the Python side."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_fleet.profile_loader import builtin_profile_names, load_profile
from vllm_fleet.vllm.render import config_yaml, render, template_env

MAX_EXPOSURE = 2.5
Run = Callable[..., Any]
Tool = Callable[[str], str]

needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")


def _systemd_version() -> int:
    out = subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True, check=False).stdout
    m = re.match(r"systemd (\d+)", out)
    return int(m.group(1)) if m else 0


def render_unit(**variables: Any) -> str:
    return template_env().get_template("vllm.service.j2").render(**variables)


@pytest.fixture
def fake_install(tmp_path: Path) -> dict[str, str]:
    """Executables where the unit expects vLLM and the API-key wrapper (verify checks that they exist)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for exe in (venv / "bin" / "vllm", tmp_path / "vllm-api-key-exec"):
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
    return {"vllm_venv": str(venv), "vllm_api_key_wrapper": str(tmp_path / "vllm-api-key-exec")}


VARIANTS: dict[str, dict[str, Any]] = {
    "minimal": {"vllm_instance": "main"},
    "api-key": {
        "vllm_instance": "main",
        "vllm_profile_name": "cpu-lab",
        "vllm_version": "0.32.0",
        "vllm_api_key_file": "/etc/vllm/main.api-key",
    },
    "everything": {
        "vllm_instance": "h200-a",
        "vllm_profile_name": "h200-llama3.1-70b-fp8",
        "vllm_version": "0.32.0",
        "vllm_user": "svc-vllm",
        "vllm_group": "svc-vllm",
        "vllm_api_key_file": "/etc/vllm/h200-a.api-key",
        "vllm_environment": {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "VLLM_LOGGING_LEVEL": "INFO"},
        "vllm_read_write_paths": ["/srv/vllm-scratch"],
        "vllm_device_allow": ["char-nvidia-frontend rw", "char-nvidia-uvm rw", "/dev/nvidia-caps rw"],
        "vllm_timeout_stop_sec": 300,
        "vllm_start_limit_burst": 5,
    },
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_unit_renders_with_plain_jinja(variant: str, fake_install: dict[str, str]) -> None:
    text = render_unit(**VARIANTS[variant], **fake_install)
    assert text.endswith("\n") and "\n\n\n" not in text
    assert "ProtectSystem=strict" in text and "NoNewPrivileges=yes" in text and "PrivateTmp=yes" in text
    assert "DevicePolicy=closed" in text and "UnsetEnvironment=PROMETHEUS_MULTIPROC_DIR" in text
    assert "Environment=HF_HUB_OFFLINE=1" in text
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert exec_start.endswith(
        f"{fake_install['vllm_venv']}/bin/vllm serve --config /etc/vllm/{VARIANTS[variant]['vllm_instance']}.yaml"
    )
    assert "api-key" not in exec_start.replace("vllm-api-key-exec", "")  # the key is never on the command line
    if VARIANTS[variant].get("vllm_api_key_file"):
        assert f"LoadCredential=vllm-api-key:{VARIANTS[variant]['vllm_api_key_file']}" in text


@needs_systemd_analyze
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_systemd_analyze_verify_says_nothing(variant: str, fake_install: dict[str, str], tmp_path: Path) -> None:
    unit = tmp_path / f"vllm-{VARIANTS[variant]['vllm_instance']}.service"
    unit.write_text(render_unit(**VARIANTS[variant], **fake_install))
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, check=False
    )
    # verify exits 0 on unknown keys and bad values: any output at all is a finding.
    assert proc.returncode == 0 and proc.stderr.strip() == "" and proc.stdout.strip() == "", proc.stdout + proc.stderr


@needs_systemd_analyze
@pytest.mark.parametrize("variant", ["api-key", "everything"])
def test_systemd_analyze_security_exposure(variant: str, fake_install: dict[str, str], tmp_path: Path) -> None:
    if _systemd_version() < 252:
        pytest.skip("systemd-analyze security --offline needs systemd >= 252")
    unit = tmp_path / f"vllm-{VARIANTS[variant]['vllm_instance']}.service"
    unit.write_text(render_unit(**VARIANTS[variant], **fake_install))
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    print(proc.stdout)  # the table, for the record (pytest -s / -rA)
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE, proc.stdout


def test_ansible_renders_the_same_bytes(run: Run, tool: Tool, tmp_path: Path) -> None:
    """The role renders the shared templates with lookup('template', template_vars=...) + copy: same bytes."""
    root = Path(__file__).resolve().parents[2]
    cases = []
    for name in builtin_profile_names():
        profile = load_profile(name)
        rendered = render(profile)
        cases.append(
            {
                "name": name,
                "config_vars": {
                    "vllm_config": rendered.config,
                    "vllm_profile_name": profile.name,
                    "vllm_version": rendered.vllm_version,
                },
                "expected": config_yaml(profile, rendered),
            }
        )
    unit_vars = {**VARIANTS["everything"], "vllm_venv": "/opt/vllm"}
    (tmp_path / "cases.json").write_text(json.dumps({"cases": cases, "unit_vars": unit_vars}))
    playbook = tmp_path / "render.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Render the shared templates as the vllm_service role does",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {
                        "data": "{{ lookup('ansible.builtin.file', '"
                        + str(tmp_path / "cases.json")
                        + "') | from_json }}"
                    },
                    "tasks": [
                        {
                            "name": "Config",
                            "ansible.builtin.copy": {
                                "content": "{{ lookup('ansible.builtin.template', '"
                                + str(root / "templates")
                                + "/vllm-config.yaml.j2', template_vars=item.config_vars) }}",
                                "dest": str(tmp_path) + "/{{ item.name }}.yaml",
                                "mode": "0644",
                            },
                            "loop": "{{ data.cases }}",
                            "loop_control": {"label": "{{ item.name }}"},
                        },
                        {
                            "name": "Unit",
                            "ansible.builtin.copy": {
                                "content": "{{ lookup('ansible.builtin.template', '"
                                + str(root / "templates")
                                + "/vllm.service.j2', template_vars=data.unit_vars) }}",
                                "dest": str(tmp_path / "unit.service"),
                                "mode": "0644",
                            },
                        },
                    ],
                }
            ]
        )
    )
    proc = run(
        [
            tool("ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(playbook),
        ]
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for case in cases:
        assert (tmp_path / f"{case['name']}.yaml").read_text() == case["expected"], case["name"]
    assert (tmp_path / "unit.service").read_text() == render_unit(**unit_vars)
