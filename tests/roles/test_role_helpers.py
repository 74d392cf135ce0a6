"""The small programs the roles install on a host: the vllm role's pip helper (requirement checks, the metadata
shim) and its hash-locked install from a mirror's lock, the vllm_service role's API-key wrapper and its config
checker (the installed vLLM's own parser)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_fleet.mirror.wheelhouse import HashCache, write_wheel_tree
from vllm_fleet.profiles.loader import load_profile
from vllm_fleet.profiles.render import config_yaml, render
from vllm_fleet.vllm.check import find_vllm_python

ROOT = Path(__file__).resolve().parents[2]
Run = Callable[..., Any]
Tool = Callable[[str], str]
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


def _wheel(directory: Path, name: str, version: str, body: str = "") -> Path:
    """A small but complete wheel (module, METADATA, WHEEL, RECORD with hashes): what pip really installs."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VERSION = {version!r}\n{body}",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: vllm-fleet-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def record(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    lines = [f"{f},{record(c.encode())},{len(c.encode())}" for f, c in files.items()] + [f"{info}/RECORD,,"]
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for f, c in {**files, f"{info}/RECORD": "\n".join(lines) + "\n"}.items():
            zf.writestr(f, c)
    return path


def _pip_install_lock(venv: Path, index: Path, lock: Path) -> subprocess.CompletedProcess[str]:
    """The vllm role's lock step (roles/vllm/vars/main.yml _vllm_pip_steps), against an index on disk."""
    argv = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
            "--isolated", "--index-url", index.as_uri() + "/",
            "--no-deps", "--require-hashes", "-r", str(lock)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def test_a_mirror_lock_installs_in_one_step_and_a_changed_wheel_is_refused(venv: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "alpha_lib", "1.0")
    _wheel(wheels, "beta", "2.5")
    mirror = tmp_path / "mirror"
    write_wheel_tree(mirror, {"closure": wheels}, HashCache(tmp_path / "hashes.json"))
    lock = mirror / "locks" / "closure.txt"
    pins = [line.split(" ")[0] for line in lock.read_text().splitlines() if not line.startswith("#")]
    assert pins == ["alpha-lib==1.0", "beta==2.5"]
    before = helper(venv, "check", "--requirements-file", str(lock))
    assert before["satisfied"] is False and before["missing"] == pins

    # A wheel changed on the mirror after the lock was written (same name, other bytes): pip refuses it.
    _wheel(wheels, "beta", "2.5", body="import os\n")
    refused = _pip_install_lock(venv, mirror / "simple", lock)
    assert refused.returncode != 0 and "DO NOT MATCH THE HASHES" in refused.stderr, refused.stderr[-2000:]
    assert helper(venv, "check", "--requirements-file", str(lock))["satisfied"] is False  # nothing installed

    write_wheel_tree(mirror, {"closure": wheels}, HashCache(tmp_path / "hashes.json"))  # the mirror re-locked
    installed = _pip_install_lock(venv, mirror / "simple", lock)
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert helper(venv, "check", "--requirements-file", str(lock)) == {
        "satisfied": True,
        "missing": [],
        "requirements": pins,
    }
    missing = helper(venv, "check", "--requirements-file", str(tmp_path / "not-fetched.txt"))
    assert missing["satisfied"] is False  # check mode: the lock is not fetched yet


def _install_play(
    run: Run, tool: Tool, tmp_path: Path, wheels: Path, background: bool, after_lock: Callable[[], object] = list
) -> tuple[int, str]:
    """The vllm role's install (tasks_from install.yml), then its `wait` entry point, run by Ansible on this machine
    against a mirror on disk (``after_lock`` runs once the mirror wrote its lock): what playbooks/site.yml does
    around the NVIDIA driver and toolkit."""
    mirror = tmp_path / "mirror"
    write_wheel_tree(mirror, {"closure": wheels}, HashCache(tmp_path / "hashes.json"))
    after_lock()
    lock = mirror / "locks" / "closure.txt"
    play = tmp_path / "install.yml"
    job = "{{ _vllm_pip_job.ansible_job_id | default('none') }}"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {"name": "Start", "ansible.builtin.set_fact": {"_vllm_install_started": True}},
                        {
                            "name": "Install",
                            "ansible.builtin.include_role": {"name": "vllm", "tasks_from": "install.yml"},
                            "vars": {"vllm_install_background": background},
                        },
                        {"name": "Job", "ansible.builtin.debug": {"msg": f"pip job: {job}."}},
                        {"name": "Wait", "ansible.builtin.include_role": {"name": "vllm", "tasks_from": "wait"}},
                    ],
                }
            ]
        )
    )
    extra = tmp_path / "extra.yml"
    variables = {
        "ansible_python_interpreter": sys.executable,
        "vllm_python": sys.executable,
        "vllm_venv": str(tmp_path / "venv"),
        "vllm_version": "0.32.0",
        "vllm_package": "vllm",
        "vllm_pip_index_url": (mirror / "simple").as_uri() + "/",
        "vllm_pip_extra_args": ["--isolated"],
        "vllm_pip_lock_url": lock.as_uri(),
        "vllm_pip_lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest(),
    }
    extra.write_text(yaml.safe_dump(variables))
    proc = run([tool("ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", f"@{extra}", str(play)])
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


@pytest.mark.skipif(os.geteuid() != 0, reason="the role writes its files as root (CI runs as root)")
@pytest.mark.parametrize("background", [True, False])
def test_the_install_in_the_background_is_waited_for_and_finished(
    run: Run, tool: Tool, tmp_path: Path, background: bool
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "vllm", "0.32.0")
    _wheel(wheels, "beta", "2.5")
    rc, out = _install_play(run, tool, tmp_path, wheels, background)
    assert rc == 0, out[-3000:]
    started = re.search(r"pip job: ([^.]+)\.", out)
    assert started is not None, out[-3000:]
    assert (started[1] != "none") is background  # a job id: pip went on in the background
    assert vllm_version_in(tmp_path / "venv") == "0.32.0"  # the wait's finish checked it too
    record = (tmp_path / "venv" / ".vllm-fleet" / "installed").read_text()
    assert (
        "version=0.32.0" in record
        and "lock=" + hashlib.sha256((tmp_path / "mirror" / "locks" / "closure.txt").read_bytes()).hexdigest() in record
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the role writes its files as root (CI runs as root)")
def test_a_failed_background_install_fails_the_wait_with_pips_error(run: Run, tool: Tool, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "vllm", "0.32.0")
    _wheel(wheels, "beta", "2.5")
    rc, out = _install_play(run, tool, tmp_path, wheels, background=True)
    assert rc == 0, out[-3000:]
    # A new lock (beta 2.6), then the mirror's wheel changed under it: pip refuses it, in the background.
    (wheels / "beta-2.5-py3-none-any.whl").unlink()
    _wheel(wheels, "beta", "2.6")
    rc, out = _install_play(
        run, tool, tmp_path, wheels, background=True, after_lock=lambda: _wheel(wheels, "beta", "2.6", body="x = 1\n")
    )
    assert rc != 0
    assert "Wait for the pip install running in the background" in out, out[-3000:]
    assert "DO NOT MATCH THE HASHES" in out, out[-3000:]
    assert helper(tmp_path / "venv", "check", "beta==2.5")["satisfied"] is True  # the old install is as it was


def test_no_lock_for_a_directory_that_is_not_one_closure(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    _wheel(one, "alpha", "1.0")
    _wheel(two, "alpha", "1.0")
    _wheel(two, "alpha", "1.1")  # two versions of one project: an index, not a lock
    write_wheel_tree(tmp_path / "mirror", {"one": one, "two": two}, HashCache(tmp_path / "hashes.json"))
    assert sorted(p.name for p in (tmp_path / "mirror" / "locks").iterdir()) == ["one.txt"]
    assert "alpha==1.0 --hash=sha256:" in (tmp_path / "mirror" / "locks" / "one.txt").read_text()


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
