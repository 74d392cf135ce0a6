"""`vllm-fleet bench` against real vLLM: the sweep shows the batching gain max_num_seqs gives, and plots it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vllm_fleet.bench import sweep
from vllm_fleet.cli import app
from vllm_fleet.profile import DecodeProfile

pytestmark = pytest.mark.vllm
runner = CliRunner()


def test_sweep_shows_batching_gain(healthy_server: tuple[str, DecodeProfile]) -> None:
    url, prof = healthy_server
    result = sweep(url, prof, [1, 4], max_tokens=32, requests_per_client=1)
    one, four = result.levels
    assert one.completion_tokens == 32 and four.completion_tokens == 4 * 32
    assert four.aggregate_tokens_per_s > 1.5 * one.aggregate_tokens_per_s  # batching amortises each step
    assert four.roofline_aggregate_tokens_per_s > one.roofline_aggregate_tokens_per_s
    assert 0 < one.ttft_p50_s <= one.ttft_p95_s and one.itl_p50_s > 0


def test_cli_json_and_plot(healthy_server: tuple[str, DecodeProfile], tmp_path: Path) -> None:
    url, prof = healthy_server
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(prof.model_dump(mode="json", exclude_none=True)))
    png = tmp_path / "sweep.png"
    args = ["bench", url, "--profile", str(path), "--concurrency", "1,2", "--max-tokens", "16", "--json"]
    result = runner.invoke(app, [*args, "--plot", str(png), "--requests-per-client", "1"])
    assert result.exit_code == 0, result.output
    assert [x["concurrency"] for x in json.loads(result.stdout)["levels"]] == [1, 2]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
