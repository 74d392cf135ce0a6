"""Shared fixtures: paths and a helper to write profile files."""

from __future__ import annotations

import gc
import os

# The tests' lab has names and addresses of its own (vllm_fleet.lab.config.LabNet): a test run leaves the main
# job's lab (./scripts/up) serving as it found it. Set before anything reads the lab's configuration; inherited
# by every process the tests start (vllm-fleet, ansible-playbook, pulumi).
os.environ["VLLM_FLEET_LAB_NET"] = "test"
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_fleet.catalog._data import read_yaml

DATA = Path(__file__).parent / "data"
pytest_plugins = ["tests.fixtures_lab"]


@pytest.fixture
def pulumi_garbage_collected() -> Iterator[None]:
    """After the test, the reference cycles Pulumi's runtime leaves (suspended ``Output.apply`` and
    ``run_in_stack`` coroutines) are collected here, between tests. Left to a later automatic collection, their
    finalizers can run inside an ``ast.parse`` (pytest rewriting a module imported late) and raise into it:
    CPython 3.11.7 then fails the whole run with "SystemError: AST constructor recursion depth mismatch" (CI of
    stop 36, at the serial run's end)."""
    yield
    gc.collect()


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


# Cheap, independent tests first; then the ones with real vLLM; then the lab (one lab per machine: the hosts
# test brings its own up and down); then the converged lab, which the Pulumi end-to-end test reuses. The rollout
# tests behind the router leave the lab's hosts on other configs: they run after every test that reads the lab
# profile there (converge, audit), so they need no rollout back; the Pulumi test converges the hosts itself.
_ORDER = (
    "tests/unit/",
    "tests/roles/",
    "tests/mirror/",
    "tests/vllm/",
    "tests/lab/",
    "tests/converge/",
    "tests/audit/",
    "tests/converge/test_rollout_router.py",
    "tests/e2e/",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = Path(str(item.fspath)).as_posix()
        matches = [i for i, part in enumerate(_ORDER) if part in path]
        return max(matches, key=lambda i: len(_ORDER[i])) if matches else len(_ORDER)  # the most specific entry

    items.sort(key=rank)
