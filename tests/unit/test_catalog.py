"""The catalogs: published figures must agree with what the architecture implies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_fleet.catalog import hardware_catalog, load_model, load_model_config, model_catalog
from vllm_fleet.catalog.quantization import SCHEMES

KIB = 1024


@pytest.mark.parametrize("key", [k for k, m in model_catalog().items() if m.parameters is not None])
def test_published_parameter_count_matches_architecture(key: str) -> None:
    model = model_catalog()[key]
    assert model.computed_parameters == model.parameters


def test_qwen25_7b_kv_bytes_per_token() -> None:
    qwen = load_model("Qwen/Qwen2.5-7B-Instruct")
    assert qwen.kv_bytes_per_token(2) == 56 * KIB  # BF16, not the article's "80 KB"
    assert qwen.kv_bytes_per_token(1) == 28 * KIB  # FP8


def test_hardware_catalog_has_the_fleet_gpus() -> None:
    hw = hardware_catalog()
    expected = {"rtx4090", "l40", "l40s", "a100-40gb", "a100-80gb", "h100-pcie", "h100-sxm", "h200", "cpu-lab"}
    assert expected <= set(hw)
    assert all(h.fp8 == (h.fp8_tflops is not None) for h in hw.values())
    # The flavour follows the architecture through the one table (nvidia_kernel_modules.yaml), not per entry.
    hopper = [h for h in hw.values() if h.architecture == "hopper"]
    assert hopper and all(h.open_kernel_module == "recommended" for h in hopper)
    assert hw["cpu-lab"].open_kernel_module == "none"


def test_model_from_local_config_json(tmp_path: Path) -> None:
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    local = load_model_config(tmp_path)
    assert local.head_dim == 128  # derived: hidden / heads
    assert local.computed_parameters == load_model("Qwen/Qwen2.5-7B-Instruct").parameters
    assert load_model(str(tmp_path)).kv_bytes_per_token(2) == 56 * KIB


def test_unknown_model_names_the_catalog() -> None:
    with pytest.raises(KeyError, match=r"Qwen/Qwen2\.5-7B-Instruct"):
        load_model("no/such-model")


def test_awq_bytes_per_param_include_scales() -> None:
    awq = SCHEMES["awq"].bytes_per_param(3584)
    assert awq == pytest.approx(0.5 + 2.5 / 128)
