"""How each vLLM release sizes its KV cache on a GPU: the memory accounting of ``determine_available_memory``.

What we know of vLLM releases, not of our profiles: the planner asks this module for one GPU's KV budget. Every
rule is read from the releases' own code paths (docs/planner.md, "The memory model", cites each one) and its
coefficients fitted to public start-up reports (tests/data/kv_reports/). Per GPU, in bytes:

- family A, 0.8.2 - 0.9.0.1: ``T·u - (W + P) - N``, N including the CUDA context (no start-up snapshot);
- family B, 0.9.1 - 0.19.1: ``T·u - W - P - N`` (``memory_profiling``; 0.18/0.19 measure CUDA graphs but do not
  count them);
- family C, 0.20.0 - 0.33.0: ``T·u - W - P - N - G`` (CUDA-graph memory counted by default; 0.27 measures the
  same terms as free-memory differences);
- family E, 0.34.0 on: the extensible KV cache sizes the cache from what is free after warm-up and CUDA-graph
  capture: ``min(T·u - (W + N + G), T - B - W - N - G - max(1 GiB, 0.75·P)) - P``, ``u`` unset = 1.0.

T: the device total as torch sees it; u: gpu_memory_utilization; W: weights; P: the profile run's activation peak;
N: non-torch memory the profile run adds (NCCL's buffers under TP); G: CUDA-graph memory; B: the CUDA context,
outside vLLM's start-up snapshot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from packaging.version import Version

from vllm_fleet.vllm.config_semantics import semantics_for

GIB = 1024**3


@dataclass(frozen=True)
class Family:
    """One run of releases whose memory accounting is the same."""

    name: str
    since: str
    counts_cuda_graphs: bool
    """CUDA-graph memory is taken from the KV budget by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)."""
    sampler_bytes_per_logit: float
    """Bytes the profile run's sampler holds per (sequence, vocabulary entry): float32 logits, probabilities and
    noise; before 0.17 also the full-vocabulary sort of top-k/top-p (its buffers and its int64 indices)."""
    context_in_budget: bool
    """The CUDA context counts against ``T·u`` (no start-up snapshot before 0.9.1)."""
    extensible_kv_cache: bool
    """The KV cache is sized after warm-up from measured free memory (on CUDA/ROCm, unless kv_cache_memory_bytes)."""
    code_path: str
    """Where the release computes it (vllm/v1/worker/gpu_worker.py:determine_available_memory and helpers)."""


FAMILIES: tuple[Family, ...] = (
    Family("A", "0.8.2", False, 30.0, True, False, "T·u - (torch peak incl. weights) - non-torch incl. context"),
    Family("B", "0.9.1", False, 30.0, False, False, "memory_profiling: T·u - W - P - N"),
    Family("B", "0.17.0", False, 15.3, False, False, "memory_profiling: T·u - W - P - N (Triton top-k/top-p)"),
    Family("C", "0.20.0", True, 15.3, False, False, "memory_profiling: T·u - W - P - N - G"),
    Family("E", "0.34.0", True, 15.3, False, True, "extensible KV cache: measured after warm-up and capture"),
)

SAMPLER_BYTES_FITTED_SINCE = "0.17.0"
"""15.3 B per logit is fitted to the H100 reports of vLLM 0.19.0; 30 B before 0.17 is read from the sampler's
code (a sort of the float32 logits with int64 indices), not measured."""

FORWARD_BYTES_PER_TOKEN_HIDDEN = 1.0
"""Activation bytes the profile's forward pass adds per (batched token × hidden unit × activation byte), beside the
sampler's logits: fitted to the same reports (Llama-3.1-8B and Llama-3.3-70B differ by this term alone)."""

NON_TORCH_TP1_BYTES = int(0.25 * GIB)
NON_TORCH_TP_BYTES = int(2.1 * GIB)
"""Non-torch memory the profile run adds: 0.24-0.25 GiB on one GPU, 2.06-2.21 GiB per rank at TP 2 and 4 (NCCL's
buffers, allocated at the first collective), as vLLM 0.19.0 printed it on H100s (tests/data/kv_reports/)."""

CONTEXT_BYTES = int(0.5 * GIB)
"""The CUDA context and library handles, outside vLLM's start-up snapshot from 0.9.1 (inside before): a typical
figure, not measured per GPU."""

CUDA_GRAPH_BASE_BYTES = int(0.40 * GIB)
CUDA_GRAPH_PER_LAYER_BYTES = int(0.0162 * GIB)
"""CUDA-graph memory of the default capture sizes, by layer count: 0.87-0.96 GiB for 28-36 layers, 1.6-1.8 GiB for
80, as vLLM 0.19.0 measured it on H100s (tests/data/kv_reports/). A fit; the capture sizes follow max_num_seqs."""

UNCERTAINTY = 0.10
UNCERTAINTY_BYTES = int(0.75 * GIB)
"""The memory model's stated uncertainty on one GPU's KV budget: 10 % or 0.75 GiB, whichever is larger. What the
real-report test holds it to, and beyond which smoke warns that a node's real capacity is not the plan's."""

EXTENSIBLE_MARGIN_FLOOR_BYTES = GIB
"""0.34's ``KV_CACHE_MARGIN_FLOOR_BYTES`` (vllm/v1/worker/extensible_kv_cache.py): kept free besides the peak."""

_A100_SMALL_SINCE = "0.9.0"
_BIG_TIER_SINCE = "0.28.0"


