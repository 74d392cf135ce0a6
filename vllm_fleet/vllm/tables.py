"""Loading the version-keyed tables in ``vllm_fleet/vllm/data/`` (generated from vLLM releases)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

SCHEMA = 1


@cache
def load_table(name: str) -> dict[str, Any]:
    """Parse ``data/<name>`` once per process and check its schema version."""
    text = resources.files("vllm_fleet.vllm").joinpath("data", name).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    if data.get("schema") != SCHEMA:
        raise RuntimeError(f"data/{name}: unsupported schema {data.get('schema')!r}")
    return data
