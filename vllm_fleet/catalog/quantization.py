"""Bytes per parameter for each weight format, scale and zero-point overhead included.

Quantisation applies to the transformer's linear layers. Embeddings, the LM head, norms and biases stay in
the activation dtype (AWQ/GPTQ/FP8 checkpoints keep them in 16 bit), which is why a 4-bit Qwen2.5-7B is
5.6 GB, not the 4 GB a "7.6 B × 0.5 byte" estimate gives.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

WeightFormat = Literal["bfloat16", "float16", "float32", "fp8", "int8", "w4a16", "awq", "gptq"]

DTYPE_BYTES: dict[str, float] = {"bfloat16": 2.0, "float16": 2.0, "half": 2.0, "float32": 4.0, "float": 4.0}


@dataclass(frozen=True)
class WeightScheme:
    """Storage of one weight format."""

    name: str
    bits: int
    group_size: int | None
    """Weights sharing one scale; ``None`` means one scale per output channel."""
    scale_bytes: float
    """Bytes of scale + zero point stored per group (or per output channel)."""

    def bytes_per_param(self, in_features: int) -> float:
        group = self.group_size or in_features
        return self.bits / 8 + self.scale_bytes / group


SCHEMES: dict[str, WeightScheme] = {
    "bfloat16": WeightScheme("bfloat16", 16, None, 0.0),
    "float16": WeightScheme("float16", 16, None, 0.0),
    "float32": WeightScheme("float32", 32, None, 0.0),
    # FP8 W8A8 (vLLM "fp8", compressed-tensors): per-channel float32 weight scale.
    "fp8": WeightScheme("fp8", 8, None, 4.0),
    # INT8 W8A8 (compressed-tensors): int8 weights, per-channel float32 scale.
    "int8": WeightScheme("int8", 8, None, 4.0),
    # W4A16 (compressed-tensors pack-quantized, symmetric): int32-packed 4-bit weights, a 16-bit scale per group.
    "w4a16": WeightScheme("w4a16", 4, 128, 2.0),
    # AWQ GEMM: 4-bit weights, group 128, one fp16 scale and one packed 4-bit zero point per group.
    "awq": WeightScheme("awq", 4, 128, 2.0 + 0.5),
    # GPTQ: 4-bit weights, group 128, fp16 scale + packed 4-bit qzero per group (g_idx ignored: 4 B/row).
    "gptq": WeightScheme("gptq", 4, 128, 2.0 + 0.5),
}

KV_DTYPE_BYTES: dict[str, float] = {
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
    "bfloat16": 2.0,
    "float16": 2.0,
}


def kv_dtype_bytes(kv_cache_dtype: str, activation_dtype_bytes: float) -> float:
    """``auto`` stores the KV cache in the model's activation dtype."""
    if kv_cache_dtype == "auto":
        return activation_dtype_bytes
    return KV_DTYPE_BYTES[kv_cache_dtype]


class UnknownQuantizationConfig(ValueError):
    """A checkpoint's ``quantization_config`` that the planner cannot size (named, never guessed)."""


def scheme_from_config(qcfg: dict[str, Any]) -> WeightScheme:
    """How a checkpoint stores its linear weights, from its config.json ``quantization_config``.

    The shapes are vLLM's ``create_weights`` of each method (docs/planner.md, "Weight formats"):
    compressed-tensors FP8/INT8 (per-channel float32 scale), W4A16/W8A16 (a 16-bit scale per group, a packed
    zero point when asymmetric), AWQ and GPTQ (16-bit scales and packed zero points per group), and ``fp8``.
    """
    method = str(qcfg.get("quant_method") or "")
    if method == "fp8":
        return SCHEMES["fp8"]
    if method in {"awq", "gptq"}:
        bits = int(qcfg.get("bits") or qcfg.get("w_bit") or 4)
        group = int(qcfg.get("group_size") or qcfg.get("q_group_size") or 128)
        return replace(SCHEMES[method], bits=bits, group_size=group if group > 0 else None)
    if method == "compressed-tensors":
        groups = qcfg.get("config_groups") or {}
        weights = [g.get("weights") or {} for g in groups.values() if isinstance(g, dict)]
        if not weights:
            raise UnknownQuantizationConfig("compressed-tensors config without config_groups[*].weights")
        w = weights[0]
        bits, kind = int(w.get("num_bits") or 0), str(w.get("type") or "")
        if bits == 8 and kind == "float":
            return SCHEMES["fp8"]
        if bits == 8 and kind == "int" and w.get("strategy") in {"channel", "tensor"}:
            return SCHEMES["int8"]
        if kind == "int" and bits in {4, 8} and w.get("strategy") in {"group", "channel"}:
            group_size = int(w.get("group_size") or 0) or None
            zero = 0.0 if w.get("symmetric", True) else bits / 8
            return WeightScheme(f"w{bits}a16", bits, group_size, 2.0 + zero)
        raise UnknownQuantizationConfig(f"compressed-tensors weights {w!r}: a scheme the planner does not size")
    raise UnknownQuantizationConfig(f"quant_method {method!r}: a format the planner does not size")
