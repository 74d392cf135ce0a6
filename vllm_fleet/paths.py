"""Where the project's non-Python parts live: the checkout root, templates, roles, the cache."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The checkout (vllm-fleet is used from a checkout: roles, templates and stacks live beside the package)."""
    return Path(__file__).resolve().parent.parent


def templates_dir() -> Path:
    """templates/: the ONE source of the vLLM config file and the systemd unit, shared with the roles."""
    return project_root() / "templates"


def cache_dir() -> Path:
    """Heavy artefacts (Pulumi engine, rootfs, wheelhouse, vLLM venv) live here, outside the repo."""
    default = Path(os.environ.get("HOME", "/root")) / ".cache" / "vllm-fleet"
    return Path(os.environ.get("VLLM_FLEET_CACHE", str(default)))
