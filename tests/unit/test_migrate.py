"""`vllm-fleet migrate`: the article's literal command lines become the built-in profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from vllm_fleet.cli.commands import app
from vllm_fleet.profiles.loader import load_profile, parse_profile
from vllm_fleet.profiles.migrate import migrate, split_command
from vllm_fleet.profiles.render import render

runner = CliRunner()


@pytest.mark.parametrize(
    ("script", "hardware", "builtin"),
    [("rtx4090.sh", "rtx4090", "rtx4090-qwen2.5-7b-spec"), ("l40.sh", "l40", "l40-qwen2.5-14b-spec")],
)
def test_article_commands_give_the_reference_profiles(data_dir: Path, script: str, hardware: str, builtin: str) -> None:
    command = (data_dir / "article" / script).read_text()
    result = runner.invoke(
        app, ["migrate", command, "--vllm-version", "0.32.0", "--hardware", hardware, "--name", builtin]
    )
    assert result.exit_code == 0, result.output
    migrated = parse_profile(yaml.safe_load(result.stdout), "migrated")
    assert render(migrated).argv == render(load_profile(builtin)).argv
    assert "removed in vLLM 0.18.0" in result.stdout  # --swap-space, noted in a comment
    assert "removed in vLLM 0.28.0" in result.stdout  # --calculate-kv-scales


def test_article_awq_command_with_inline_comments(data_dir: Path) -> None:
    command = (data_dir / "article" / "rtx4090-awq.sh").read_text()
    tokens = split_command(command)
    assert tokens[:3] == ["Qwen/Qwen2.5-7B-Instruct-AWQ", "--quantization", "awq"]
    m = migrate(command, "0.32.0", "rtx4090")
    assert m.profile.model.quantization == "awq" and m.profile.cache.kv_cache_dtype == "fp8"
    assert m.profile.cache.gpu_memory_utilization == 0.94


def test_old_release_keeps_what_it_still_has(data_dir: Path) -> None:
    m = migrate((data_dir / "article" / "rtx4090.sh").read_text(), "0.17.0", "rtx4090")
    assert m.profile.cache.swap_space == 0
    assert m.profile.cache.calculate_kv_scales is True
    assert m.profile.speculative is not None and m.profile.speculative.method == "draft_model"


def test_unknown_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="--no-such-flag is not a vLLM argument"):
        migrate("vllm serve m --no-such-flag 3", "0.32.0", "rtx4090")


def test_eagle_drafter_and_negated_boolean() -> None:
    m = migrate(
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-model yuhuili/EAGLE3-LLaMA3.1-Instruct-8B "
        "--num-speculative-tokens 6 --no-enable-prefix-caching -tp 1",
        "0.32.0",
        "h100-sxm",
    )
    assert m.profile.speculative is not None and m.profile.speculative.method == "eagle3"
    assert m.profile.cache.enable_prefix_caching is False
    assert m.profile.parallel.tensor_parallel_size == 1  # the short alias
