"""`vllm-fleet smoke` against real vLLM: a healthy node passes, and each kind of bad node is caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.vllm.conftest import lab_profile
from vllm_fleet.cli.commands import app
from vllm_fleet.lab.local_vllm import free_port, serve
from vllm_fleet.probes.smoke import smoke
from vllm_fleet.profiles.model import DecodeProfile

pytestmark = pytest.mark.vllm
runner = CliRunner()


def statuses(result: object) -> dict[str, str]:
    return {c.name: c.status for c in result.checks}  # type: ignore[attr-defined]


def test_healthy_profile_passes(healthy_server: tuple[str, DecodeProfile]) -> None:
    url, prof = healthy_server
    result = smoke(url, prof, timeout_s=30)
    assert result.exit_code == 0, [c for c in result.checks if c.status == "fail"]
    got = statuses(result)
    assert got["kv_capacity"] == "pass"  # planner vs vLLM's num_gpu_blocks within 2 %
    assert got["tokens"] == "pass" and got["preemptions"] == "pass" and got["ttft"] == "pass"


def test_cache_flag_differing_from_profile_is_caught(healthy_server: tuple[str, DecodeProfile]) -> None:
    url, prof = healthy_server
    other = prof.model_copy(update={"cache": prof.cache.model_copy(update={"enable_prefix_caching": False})})
    result = smoke(url, other, timeout_s=30, requests=1)
    assert result.exit_code == 1
    detail = next(c.detail for c in result.checks if c.name == "cache_config")
    assert "enable_prefix_caching: profile 'False', node 'True'" in detail


def test_cli_json_and_junit(healthy_server: tuple[str, DecodeProfile], tmp_path: Path) -> None:
    url, prof = healthy_server
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(prof.model_dump(mode="json", exclude_none=True)))
    junit = tmp_path / "junit.xml"
    result = runner.invoke(app, ["smoke", url, "--profile", str(path), "--json", "--junit", str(junit)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["result"] == "pass"
    assert 'failures="0"' in junit.read_text()


def test_down_endpoint_cannot_be_checked() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = smoke(url, lab_profile(), timeout_s=2)
    assert result.exit_code == 2
    assert result.reason is not None and "not healthy within 2 s" in result.reason and "ConnectError" in result.reason
    cli = runner.invoke(app, ["smoke", url, "--profile", "cpu-lab", "--timeout", "1"])
    assert cli.exit_code == 2


def test_ngram_speculation_reports_real_acceptance(ngram_server: tuple[str, DecodeProfile]) -> None:
    url, prof = ngram_server
    result = smoke(url, prof, timeout_s=30, max_tokens=64)
    check = next(c for c in result.checks if c.name == "spec_acceptance")
    assert check.status == "pass", check.detail
    drafted = float(check.detail.split(" accepted / ")[1].split(" drafted")[0])
    assert drafted > 0  # real draft tokens counted by vLLM


def test_forced_preemptions_are_caught(tmp_path: Path) -> None:
    # 3 blocks of 128 tokens (fp32: 2 KiB/token): one is vLLM's null block, so two long sequences cannot both
    # stay resident; 8 concurrent 200-token completions force preemptions.
    prof = lab_profile(
        cache={"kv_cache_memory_bytes": 3 * 128 * 2048}, model={"max_model_len": 256}, slo={"max_preemptions": 0}
    )
    with serve(prof, log=tmp_path / "serve.log") as url:
        result = smoke(url, prof, timeout_s=30, requests=8, max_tokens=200)
    check = next(c for c in result.checks if c.name == "preemptions")
    assert check.status == "fail", check.detail
    assert result.exit_code == 1
