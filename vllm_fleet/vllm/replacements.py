"""Guidance for removed vLLM arguments (data/replacements.yaml); the versions come from the flag table."""

from __future__ import annotations

from functools import cache
from importlib import resources

from vllm_fleet.catalog._data import parse_yaml


@cache
def _table() -> dict[str, dict[str, str | None]]:
    text = resources.files("vllm_fleet.vllm").joinpath("data/replacements.yaml").read_text(encoding="utf-8")
    data: dict[str, dict[str, str | None]] = parse_yaml(text)
    return data


def instead(dest: str) -> str | None:
    """What to use in place of the removed vLLM argument ``dest``, or ``None`` if we have no advice."""
    entry = _table().get(dest)
    return entry.get("instead") if entry else None
