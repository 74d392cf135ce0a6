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

from vllm_fleet.gpu_host.kernel_modules import architectures, choose_flavour
from vllm_fleet.gpu_host.kernel_upgrades import next_kernel_plan


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


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "nvidia_kernel_module_flavour": nvidia_kernel_module_flavour,
            "nvidia_next_kernel_plan": nvidia_next_kernel_plan,
            "nvidia_gpu_architectures": nvidia_gpu_architectures,
        }
