"""Decode profiles: the data a vLLM node is configured from.

One pydantic model per concern, like vLLM's own ``vllm/config/*.py``: ``extra="forbid"``, a docstring per field,
``Literal`` enums. A profile says *what* to serve and how to tune decode; the renderer turns it into flags for
one pinned vLLM version, the planner judges it against the hardware.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from vllm_fleet import values

SpecMethod = Literal["draft_model", "eagle", "eagle3", "ngram"]
KVCacheDType = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"]
ModelDType = Literal["auto", "bfloat16", "float16", "float32"]
Quantization = Literal["awq", "awq_marlin", "gptq", "gptq_marlin", "fp8"]


ModelRef = Annotated[str, AfterValidator(values.model_ref)]
"""A Hugging Face id (``org/name``) or an absolute local path: it becomes ``vllm serve``'s model argument."""
ServedName = Annotated[str, AfterValidator(values.served_name)]
"""A name clients send in the OpenAI API (``Qwen/Qwen2.5-7B-Instruct``, ``chat-7b``)."""
ListenHost = Annotated[str, AfterValidator(values.listen_host)]
"""An IP address or host name to listen on; the port is its own field."""
PlainText = Annotated[str, AfterValidator(values.plain_text)]
"""Free text on one line: no control characters."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)


class SpeculativeConfig(_Strict):
    """Speculative decoding, rendered as vLLM's ``--speculative-config`` JSON."""

    method: SpecMethod
    """``draft_model`` (a small model of the same family), ``eagle``/``eagle3`` (a trained drafter head), or
    ``ngram`` (prompt lookup, no extra model)."""
    model: ModelRef | None = None
    """The drafter: a Hugging Face id or local path. Required except for ``ngram``."""
    num_speculative_tokens: int = Field(default=5, ge=1, le=16)
    """Tokens the drafter proposes per step (the article's k)."""
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1)
    """Tensor parallelism of the drafter; 1 or the verifier's size."""
    prompt_lookup_min: int | None = Field(default=None, ge=1)
    """ngram only: the shortest n-gram to match in the prompt."""
    prompt_lookup_max: int | None = Field(default=None, ge=1)
    """ngram only: the longest n-gram to match in the prompt."""
    use_heterogeneous_vocab: bool | None = None
    """draft_model only: let a drafter whose vocabulary size differs from the target's propose over the tokens
    both share (vLLM 0.32's token-level intersection, greedy draft sampling); vLLM refuses such a pair without it."""
    assumed_acceptance_rate: float = Field(default=0.75, gt=0, lt=1)
    """Planner only (never rendered): the per-token acceptance α used to estimate the speedup."""

    @model_validator(mode="after")
    def _model_needed(self) -> SpeculativeConfig:
        if self.method != "ngram" and not self.model:
            raise ValueError(f"speculative method {self.method!r} needs `model` (the drafter's id or path)")
        if self.method == "ngram" and self.model:
            raise ValueError("ngram speculation uses the prompt itself: remove `model`")
        if self.use_heterogeneous_vocab and self.method != "draft_model":
            raise ValueError("use_heterogeneous_vocab applies to method draft_model only")
        if self.method != "ngram" and (self.prompt_lookup_min or self.prompt_lookup_max):
            raise ValueError("prompt_lookup_min/max apply to method ngram only")
        return self


class SLOs(_Strict):
    """Service levels the smoke test and the planner hold a node to."""

    ttft_p95_s: float | None = Field(default=None, gt=0)
    """Time to first token, 95th percentile, seconds."""
    itl_p95_s: float | None = Field(default=None, gt=0)
    """Inter-token latency, 95th percentile, seconds. Cannot beat the decode roofline."""
    min_spec_acceptance_rate: float | None = Field(default=0.6, ge=0, le=1)
    """Accepted / drafted tokens below which speculative decoding costs more than it gives (article: 0.6)."""
    max_preemptions: int = Field(default=0, ge=0)
    """Preemptions tolerated during the smoke probe."""


