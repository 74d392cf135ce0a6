"""Ansible filters over vllm_fleet.gpu_host: the roles' decisions about a real GPU host, made by the same Python
the tests and the CLI use (one source of truth; the rules themselves are data in vllm_fleet/catalog/).

ansible.cfg points filter_plugins here. The filters are pure: facts and variables in, a plain dict out.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

try:
    from vllm_fleet import gpu_host  # noqa: F401  (import check: the project venv has the package)
except ImportError:  # ansible-playbook from another interpreter: use this checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vllm_fleet.gpu_host.cuda import cuda_home
from vllm_fleet.gpu_host.kernel_modules import architectures, choose_flavour
from vllm_fleet.gpu_host.kernel_upgrades import (
    dkms_problem,
    headers_metapackages,
    kernel_hold_packages,
    next_kernel_plan,
)
from vllm_fleet.gpu_host.secure_boot import secure_boot_plan, secure_boot_state


def nvidia_kernel_module_flavour(
    architecture: str, requested: str = "auto", driver_version: Any = ""
) -> dict[str, Any]:
    """``{flavour, reason, problem}`` for nvidia_driver_gpu_architecture | nvidia_kernel_module_flavour(...)."""
    return asdict(choose_flavour(str(architecture), str(requested), str(driver_version or "")))


def nvidia_gpu_architectures(_: Any = None) -> list[str]:
    """Every architecture of the flavour table, older first (``{{ none | nvidia_gpu_architectures }}``)."""
    return architectures()


def nvidia_next_kernel_plan(install_headers: bool, kernel_hold: bool = False, flavour: str | None = None) -> str:
    """One sentence: what the next kernel upgrade does to the driver (preflight prints it)."""
    return next_kernel_plan(bool(install_headers), bool(kernel_hold), flavour)


def nvidia_kernel_headers_metapackages(kernel_release: str, installed: Any) -> list[str]:
    """``ansible_facts.kernel | nvidia_kernel_headers_metapackages(ansible_facts.packages.keys())``."""
    return headers_metapackages(str(kernel_release), [str(n) for n in installed])


def nvidia_kernel_hold_packages(kernel_release: str, installed: Any) -> list[str]:
    """The running kernel's packages and its flavour's meta-packages, to hold."""
    return kernel_hold_packages(str(kernel_release), [str(n) for n in installed])


def nvidia_dkms_problem(status_text: str, driver_version: str, kernel_release: str) -> str:
    """'' when `dkms status` has the driver's module installed for the kernel; else the problem and the fix."""
    return dkms_problem(str(status_text), str(driver_version), str(kernel_release))


def nvidia_secure_boot_plan(facts: dict[str, Any]) -> dict[str, Any]:
    """``{state, action, message}`` from what the role read on the host (tasks/secure-boot.yml)."""
    rc = facts.get("mokutil_rc")
    state = secure_boot_state(
        bool(facts.get("efi")),
        None if rc is None else int(rc),
        str(facts.get("mokutil_out") or ""),
        facts.get("efivar_b64") or None,
    )
    return asdict(
        secure_boot_plan(
            state,
            bool(facts.get("sign")),
            str(facts.get("key") or ""),
            str(facts.get("cert") or ""),
            bool(facts.get("key_exists")),
            bool(facts.get("cert_exists")),
            str(facts.get("test_key_out") or ""),
        )
    )


def nvidia_cuda_home(version: str) -> str:
    """``cuda_toolkit_version | nvidia_cuda_home`` -> /usr/local/cuda-X.Y."""
    return cuda_home(str(version))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "nvidia_kernel_module_flavour": nvidia_kernel_module_flavour,
            "nvidia_next_kernel_plan": nvidia_next_kernel_plan,
            "nvidia_gpu_architectures": nvidia_gpu_architectures,
            "nvidia_kernel_headers_metapackages": nvidia_kernel_headers_metapackages,
            "nvidia_kernel_hold_packages": nvidia_kernel_hold_packages,
            "nvidia_dkms_problem": nvidia_dkms_problem,
            "nvidia_secure_boot_plan": nvidia_secure_boot_plan,
            "nvidia_cuda_home": nvidia_cuda_home,
        }