def family(version: str) -> Family:
    """The memory-accounting family of a vLLM release (from 0.8.2)."""
    wanted = Version(version)
    found = FAMILIES[0]
    for fam in FAMILIES:
        if wanted >= Version(fam.since):
            found = fam
    return found


def default_batch(version: str, torch_total_bytes: int, gpu_name: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) ``vllm serve`` picks when unset, by release and GPU.

    vllm/engine/arg_utils.py (_set_default_args_v1 -> get_batch_defaults): H100/H200 by name up to 0.8.4; then
    the device total against 70 GiB; A100s stay small from 0.9.0; a 160 GiB tier from 0.28.0.
    """
    v = Version(version)
    name = gpu_name.lower()
    if v < Version("0.8.5"):
        big = "h100" in name or "h200" in name
        return (8192, 1024) if big else (2048, 1024 if v < Version("0.8.4") else 256)
    if v >= Version(_BIG_TIER_SINCE) and torch_total_bytes >= 160 * GIB:
        return 16384, 1024
    big = torch_total_bytes >= 70 * GIB and (v < Version(_A100_SMALL_SINCE) or "a100" not in name)
    return (8192, 1024) if big else (2048, 256)


@dataclass(frozen=True)
class MemoryInputs:
    """What one GPU's KV budget depends on."""

    version: str
    torch_total_bytes: int
    gpu_memory_utilization: float | None
    """The profile's value, None when it leaves it to the release."""
    weights_bytes: int
    """Weights on this GPU (the drafter's included)."""
    hidden_size: int
    vocab_size: int
    num_hidden_layers: int
    activation_dtype_bytes: float
    max_num_batched_tokens: int
    max_num_seqs: int
    tensor_parallel_size: int
    enforce_eager: bool = False
    kv_cache_memory_bytes: int | None = None
    cuda: bool = True
    """A CUDA/ROCm device (the extensible KV cache needs one)."""


@dataclass(frozen=True)
class MemoryBudget:
    """One GPU's KV budget as the release computes it, with its terms (bytes)."""

    family: str
    gpu_memory_utilization: float
    utilization_defaulted: bool
    extensible: bool
    usable_bytes: int
    """T·u: what vLLM lets itself use (0.34 with the extensible cache: a cap on its own use, not headroom)."""
    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    """CUDA-graph memory counted against the budget (0 where the release does not count it)."""
    context_bytes: int
    """The CUDA context where it counts against the budget (family A) or against what is free (0.34)."""
    margin_bytes: int
    """0.34's safety margin besides the peak (max(1 GiB, 0.75·P)); 0 elsewhere."""
    kv_budget_bytes: int

    @property
    def reserve_bytes(self) -> int:
        """Everything besides weights and activations: non-torch, CUDA graphs, context, margin."""
        return self.non_torch_bytes + self.cuda_graph_bytes + self.context_bytes + self.margin_bytes


def activation_peak(m: MemoryInputs) -> int:
    """The profile run's peak: the sampler's float32 logits over max_num_seqs requests (all of the vocabulary,
    gathered on every rank, so not divided by TP) and the forward pass's batched-token activations."""
    fam = family(m.version)
    seqs = min(m.max_num_seqs, m.max_num_batched_tokens)
    sampler = seqs * m.vocab_size * fam.sampler_bytes_per_logit
    forward = m.max_num_batched_tokens * m.hidden_size * m.activation_dtype_bytes * FORWARD_BYTES_PER_TOKEN_HIDDEN
    return int(sampler + forward)


def cuda_graph_bytes(m: MemoryInputs) -> int:
    if m.enforce_eager or not m.cuda:
        return 0
    return CUDA_GRAPH_BASE_BYTES + CUDA_GRAPH_PER_LAYER_BYTES * m.num_hidden_layers


def budget(m: MemoryInputs) -> MemoryBudget:
    """The KV budget one GPU gets from vLLM ``m.version``."""
    fam = family(m.version)
    extensible = fam.extensible_kv_cache and m.cuda and m.kv_cache_memory_bytes is None
    default_u = semantics_for(m.version).gpu_memory_utilization_when_unset(extensible_kv_cache=extensible)
    u = m.gpu_memory_utilization if m.gpu_memory_utilization is not None else default_u
    usable = math.ceil(m.torch_total_bytes * u)
    peak = activation_peak(m)
    non_torch = NON_TORCH_TP1_BYTES if m.tensor_parallel_size == 1 else NON_TORCH_TP_BYTES
    graphs = cuda_graph_bytes(m) if fam.counts_cuda_graphs else 0
    context = CONTEXT_BYTES if fam.context_in_budget else 0
    margin = 0
    if m.kv_cache_memory_bytes is not None:
        kv = m.kv_cache_memory_bytes
    elif extensible:
        context = CONTEXT_BYTES
        margin = max(EXTENSIBLE_MARGIN_FLOOR_BYTES, int(0.75 * peak))
        own = m.weights_bytes + non_torch + graphs
        kv = min(usable - own, m.torch_total_bytes - context - own - margin) - peak
    else:
        kv = usable - m.weights_bytes - peak - non_torch - graphs - context
    return MemoryBudget(
        family=fam.name,
        gpu_memory_utilization=u,
        utilization_defaulted=m.gpu_memory_utilization is None,
        extensible=extensible,
        usable_bytes=usable,
        activation_bytes=peak,
        non_torch_bytes=non_torch,
        cuda_graph_bytes=graphs,
        context_bytes=context,
        margin_bytes=margin,
        kv_budget_bytes=int(kv),
    )
