"""Reading the YAML files shipped inside the package (the only I/O the core does)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml


@cache
def read_yaml(name: str) -> Any:
    """Parse ``vllm_fleet/catalog/<name>`` once per process."""
    text = resources.files("vllm_fleet.catalog").joinpath(name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


def list_dir(name: str) -> list[str]:
    """File names under ``vllm_fleet/catalog/<name>``, sorted."""
    return sorted(p.name for p in resources.files("vllm_fleet.catalog").joinpath(name).iterdir())
