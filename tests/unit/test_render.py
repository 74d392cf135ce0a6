"""The renderer: argv, --config YAML and env for a pinned vLLM version, from the extracted flag table."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from vllm_fleet.cli.commands import app
from vllm_fleet.fleet.spec import merge_overrides
from vllm_fleet.profiles.loader import ProfileError, load_profile
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.render import config_yaml, render

runner = CliRunner()


def test_article_4090_renders_for_current_vllm() -> None:
    r = render(load_profile("rtx4090-qwen2.5-7b-spec"))
    argv = r.argv
    assert argv[0] == "Qwen/Qwen2.5-7B-Instruct"
    for gone in ("--swap-space", "--calculate-kv-scales", "--speculative-model", "--num-speculative-tokens"):
        assert gone not in argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {
        "method": "draft_model",
        "model": "Qwen/Qwen2.5-0.5B-Instruct",
        "num_speculative_tokens": 5,
        "draft_tensor_parallel_size": 1,
        "use_heterogeneous_vocab": True,  # 151936 vs 152064 tokens: vLLM 0.32 refuses the pair without it
    }
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.92"
    assert "--enable-chunked-prefill" in argv and "--enable-prefix-caching" in argv


def test_cli_argv_is_a_json_array() -> None:
    result = runner.invoke(app, ["render", "--profile", "l40-qwen2.5-14b-spec", "--vllm-version", "0.32.0"])
    assert result.exit_code == 0, result.output
    argv = json.loads(result.stdout)
    assert argv[0] == "Qwen/Qwen2.5-14B-Instruct" and "--max-num-seqs" in argv


def test_yaml_config_round_trips_to_the_same_values() -> None:
    prof = load_profile("rtx4090-qwen2.5-7b-spec")
    r = render(prof)
    text = config_yaml(prof, r)
    assert text.startswith("# Managed by vllm-fleet")
    assert yaml.safe_load(text) == r.config
    assert json.loads(r.config["speculative-config"])["model"] == "Qwen/Qwen2.5-0.5B-Instruct"


def test_false_boolean_uses_the_negative_flag(builtin_data: Callable[[str], dict[str, Any]]) -> None:
    prof = DecodeProfile.model_validate(
        merge_overrides(builtin_data("cpu-lab"), {"cache": {"enable_prefix_caching": False}})
    )
    for version in ("0.10.2", "0.32.0"):
        r = render(prof, version)
        assert "--no-enable-prefix-caching" in r.argv
        assert r.config["no-enable-prefix-caching"] is True and "enable-prefix-caching" not in r.config


def test_env_format_quotes_the_command_line() -> None:
    result = runner.invoke(app, ["render", "-p", "cpu-lab", "--format", "env"])
    assert result.exit_code == 0
    assert "VLLM_FLEET_SERVE_ARGS='/opt/vllm-fleet/models/tiny-llama-lab" in result.stdout


def test_removed_field_names_release_and_replacement(builtin_data: Callable[[str], dict[str, Any]]) -> None:
    data = merge_overrides(builtin_data("cpu-lab"), {"cache": {"swap_space": 4}})
    prof = DecodeProfile.model_validate(data)
    assert "--swap-space" in render(prof, "0.17.0").argv  # still there before 0.18.0
    with pytest.raises(ProfileError) as err:
        render(prof, "0.18.0")
    (problem,) = err.value.problems
    assert problem.field == "cache.swap_space"
    assert "removed in 0.18.0" in problem.message and "recomputes" in problem.message


def test_calculate_kv_scales_until_028(builtin_data: Callable[[str], dict[str, Any]]) -> None:
    prof = DecodeProfile.model_validate(
        merge_overrides(builtin_data("cpu-lab"), {"cache": {"calculate_kv_scales": True}})
    )
    assert "--calculate-kv-scales" in render(prof, "0.27.0").argv
    with pytest.raises(ProfileError, match=r"removed in 0\.28\.0"):
        render(prof, "0.28.0")


def test_extra_args_are_checked_against_the_version(builtin_data: Callable[[str], dict[str, Any]]) -> None:
    prof = DecodeProfile.model_validate({**builtin_data("cpu-lab"), "extra_args": {"max_logprobs": 5}})
    argv = render(prof).argv
    assert argv[argv.index("--max-logprobs") + 1] == "5"
    bad = DecodeProfile.model_validate({**builtin_data("cpu-lab"), "extra_args": {"no_such_arg": 1}})
    with pytest.raises(ProfileError, match="not a vLLM engine argument"):
        render(bad)


def test_version_outside_the_table_is_refused() -> None:
    with pytest.raises(ProfileError, match="vllm_version"):
        render(load_profile("cpu-lab"), "0.1.0")


def test_shutdown_timeout_drains_where_the_release_has_it(builtin_data: Callable[[str], dict[str, Any]]) -> None:
    # vLLM's own default (0) aborts in-flight requests on SIGTERM: every release with the flag gets a drain time.
    prof = load_profile("cpu-lab")
    assert render(prof, "0.32.0").config["shutdown-timeout"] == 60
    assert "--shutdown-timeout" not in render(prof, "0.17.1").argv  # the flag appeared in 0.18.0
    own = DecodeProfile.model_validate(
        merge_overrides(builtin_data("cpu-lab"), {"frontend": {"shutdown_timeout": 300}})
    )
    argv = render(own, "0.18.0").argv
    assert argv[argv.index("--shutdown-timeout") + 1] == "300"
    with pytest.raises(ProfileError, match=r"appeared in 0\.18\.0") as err:
        render(own, "0.17.1")
    assert [p.field for p in err.value.problems] == ["frontend.shutdown_timeout"]
