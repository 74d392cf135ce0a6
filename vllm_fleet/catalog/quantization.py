"""Bytes per parameter for each weight format, scale and zero-point overhead included.

Quantisation applies to the transformer's linear layers. Embeddings, the LM head, norms and biases stay in
the activation dtype (AWQ/GPTQ/FP8 checkpoints keep them in 16 bit), which is why a 4-bit Qwen2.5-7B is
5.6 GB, not the 4 GB a "7.6 B × 0.5 byte" estimate gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WeightFormat = Literal["bfloat16", "float16", "float32", "fp8", "awq", "gptq"]

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