class DecodeProfile(_Strict):
    """A complete, validated decode configuration for one kind of node."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    """Profile id (lower case, digits, ``.-_``)."""
    description: PlainText = Field(default="", max_length=500)
    """What the profile is for."""
    hardware: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    """Hardware catalog key the profile is tuned for (``rtx4090``, ``l40``, ``h100-sxm``…)."""
    gpus: int = Field(default=1, ge=1, le=16)
    """GPUs on the node used by this server."""
    vllm_version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    """The pinned vLLM release the flags are rendered for."""
    model: ModelRef
    """Model catalog id (a Hugging Face id) or a local model directory; the first argument of ``vllm serve``."""
    model_path: ModelRef | None = None
    """Where the weights live on the host (air-gapped: a local directory). Defaults to ``model``."""
    served_model_name: ServedName | None = None
    """Name clients use in the OpenAI API. Defaults to ``model``."""

    # -- memory -----------------------------------------------------------------------------------------
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """Fraction of the device's TOTAL memory vLLM may use: weights, activations and KV cache together."""
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0)
    """Fixed KV-cache size in bytes; when set, vLLM ignores gpu_memory_utilization for the KV budget."""
    kv_cache_dtype: KVCacheDType = "auto"
    """KV cache element type; ``fp8`` halves the bytes per token of BF16."""
    calculate_kv_scales: bool | None = None
    """Compute FP8 KV scales at run time. vLLM removed the flag in 0.28.0 (scales come from the checkpoint)."""
    swap_space: float | None = Field(default=None, ge=0)
    """GiB of CPU swap for preempted KV. vLLM removed it in 0.18.0: preemption recomputes instead."""
    block_size: int | None = Field(default=None, ge=1)
    """Tokens per KV block (vLLM's default: 16 on GPUs)."""

    # -- batching -------------------------------------------------------------------------------------
    max_num_seqs: int = Field(default=256, ge=1)
    """Sequences scheduled at once (prefill and decode together): the decode batch ceiling."""
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    """Tokens per scheduler step; decode uses one per running sequence, chunked prefill takes the rest."""
    max_model_len: int | None = Field(default=None, ge=16)
    """Longest prompt + output per request. Defaults to the model's max_position_embeddings."""
    enable_chunked_prefill: bool | None = None
    """Split long prefills across steps so decodes are not stalled behind them."""
    enable_prefix_caching: bool | None = None
    """Reuse KV blocks of shared prompt prefixes."""

    # -- model execution ------------------------------------------------------------------------------
    dtype: ModelDType = "auto"
    """Activation and unquantised weight dtype."""
    quantization: Quantization | None = None
    """Weight quantisation method; must match how the checkpoint is stored."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    """GPUs one model replica is split over."""
    enforce_eager: bool = False
    """Disable CUDA graphs / compilation (faster start, slower decode)."""
    speculative: SpeculativeConfig | None = None
    """Speculative decoding; ``None`` to decode one token per step."""

    # -- serving --------------------------------------------------------------------------------------
    host: ListenHost = "0.0.0.0"  # noqa: S104 - a server's listen address
    """Listen address of the OpenAI-compatible server."""
    port: int = Field(default=8000, ge=1, le=65535)
    """Listen port."""
    shutdown_timeout: int | None = Field(default=None, ge=0, le=3600)
    """Seconds vLLM lets in-flight requests finish on SIGTERM (``--shutdown-timeout``, vLLM >= 0.18.0).
    ``None``: 60 s where the release has the flag (vLLM's own default, 0, *aborts* them). The unit's
    TimeoutStopSec is kept above it."""
    extra_args: dict[Annotated[str, AfterValidator(values.engine_arg_name)], Any] = Field(default_factory=dict)
    """Further engine arguments by vLLM name (``max_logprobs: 5``), checked against the pinned version."""
    slo: SLOs = Field(default_factory=SLOs)
    """Service levels the smoke test gates on."""

    @property
    def serve_model(self) -> str:
        """The positional argument of ``vllm serve``."""
        return self.model_path or self.model
