"""vLLM's memory accounting per release family (vllm_fleet/vllm/memory_model.py), term by term."""

from __future__ import annotations

import dataclasses

import pytest

from vllm_fleet.vllm import memory_model as mm

GIB = 1024**3


def inputs(**over: object) -> mm.MemoryInputs:
    base = mm.MemoryInputs(
        version="0.19.0",
        torch_total_bytes=int(79.19 * GIB),
        gpu_memory_utilization=0.95,
        weights_bytes=int(14.99 * GIB),
        hidden_size=4096,
        vocab_size=128256,
        num_hidden_layers=32,
        activation_dtype_bytes=2,
        max_num_batched_tokens=8192,
        max_num_seqs=1024,
        tensor_parallel_size=1,
    )
    return dataclasses.replace(base, **over)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("version", "family"),
    [
        ("0.8.2", "A"),
        ("0.9.0.1", "A"),
        ("0.9.1", "B"),
        ("0.19.1", "B"),
        ("0.20.0", "C"),
        ("0.33.0", "C"),
        ("0.34.0", "E"),
    ],
)
def test_families_follow_the_releases_code_paths(version: str, family: str) -> None:
    assert mm.family(version).name == family


def test_0_19_is_total_times_util_less_weights_peak_and_non_torch() -> None:
    b = mm.budget(inputs())
    assert b.cuda_graph_bytes == 0  # 0.18/0.19 measure CUDA graphs but do not count them by default
    assert b.kv_budget_bytes == b.usable_bytes - int(14.99 * GIB) - b.activation_bytes - b.non_torch_bytes
    assert b.utilization_defaulted is False and b.extensible is False


def test_cuda_graphs_count_from_0_20_and_not_when_eager() -> None:
    counted = mm.budget(inputs(version="0.20.0"))
    assert counted.cuda_graph_bytes == mm.CUDA_GRAPH_BASE_BYTES + 32 * mm.CUDA_GRAPH_PER_LAYER_BYTES
    assert mm.budget(inputs(version="0.20.0", enforce_eager=True)).cuda_graph_bytes == 0


def test_the_activation_peak_is_not_divided_by_tp_but_non_torch_grows() -> None:
    one, four = mm.budget(inputs()), mm.budget(inputs(tensor_parallel_size=4))
    assert one.activation_bytes == four.activation_bytes  # the sampler's logits span the whole vocabulary
    assert (one.non_torch_bytes, four.non_torch_bytes) == (mm.NON_TORCH_TP1_BYTES, mm.NON_TORCH_TP_BYTES)


def test_the_sort_sampler_before_0_17_holds_about_twice_the_bytes_per_logit() -> None:
    before, after = mm.activation_peak(inputs(version="0.16.0")), mm.activation_peak(inputs(version="0.17.0"))
    logits = 1024 * 128256
    assert before - after == pytest.approx(logits * (30.0 - 15.3), abs=2)


def test_unset_utilization_takes_the_release_default() -> None:
    assert mm.budget(inputs(gpu_memory_utilization=None, version="0.19.0")).gpu_memory_utilization == 0.9
    assert mm.budget(inputs(gpu_memory_utilization=None, version="0.20.0")).gpu_memory_utilization == 0.92


def test_0_34_extensible_cache_is_what_is_free_after_warm_up() -> None:
    b = mm.budget(inputs(version="0.34.0", gpu_memory_utilization=None))
    assert b.extensible and b.gpu_memory_utilization == 1.0
    peak = b.activation_bytes
    margin = max(mm.EXTENSIBLE_MARGIN_FLOOR_BYTES, int(0.75 * peak))
    own = int(14.99 * GIB) + b.non_torch_bytes + b.cuda_graph_bytes
    assert b.kv_budget_bytes == int(79.19 * GIB) - mm.CONTEXT_BYTES - own - margin - peak
    # a cap for a shared GPU: 0.5 of the device bounds vLLM's own use
    capped = mm.budget(inputs(version="0.34.0", gpu_memory_utilization=0.5))
    assert capped.kv_budget_bytes == capped.usable_bytes - own - peak


def test_0_34_without_the_extensible_cache_on_cpu_or_with_a_fixed_size() -> None:
    fixed = mm.budget(inputs(version="0.34.0", gpu_memory_utilization=None, kv_cache_memory_bytes=GIB))
    assert not fixed.extensible and fixed.kv_budget_bytes == GIB and fixed.gpu_memory_utilization == 0.92
    cpu = mm.budget(inputs(version="0.34.0", gpu_memory_utilization=None, cuda=False))
    assert not cpu.extensible and cpu.gpu_memory_utilization == 0.92


@pytest.mark.parametrize(
    ("version", "total_gib", "name", "expected"),
    [
        ("0.8.3", 79.19, "NVIDIA H100 80GB HBM3", (8192, 1024)),
        ("0.8.3", 79.14, "NVIDIA A100-SXM4-80GB", (2048, 1024)),
        ("0.8.4", 44.4, "NVIDIA L40S", (2048, 256)),
        ("0.8.5", 79.14, "NVIDIA A100-SXM4-80GB", (8192, 1024)),  # by memory, A100 included
        ("0.9.0", 79.14, "NVIDIA A100-SXM4-80GB", (2048, 256)),  # A100s stay small from 0.9.0
        ("0.19.0", 79.19, "NVIDIA H100 80GB HBM3", (8192, 1024)),
        ("0.27.1", 178.0, "NVIDIA B200", (8192, 1024)),
        ("0.28.0", 178.0, "NVIDIA B200", (16384, 1024)),
        ("0.34.0", 22.05, "NVIDIA L4", (2048, 256)),
    ],
)
def test_batch_defaults_by_release_and_gpu(
    version: str, total_gib: float, name: str, expected: tuple[int, int]
) -> None:
    assert mm.default_batch(version, int(total_gib * GIB), name) == expected
