"""Where the project's non-Python parts live: the checkout root, templates, roles, the cache."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def project_root() -> Path:
    """The checkout (vllm-fleet is used from a checkout: roles, templates and stacks live beside the package)."""
    return Path(__file__).resolve().parents[2]  # vllm_fleet/project/paths.py


def templates_dir() -> Path:
    """templates/: the ONE source of the vLLM config file and the systemd unit, shared with the roles."""
    return project_root() / "templates"


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Heavy artefacts (Pulumi engine, rootfs, wheelhouse, vLLM venv) live here, outside the repo."""
    env = os.environ if env is None else env
    if env.get("VLLM_FLEET_CACHE"):
        return Path(env["VLLM_FLEET_CACHE"])
    return Path(env.get("HOME") or Path.home()) / ".cache" / "vllm-fleet"
