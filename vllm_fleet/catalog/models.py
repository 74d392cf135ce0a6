"""The model catalog and the sizing arithmetic that only depends on a model's architecture."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vllm_fleet.catalog._data import read_yaml


class ModelArch(BaseModel):
    """What sizing needs from a decoder-only transformer's config.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    """Hugging Face id or local path the entry was read for."""
    architecture: str
    """``architectures[0]`` from config.json."""
    parameters: int | None = None
    """Published parameter count; ``None`` to use the count computed from the architecture."""
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    """q/k/v projections carry biases (Qwen2)."""
    torch_dtype: str = "bfloat16"
    """The checkpoint's dtype."""
    checkpoint_quantization: str | None = None
    """How the checkpoint's linear weights are stored (awq, gptq, fp8, compressed-tensors) or ``None``."""
    quantization_config: dict[str, Any] | None = None
    """The checkpoint's config.json ``quantization_config`` (scheme, bits, group size): what sizes its weights."""

    @model_validator(mode="after")
    def _method_of_the_config(self) -> ModelArch:
        """A checkpoint with a quantization_config is stored as its quant_method says (what vLLM reads)."""
        method = (self.quantization_config or {}).get("quant_method")
        if method and self.checkpoint_quantization != method:
            object.__setattr__(self, "checkpoint_quantization", str(method))
        return self

    # -- parameter counts by kind: quantisation applies to the linear layers only --------------------
    @property
    def embedding_params(self) -> int:
        """Input embedding plus the LM head when it is not tied."""
        tables = 1 if self.tie_word_embeddings else 2
        return tables * self.vocab_size * self.hidden_size

    @property
    def linear_params_per_layer(self) -> int:
        h, d = self.hidden_size, self.head_dim
        q = h * self.num_attention_heads * d
        kv = 2 * h * self.num_key_value_heads * d
        o = self.num_attention_heads * d * h
        mlp = 3 * h * self.intermediate_size  # gate, up, down (SwiGLU)
        return q + kv + o + mlp

    @property
    def linear_params(self) -> int:
        return self.num_hidden_layers * self.linear_params_per_layer

    @property
    def other_params(self) -> int:
        """Norms and biases: always kept in the activation dtype."""
        per_layer = 2 * self.hidden_size
        if self.attention_bias:
            per_layer += (self.num_attention_heads + 2 * self.num_key_value_heads) * self.head_dim
        return self.num_hidden_layers * per_layer + self.hidden_size

    @property
    def computed_parameters(self) -> int:
        return self.embedding_params + self.linear_params + self.other_params

    @property
    def total_parameters(self) -> int:
        return self.parameters if self.parameters is not None else self.computed_parameters

    def kv_bytes_per_token(self, dtype_bytes: float) -> int:
        """2 (K and V) · layers · kv_heads · head_dim · bytes per element."""
        return int(2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes)


@cache
def model_catalog() -> dict[str, ModelArch]:
    raw: dict[str, dict[str, Any]] = read_yaml("models.yaml")
    return {key: ModelArch.model_validate({"key": key, **value}) for key, value in raw.items()}


def load_model_config(path: Path, key: str | None = None) -> ModelArch:
    """Size any model from a local Hugging Face ``config.json`` (a file or the model directory)."""
    config_path = path / "config.json" if path.is_dir() else path
    try:
        cfg: dict[str, Any] = json.loads(config_path.read_text(encoding="utf-8"))
        if not isinstance(cfg, dict):
            raise ValueError("not a JSON object")
        cfg = {**cfg, **(cfg.get("text_config") or {})}  # multimodal wrappers keep the LM config nested
        return _arch_from_config(cfg, key or str(path))
    except OSError as err:
        raise KeyError(f"{config_path}: cannot read the model's config.json: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise KeyError(f"{config_path}: the model's config.json is not UTF-8 text; copy it again") from None
    except json.JSONDecodeError as err:
        raise KeyError(
            f"{config_path}: the model's config.json is not valid JSON (line {err.lineno}: {err.msg}): "
            "truncated? copy it again"
        ) from None
    except KeyError as err:
        lacks = err.args[0]
        raise KeyError(f"{config_path}: the model's config.json lacks {lacks!r}: not a decoder LM config?") from None
    except (TypeError, ValueError, ValidationError) as err:
        detail = str(err).splitlines()[0]
        raise KeyError(f"{config_path}: the model's config.json has an unusable value ({detail})") from None


def _arch_from_config(cfg: dict[str, Any], key: str) -> ModelArch:
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    qcfg = cfg.get("quantization_config") or {}
    arch = (cfg.get("architectures") or ["unknown"])[0]
    return ModelArch(
        key=key,
        architecture=arch,
        hidden_size=hidden,
        intermediate_size=int(cfg["intermediate_size"]),
        num_hidden_layers=int(cfg["num_hidden_layers"]),
        num_attention_heads=heads,
        num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        vocab_size=int(cfg["vocab_size"]),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", arch.startswith("Qwen2"))),
        torch_dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
        checkpoint_quantization=qcfg.get("quant_method"),
        quantization_config=qcfg or None,
    )


def load_model(ref: str) -> ModelArch:
    """A catalog id, or a path to a local model directory / config.json."""
    catalog = model_catalog()
    if ref in catalog:
        return catalog[ref]
    path = Path(ref)
    if path.exists():
        return load_model_config(path)
    raise KeyError(
        f"unknown model {ref!r}: not in the catalog and no config.json at that path; "
        f"catalog: {', '.join(sorted(catalog))}"
    )
