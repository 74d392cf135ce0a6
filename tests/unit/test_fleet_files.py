"""`vllm-fleet validate` on stack configs and inventories, and the playbooks' controller-side inventory check:
the same code (vllm_fleet.fleet_files), the same messages, no host touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from vllm_fleet.fleet_files import check_fleet_file, check_inventory

ROOT = Path(__file__).resolve().parents[2]
PINS = {"nvidia_driver_version": "580.95.05", "cuda_toolkit_version": "13.0.2", "nvidia_driver_gpu_architecture": "ada"}


def inventory(tmp_path: Path, hosts: dict[str, Any], group: str = "vllm_nodes") -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {group: {"hosts": hosts}}}}))
    return path


def validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_fleet.cli", "validate", *map(str, paths)], capture_output=True, text=True, cwd=ROOT
    )


def test_example_stack_validates() -> None:
    proc = validate(ROOT / "Pulumi.example.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stack_file_secrets_in_clear_and_unknown_keys(tmp_path: Path) -> None:
    stack = yaml.safe_load((ROOT / "Pulumi.example.yaml").read_text())
    stack["config"]["vllm-fleet:apiKey"] = "sk-live-abcdef0123456789"
    stack["config"]["vllm-fleet:knownHostFile"] = "/root/.ssh/known_hosts"
    path = tmp_path / "Pulumi.team.yaml"
    path.write_text(yaml.safe_dump(stack))
    proc = validate(path)
    assert proc.returncode == 1
    assert f"{path}: vllm-fleet:apiKey: a secret in clear text in the stack file" in proc.stdout
    assert f"{path}: vllm-fleet:knownHostFile: not read by the program" in proc.stdout
    assert "sk-live" not in proc.stdout + proc.stderr


def test_good_inventory_passes(tmp_path: Path) -> None:
    path = inventory(
        tmp_path, {"gpu-a": {"ansible_host": "10.0.0.5", "vllm_fleet_profile": "rtx4090-qwen2.5-7b-spec", **PINS}}
    )
    assert check_inventory([str(path)]) == []


def test_inventory_without_the_node_group_is_an_error(tmp_path: Path) -> None:
    path = inventory(tmp_path, {"gpu-a": {"ansible_host": "10.0.0.5"}}, group="gpus")
    problems = [str(p) for p in check_inventory([str(path)])]
    assert problems == [
        "(inventory): no host in 'vllm_nodes': the playbooks would do nothing; list the GPU hosts under a "
        "vllm_nodes group (or name the group or host with vllm_fleet_hosts)"
    ]


def test_inventory_profile_that_does_not_fit_fails(tmp_path: Path) -> None:
    profile = yaml.safe_load((ROOT / "vllm_fleet/catalog/profiles/rtx4090-qwen2.5-7b-spec.yaml").read_text())
    profile["model"] = "Qwen/Qwen2.5-14B-Instruct"  # 28 GiB of weights on a 24 GiB card
    profile["speculative"] = None
    ppath = tmp_path / "too-big.yaml"
    ppath.write_text(yaml.safe_dump(profile))
    path = inventory(tmp_path, {"gpu-a": {"ansible_host": "10.0.0.5", "vllm_fleet_profile": str(ppath), **PINS}})
    problems = [str(p) for p in check_inventory([str(path)])]
    assert any(p.startswith("gpu-a.vllm_fleet_profile.gpu_memory_utilization:") for p in problems), problems


def test_inventory_hostile_values(tmp_path: Path) -> None:
    path = inventory(
        tmp_path,
        {
            "gpu-a": {
                "ansible_host": "-oProxyCommand=id",
                "ansible_user": "root -oX",
                "vllm_fleet_profile": "{{ lookup('pipe','id') }}",
                "nvidia_driver_hold": "false",
                "vllm_pip_index_url": "{{ lookup('env','HOME') }}",
                **PINS,
            }
        },
    )
    problems = [str(p) for p in check_inventory([str(path)])]
    assert any(p.startswith("gpu-a.ansible_host: not an IP address or DNS name") for p in problems)
    assert any(p.startswith("gpu-a.ansible_user: not a POSIX user name") for p in problems)
    assert any(p.startswith("gpu-a.vllm_fleet_profile: is a Jinja template") for p in problems)
    assert any(p.startswith("gpu-a.vllm_pip_index_url: is a Jinja template") for p in problems)
    assert any(p.startswith("gpu-a.nvidia_driver_hold: must be a YAML boolean") for p in problems)


def test_the_validate_playbook_says_the_same(tmp_path: Path) -> None:
    """playbooks/validate.yml stops on the same problem lines, before any host (the check runs on localhost)."""
    path = inventory(tmp_path, {"gpu-a": {"ansible_host": "-oProxyCommand=id", "vllm_fleet_profile": "cpu-lab"}})
    expected = [str(p) for p in check_inventory([str(path)])]
    assert expected
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(path), str(ROOT / "playbooks/validate.yml"),
         "-e", f"vllm_fleet_python={sys.executable}"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    for line in expected:
        assert " ".join(line.split())[:60] in out, (line, proc.stdout[-2000:])
    assert "gpu-a" not in out.split("PLAY RECAP")[-1] or "unreachable=0" in out  # no connection was attempted
    assert check_fleet_file(path) is not None
