"""`vllm-fleet validate` on stack configs and inventories, and the playbooks' controller-side inventory check:
the same code (vllm_fleet.fleet.files), the same messages, no host touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_fleet.fleet.files import check_fleet_file, check_inventory

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
    profile["model"]["model"] = "Qwen/Qwen2.5-14B-Instruct"  # 28 GiB of weights on a 24 GiB card
    profile["speculative"] = None
    ppath = tmp_path / "too-big.yaml"
    ppath.write_text(yaml.safe_dump(profile))
    path = inventory(tmp_path, {"gpu-a": {"ansible_host": "10.0.0.5", "vllm_fleet_profile": str(ppath), **PINS}})
    problems = [str(p) for p in check_inventory([str(path)])]
    assert any(p.startswith("gpu-a.vllm_fleet_profile.cache.gpu_memory_utilization:") for p in problems), problems


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


# -- a fleet file named by the stack (vllm-fleet:fleetFile): fleets over the 128 KiB config variable -------------
def _stack_with_fleet_file(tmp_path: Path, fleet: Any, name: str = "fleets/site-a.yaml") -> Path:
    stack = yaml.safe_load((ROOT / "Pulumi.example.yaml").read_text())
    stack["config"].pop("vllm-fleet:fleet")
    stack["config"]["vllm-fleet:fleetFile"] = name
    path = tmp_path / "Pulumi.site.yaml"
    path.write_text(yaml.safe_dump(stack))
    if fleet is not None:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(fleet if isinstance(fleet, str) else yaml.safe_dump(fleet))
    return path


def _example_fleet() -> dict[str, Any]:
    fleet: dict[str, Any] = yaml.safe_load((ROOT / "Pulumi.example.yaml").read_text())["config"]["vllm-fleet:fleet"]
    return fleet


def test_a_fleet_file_validates_like_the_inline_fleet(tmp_path: Path) -> None:
    path = _stack_with_fleet_file(tmp_path, _example_fleet())
    proc = validate(path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_fleet_file_s_problems_name_the_file_and_the_field(tmp_path: Path) -> None:
    fleet = _example_fleet()
    fleet["hosts"][1]["address"] = "-oProxyCommand=id"
    fleet["hosts"][2]["overrides"] = {"cache": {"gpu_memory_utilization": 1.5}}
    fleet["role_vars"]["vllm_pip_index_url"] = "{{ lookup('pipe', 'id') }}"
    path = _stack_with_fleet_file(tmp_path, fleet)
    proc = validate(path)
    assert proc.returncode == 1
    out = proc.stdout
    assert f"{path}: fleets/site-a.yaml: hosts[1](gpu-4090-b).address: not an IP address or DNS name" in out, out
    assert f"{path}: fleets/site-a.yaml: hosts[2](gpu-l40-a).overrides.cache.gpu_memory_utilization:" in out, out
    assert f"{path}: fleets/site-a.yaml: role_vars.vllm_pip_index_url: is a Jinja template" in out, out


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("../outside.yaml", "must be a relative path inside the project"),
        ("/etc/fleet.yaml", "must be a relative path inside the project"),
        ("fleet.txt", "want a .yaml, .yml or .json file"),
        ("missing.yaml", "missing.yaml: (file): cannot read"),
        ("", "must be a file name"),
    ],
)
def test_a_bad_fleet_file_name_is_refused_naming_the_key(tmp_path: Path, name: str, words: str) -> None:
    path = _stack_with_fleet_file(tmp_path, None, name)
    proc = validate(path)
    assert proc.returncode == 1
    assert f"{path}: vllm-fleet:fleetFile: " in proc.stdout and words in proc.stdout, proc.stdout


def test_a_fleet_file_symlinked_outside_the_project_or_with_duplicate_keys_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(yaml.safe_dump(_example_fleet()))
    (project / "fleet.yaml").symlink_to(outside)
    proc = validate(_stack_with_fleet_file(project, None, "fleet.yaml"))
    assert "vllm-fleet:fleetFile: 'fleet.yaml' leads outside the project" in proc.stdout, proc.stdout
    (project / "fleet.yaml").unlink()
    proc = validate(_stack_with_fleet_file(project, "hosts: []\nhosts: []\n", "fleet.yaml"))
    assert "vllm-fleet:fleetFile: fleet.yaml: (yaml): not valid YAML at line 2" in proc.stdout, proc.stdout
    assert "duplicate key 'hosts'" in proc.stdout


def test_a_stack_with_both_an_inline_fleet_and_a_fleet_file_is_refused(tmp_path: Path) -> None:
    path = _stack_with_fleet_file(tmp_path, _example_fleet())
    stack = yaml.safe_load(path.read_text())
    stack["config"]["vllm-fleet:fleet"] = _example_fleet()
    path.write_text(yaml.safe_dump(stack))
    proc = validate(path)
    assert proc.returncode == 1
    assert "vllm-fleet:fleetFile: the stack sets vllm-fleet:fleet too" in proc.stdout, proc.stdout


def test_a_model_without_a_manifest_is_refused_and_an_unverified_one_is_named(tmp_path: Path) -> None:
    stack = yaml.safe_load((ROOT / "Pulumi.example.yaml").read_text())
    fleet = stack["config"]["vllm-fleet:fleet"]
    fleet.setdefault("role_vars", {})["vllm_models"] = [{"name": "llama", "url": "http://mirror.site/llama.tar"}]
    path = tmp_path / "Pulumi.team.yaml"
    path.write_text(yaml.safe_dump(stack))
    proc = validate(path)
    assert proc.returncode == 1
    assert f"{path}: role_vars.vllm_models[0].manifest: missing: every staged model is checked" in proc.stdout
    fleet["role_vars"]["vllm_models"][0]["unverified"] = True
    path.write_text(yaml.safe_dump(stack))
    proc = validate(path)
    note = f"{path}: role_vars.vllm_models[0]: warning: llama is staged unverified: no manifest checks its files"
    assert proc.returncode == 0 and note in proc.stderr, proc.stdout + proc.stderr
    strict = subprocess.run(
        [sys.executable, "-m", "vllm_fleet.cli", "validate", "--strict", str(path)], capture_output=True, text=True
    )
    assert strict.returncode == 1 and note in strict.stdout
