"""The nvidia_driver role's Secure Boot step (tasks/secure-boot.yml) run by Ansible on this machine, with the EFI
directory and mokutil pointed at facts given as data: a SecureBoot EFI variable written here, and a test double
for mokutil (the real one needs EFI firmware, which a CI machine does not have). The decision itself is
vllm_fleet.gpu_host.secure_boot (tests/unit/test_gpu_host.py)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

Run = Callable[..., Any]
Tool = Callable[[str], str]
EFIVAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _efi(tmp_path: Path, secure_boot: int | None) -> Path:
    efi = tmp_path / "efi"
    (efi / "efivars").mkdir(parents=True)
    if secure_boot is not None:  # 4 attribute bytes (NV+BS+RT), then the value
        (efi / "efivars" / EFIVAR).write_bytes(bytes([6, 0, 0, 0, secure_boot]))
    return efi


def _fake_mokutil(tmp_path: Path, sb_state: str, test_key: str) -> Path:
    """Test double: answers --sb-state and --test-key the way mokutil words them."""
    exe = tmp_path / "fake-mokutil"
    exe.write_text(
        f'#!/bin/sh\ncase "$1" in --sb-state) echo "{sb_state}";; --test-key) echo "$2 {test_key}";; *) exit 1;; esac\n'
    )
    exe.chmod(0o755)
    return exe


def _play(run: Run, tool: Tool, tmp_path: Path, check: bool = False, **variables: Any) -> tuple[int, str]:
    play = tmp_path / "secure-boot.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Secure Boot step",
                            "ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": "secure-boot.yml"},
                        }
                    ],
                }
            ]
        )
    )
    extra = tmp_path / "extra.yml"
    extra.write_text(yaml.safe_dump({"ansible_python_interpreter": sys.executable, **variables}))
    argv = [tool("ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", f"@{extra}", str(play)]
    proc = run([*argv, "--check"] if check else argv)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def test_secure_boot_on_and_no_key_stops_before_installing(run: Run, tool: Tool, tmp_path: Path) -> None:
    rc, out = _play(
        run, tool, tmp_path, _nvidia_driver_efi_dir=str(_efi(tmp_path, 1)), _nvidia_driver_mokutil="/nonexistent"
    )
    assert rc != 0
    assert "Secure Boot is on: the kernel would refuse the unsigned DKMS build" in out
    assert "Nothing was installed" in out and "mokutil --import /var/lib/dkms/mok.pub" in out


@pytest.mark.parametrize(("secure_boot", "said"), [(0, "Secure Boot is off"), (None, "no EFI firmware")])
def test_secure_boot_off_goes_on(run: Run, tool: Tool, tmp_path: Path, secure_boot: int | None, said: str) -> None:
    efi = _efi(tmp_path, secure_boot) if secure_boot is not None else tmp_path / "no-efi"
    rc, out = _play(run, tool, tmp_path, _nvidia_driver_efi_dir=str(efi), _nvidia_driver_mokutil="/nonexistent")
    assert rc == 0, out[-3000:]
    assert said in out


def _signing(tmp_path: Path, efivar: int, test_key: str) -> tuple[Path, dict[str, Any]]:
    """A MOK key and certificate on 'the host', mokutil's double saying Secure Boot is on and ``test_key``."""
    key, cert = tmp_path / "mok.key", tmp_path / "mok.der"
    key.write_text("key")
    cert.write_text("cert")
    return cert, {
        "_nvidia_driver_efi_dir": str(_efi(tmp_path, efivar)),
        "_nvidia_driver_mokutil": str(_fake_mokutil(tmp_path, "SecureBoot enabled", test_key)),
        "nvidia_driver_secure_boot_sign": True,
        "nvidia_driver_mok_key": str(key),
        "nvidia_driver_mok_cert": str(cert),
    }


def test_an_enrolled_mok_is_written_for_dkms(run: Run, tool: Tool, tmp_path: Path) -> None:
    cert, variables = _signing(tmp_path, 1, "is already enrolled")
    # --check: the step writes /etc/dkms/framework.conf.d, only say so here
    rc, out = _play(run, tool, tmp_path, check=True, **variables)
    assert rc == 0, out[-3000:]
    assert f"DKMS signs the module with the enrolled MOK {cert}" in out
    assert re.search(r"Have DKMS sign with the enrolled MOK\] \**\s*changed: \[localhost\]", out), out[-3000:]


def test_a_mok_not_enrolled_stops_with_the_enrolment_step(run: Run, tool: Tool, tmp_path: Path) -> None:
    cert, variables = _signing(tmp_path, 0, "is not enrolled")  # mokutil's answer wins over the EFI variable
    rc, out = _play(run, tool, tmp_path, **variables)
    assert rc != 0
    assert f"the MOK {cert} is not enrolled" in out and f"mokutil --import {cert}" in out


def test_a_mok_path_that_is_shell_syntax_is_refused(run: Run, tool: Tool, tmp_path: Path) -> None:
    rc, out = _play(
        run,
        tool,
        tmp_path,
        _nvidia_driver_efi_dir=str(_efi(tmp_path, 1)),
        nvidia_driver_secure_boot_sign=True,
        nvidia_driver_mok_key="/var/lib/dkms/mok.key; touch /tmp/pwned",
    )
    assert rc != 0
    assert "give absolute paths of letters, digits" in out
