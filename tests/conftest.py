"""Shared fixtures: paths and a helper to write profile files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_fleet.catalog._data import read_yaml

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def builtin_data() -> Callable[[str], dict[str, Any]]:
    """A built-in profile's raw mapping, to derive variants from."""

    def get(name: str) -> dict[str, Any]:
        return dict(read_yaml(f"profiles/{name}.yaml"))

    return get


@pytest.fixture
def write_profile(tmp_path: Path) -> Callable[[str, Any], Path]:
    def write(name: str, data: Any) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
        return path

    return write
