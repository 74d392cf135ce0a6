"""`vllm-fleet validate`: every bad profile fails naming the field and the fix, never with a traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vllm_fleet.cli.commands import app
from vllm_fleet.fleet.spec import merge_overrides

runner = CliRunner()
BASE = "rtx4090-qwen2.5-7b-awq-fp8kv"


def validate(*paths: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["validate", *map(str, paths)])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stdout


def test_builtin_profiles_validate(data_dir: Path) -> None:
    files = sorted((Path(__file__).parents[2] / "vllm_fleet/catalog/profiles").glob("*.yaml"))
    code, output = validate(*files)
    assert code == 0, output


BAD_CASES: list[tuple[str, dict[str, Any], str, list[str]]] = [
    (
        "out-of-range",
        {"cache": {"gpu_memory_utilization": 1.2}},
        "cache.gpu_memory_utilization",
        ["less than or equal to 1"],
    ),
    ("above-095", {"cache": {"gpu_memory_utilization": 0.97}}, "cache.gpu_memory_utilization", ["at most 0.95"]),
    ("unknown-key", {"scheduler": {"max_num_seq": 8}}, "scheduler.max_num_seq", ["did you mean 'max_num_seqs'"]),
    ("wrong-section", {"cache": {"max_num_seqs": 8}}, "cache.max_num_seqs", ["as scheduler.max_num_seqs"]),
    ("engine-arg-in-section", {"cache": {"max_logprobs": 5}}, "cache.max_logprobs", ["extra_args"]),
    (
        "old-spec-flag",
        {"speculative_model": "Qwen/Qwen2.5-0.5B-Instruct"},
        "speculative_model",
        ["removed --speculative-model in 0.8.3", "speculative"],
    ),
    ("swap-space", {"cache": {"swap_space": 0}}, "cache.swap_space", ["removed in 0.18.0", "recomputes"]),
    ("kv-scales", {"cache": {"calculate_kv_scales": True}}, "cache.calculate_kv_scales", ["removed in 0.28.0"]),
    (
        "limits",
        {"scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 32}},
        "scheduler.max_num_batched_tokens",
        ["raise it to at least 64"],
    ),
    (
        "draft-too-big",
        {"speculative": {"method": "draft_model", "model": "Qwen/Qwen2.5-32B-Instruct"}},
        "speculative.model",
        ["nothing is left for the KV cache"],
    ),
    ("spec-no-model", {"speculative": {"method": "eagle3"}}, "speculative", ["needs `model`"]),
    ("bad-choice", {"cache": {"kv_cache_dtype": "int4"}}, "cache.kv_cache_dtype", ["'auto'", "'fp8'"]),
    ("unknown-hw", {"hardware": "rtx9090"}, "hardware", ["rtx4090"]),
    ("too-long", {"model": {"max_model_len": 65536}}, "model.max_model_len", ["max_position_embeddings"]),
    ("no-version", {"vllm_version": None}, "vllm_version", []),
    ("unreleased", {"vllm_version": "9.9.9"}, "vllm_version", ["0.8.2"]),
    (
        "extra-arg-removed",
        {"extra_args": {"disable_log_requests": True}},
        "extra_args.disable_log_requests",
        ["removed in 0.17.0"],
    ),
    ("extra-arg-dup", {"extra_args": {"swap_space": 4}}, "extra_args.swap_space", ["as cache.swap_space"]),
]


@pytest.mark.parametrize(("name", "change", "field", "words"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_profile_names_field_and_fix(
    name: str,
    change: dict[str, Any],
    field: str,
    words: list[str],
    builtin_data: Callable[[str], dict[str, Any]],
    write_profile: Callable[[str, Any], Path],
) -> None:
    data = merge_overrides(builtin_data(BASE), change)
    data = {k: v for k, v in data.items() if v is not None}
    path = write_profile(name, data)
    code, output = validate(path)
    assert code == 1
    lines = [line for line in output.splitlines() if line.startswith(f"{path}: {field}: ")]
    assert lines, output
    for word in words:
        assert any(word in line for line in lines), (word, output)


def test_yaml_error_names_the_line(write_profile: Callable[[str, Any], Path]) -> None:
    path = write_profile("broken", "name: x\nhardware: [rtx4090\n")
    code, output = validate(path)
    assert code == 1
    assert f"{path}: (yaml): not valid YAML at line" in output


def test_missing_file_and_good_file_together(
    tmp_path: Path, builtin_data: Callable[[str], dict[str, Any]], write_profile: Callable[[str, Any], Path]
) -> None:
    good = write_profile("good", builtin_data(BASE))
    code, output = validate(good, tmp_path / "absent.yaml")
    assert code == 1
    assert "absent.yaml: (file): cannot read" in output
    assert str(good) not in output


def test_console_script_runs() -> None:
    exe = Path(sys.executable).parent / "vllm-fleet"
    result = subprocess.run([str(exe), "profiles"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "rtx4090-qwen2.5-7b-spec" in result.stdout
