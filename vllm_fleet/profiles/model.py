"""Decode profiles: the data a vLLM node is configured from.

Shaped like vLLM's own config (``vllm/config/*.py``): one section per concern -- ``model`` (ModelConfig),
``cache`` (CacheConfig), ``scheduler`` (SchedulerConfig), ``parallel`` (ParallelConfig), ``speculative``
(SpeculativeConfig), ``frontend`` (the OpenAI server's FrontendArgs) -- and each section field's name IS the
vLLM argument dest (``cache.kv_cache_dtype`` -> ``--kv-cache-dtype``), so the renderer looks every flag up in the
pinned release's flag table with no map of its own. What only vllm-fleet reads (hardware, gpus, slo, the
model's local path, the assumed acceptance rate) is marked as not a flag. ``extra="forbid"``, a docstring per
field, ``Literal`` enums.

Profiles written before the sections (one flat mapping) still load: :func:`lift_flat_layout` moves each flat
key into its section and says where it went.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from packaging.version import Version
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from vllm_fleet.trust import values

LEGACY_UTILIZATION = 0.9
"""gpu_memory_utilization rendered for pins before 0.34 when the profile leaves it unset."""
UNSET_UTILIZATION_SINCE = "0.34.0"
"""The first release whose own default is better than any fraction we could pick (the extensible KV cache)."""

SpecMethod = Literal["draft_model", "eagle", "eagle3", "ngram"]
KVCacheDType = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"]
ModelDType = Literal["auto", "bfloat16", "float16", "float32"]
Quantization = Literal["awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "compressed-tensors"]


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

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy, refusing a field this model does not have (pydantic would set it silently: a flat
        ``max_num_seqs`` on a sectioned profile would change nothing)."""
        unknown = sorted(set(update or {}) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"{type(self).__name__} has no field {', '.join(unknown)}; update its section instead")
        return super().model_copy(update=update, deep=deep)


class _Section(_Strict):
    """A profile section: its fields are vLLM argument dests, except those in ``not_flags``."""

    not_flags: ClassVar[frozenset[str]] = frozenset()
    """Fields vllm-fleet reads itself, never rendered as a flag."""

    def flag_values(self) -> dict[str, Any]:
        """vLLM dest -> value for every flag field, in declaration order (``None``: unset)."""
        return {name: getattr(self, name) for name in type(self).model_fields if name not in self.not_flags}


class ModelConfig(_Section):
    """What is served and how it executes (vLLM's ModelConfig)."""

    not_flags = frozenset({"model", "path"})

    model: ModelRef
    """Model catalog id (a Hugging Face id) or a local model directory; the first argument of ``vllm serve``."""
    path: ModelRef | None = None
    """Where the weights live on the host (air-gapped: a local directory); served instead of ``model``, which
    stays the catalog id the planner reads. Defaults to ``model``."""
    served_model_name: ServedName | None = None
    """Name clients use in the OpenAI API. Defaults to ``model``."""
    dtype: ModelDType = "auto"
    """Activation and unquantised weight dtype."""
    quantization: Quantization | None = None
    """Weight quantisation method; must match how the checkpoint is stored."""
    max_model_len: int | None = Field(default=None, ge=16)
    """Longest prompt + output per request. Defaults to the model's max_position_embeddings."""
    enforce_eager: bool = False
    """Disable CUDA graphs / compilation (faster start, slower decode)."""

    @property
    def serve_model(self) -> str:
        """The positional argument of ``vllm serve``."""
        return self.path or self.model


class CacheConfig(_Section):
    """The KV cache: its memory budget and layout (vLLM's CacheConfig)."""

    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    """Up to vLLM 0.33: the fraction of the device's total memory vLLM may use, weights, activations and KV cache
    together (unset: 0.9, rendered). From 0.34 on CUDA: a cap on vLLM's own use for a GPU shared with other
    processes (unset: the release decides, 1.0 with the extensible KV cache, sized from memory free after warm-up)."""
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
    enable_prefix_caching: bool | None = None
    """Reuse KV blocks of shared prompt prefixes."""


class SchedulerConfig(_Section):
    """What runs in one engine step (vLLM's SchedulerConfig)."""

    max_num_seqs: int = Field(default=256, ge=1)
    """Sequences scheduled at once (prefill and decode together): the decode batch ceiling."""
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    """Tokens per scheduler step; decode uses one per running sequence, chunked prefill takes the rest."""
    enable_chunked_prefill: bool | None = None
    """Split long prefills across steps so decodes are not stalled behind them."""


class ParallelConfig(_Section):
    """How one replica is split over GPUs (vLLM's ParallelConfig)."""

    tensor_parallel_size: int = Field(default=1, ge=1)
    """GPUs one model replica is split over."""


class FrontendArgs(_Section):
    """The OpenAI-compatible server (vLLM's FrontendArgs)."""

    host: ListenHost = "0.0.0.0"  # noqa: S104 - a server's listen address
    """Listen address of the OpenAI-compatible server."""
    port: int = Field(default=8000, ge=1, le=65535)
    """Listen port."""
    shutdown_timeout: int | None = Field(default=None, ge=0, le=3600)
    """Seconds vLLM lets in-flight requests finish on SIGTERM (``--shutdown-timeout``, vLLM >= 0.18.0).
    ``None``: 60 s where the release has the flag (vLLM's own default, 0, *aborts* them). The unit's
    TimeoutStopSec is kept above it."""


class SpeculativeConfig(_Section):
    """Speculative decoding, rendered as vLLM's ``--speculative-config`` JSON: its fields are the JSON's keys
    (vLLM's SpeculativeConfig), in this order."""

    dest: ClassVar[str] = "speculative_config"
    not_flags = frozenset({"assumed_acceptance_rate"})

    method: SpecMethod
    """``draft_model`` (a small model of the same family), ``eagle``/``eagle3`` (a trained drafter head), or
    ``ngram`` (prompt lookup, no extra model)."""
    model: ModelRef | None = None
    """The drafter: a Hugging Face id or local path. Required except for ``ngram``."""
    num_speculative_tokens: int = Field(default=5, ge=1, le=16)
    """Tokens the drafter proposes per step (the article's k)."""
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1)
    """Tensor parallelism of the drafter; 1 or the verifier's size."""
    prompt_lookup_max: int | None = Field(default=None, ge=1)
    """ngram only: the longest n-gram to match in the prompt."""
    prompt_lookup_min: int | None = Field(default=None, ge=1)
    """ngram only: the shortest n-gram to match in the prompt."""
    use_heterogeneous_vocab: bool | None = None
    """draft_model only: let a drafter whose vocabulary size differs from the target's propose over the tokens
    both share (vLLM 0.32's token-level intersection, greedy draft sampling); vLLM refuses such a pair without it."""
    assumed_acceptance_rate: float = Field(default=0.75, gt=0, lt=1)
    """Planner only (never rendered): the per-token acceptance α used to estimate the speedup."""

    def flag_values(self) -> dict[str, Any]:
        """``speculative_config`` -> the JSON mapping vLLM reads (unset keys left out)."""
        return {self.dest: self.model_dump(exclude_none=True, exclude=set(self.not_flags))}

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


SECTIONS: dict[str, type[_Section]] = {
    "model": ModelConfig,
    "cache": CacheConfig,
    "scheduler": SchedulerConfig,
    "parallel": ParallelConfig,
    "speculative": SpeculativeConfig,
    "frontend": FrontendArgs,
}
"""Profile section -> its model (vLLM's config class of the same concern), in profile order."""

_FLAT_RENAMED = {"model_path": "path"}
"""Flat keys whose name changed when they moved into their section (``model_path`` -> ``model.path``)."""


def section_of(key: str) -> str | None:
    """The section a flag dest or field belongs to (``max_num_seqs`` -> ``scheduler``); None if none does."""
    for section, model in SECTIONS.items():
        if key in model.model_fields and key not in model.not_flags:
            return section
    return None


def _flat_target(key: str, value: Any) -> tuple[str, str] | None:
    """Where a flat key of an old profile lives now: (section, field), or None if it stays at the top."""
    if key == "model":
        return ("model", "model") if not isinstance(value, dict) else None
    if key in _FLAT_RENAMED:
        return ("model", _FLAT_RENAMED[key])
    section = section_of(key)
    return (section, key) if section and section != "speculative" else None


def lift_flat_layout(data: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """An old flat profile mapping moved into the sections, and (old key, new path) for each moved key.

    A key set both flat and in its section is left where it is, so validation names it as unknown.
    """
    out: dict[str, Any] = {}
    moved: list[tuple[str, str]] = []
    lifted: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        target = _flat_target(key, value)
        section_data = data.get(target[0]) if target else None
        if target is None or (isinstance(section_data, dict) and target[1] in section_data):
            out[key] = value
            continue
        lifted.setdefault(target[0], {})[target[1]] = value
        moved.append((key, ".".join(target)))
    for section, fields in lifted.items():
        present = out.get(section)
        out[section] = {**fields, **present} if isinstance(present, dict) else fields
    return out, moved


class ProfileLayoutWarning(UserWarning):
    """A profile written in the old flat layout: it loads, and this says where each key moved."""

    def __init__(self, source: str, moved: list[tuple[str, str]]) -> None:
        self.source = source
        self.moved = moved
        where = ", ".join(f"{old} -> {new}" for old, new in moved)
        super().__init__(
            f"{source}: old flat profile layout, read as sections ({where}); write the sections "
            "(`vllm-fleet validate` explains the layout)"
        )


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
    vllm_version: str = Field(pattern=r"^\d+(\.\d+){2,3}(\.post\d+)?$")
    """The pinned vLLM release the flags are rendered for."""

    model: ModelConfig
    """What is served (``model.model``: the catalog id) and how it executes: vLLM's ModelConfig."""
    cache: CacheConfig = Field(default_factory=CacheConfig)
    """The KV cache: memory budget, element type, blocks, prefix caching (vLLM's CacheConfig)."""
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    """Batching: sequences and tokens per step, chunked prefill (vLLM's SchedulerConfig)."""
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    """Tensor parallelism (vLLM's ParallelConfig)."""
    speculative: SpeculativeConfig | None = None
    """Speculative decoding; ``None`` to decode one token per step."""
    frontend: FrontendArgs = Field(default_factory=FrontendArgs)
    """The OpenAI-compatible server: listen address, port, drain time (vLLM's FrontendArgs)."""

    extra_args: dict[Annotated[str, AfterValidator(values.engine_arg_name)], Any] = Field(default_factory=dict)
    """Further engine arguments by vLLM name (``max_logprobs: 5``), checked against the pinned version."""
    slo: SLOs = Field(default_factory=SLOs)
    """Service levels the smoke test gates on."""

    @field_validator("extra_args")
    @classmethod
    def _histogram_buckets(cls, extra: dict[str, Any]) -> dict[str, Any]:
        """``custom_histogram_buckets`` (vLLM's --custom-histogram-buckets): family -> increasing finite bounds, as
        monitoring's SLO alerts and bench read them."""
        buckets = extra.get("custom_histogram_buckets")
        if buckets is None:
            return extra
        where = "custom_histogram_buckets"
        if not isinstance(buckets, dict):
            raise ValueError(f"{where}: a mapping of histogram family to its bucket bounds, e.g. ttft: [0.1, 0.5, 1]")
        for family, bounds in buckets.items():
            at = f"{where}[{family!r}]"
            if not isinstance(family, str) or not isinstance(bounds, list) or not bounds:
                raise ValueError(f"{at}: a non-empty list of bucket bounds in seconds, e.g. [0.1, 0.5, 1]")
            for i, bound in enumerate(bounds):
                if isinstance(bound, bool) or not isinstance(bound, int | float) or not math.isfinite(bound):
                    raise ValueError(f"{at}[{i}]: {str(bound)[:40]!r} is not a finite number of seconds")
            if any(b >= a for a, b in zip(bounds[1:], bounds, strict=False)):
                raise ValueError(f"{at}: bounds must increase strictly (sort them, drop duplicates)")
        return extra

    @model_validator(mode="after")
    def _utilization_of_the_pin(self) -> DecodeProfile:
        """Before 0.34 a profile that leaves gpu_memory_utilization unset has always been rendered with 0.9
        (kept: a deployed node's config does not change); from 0.34 the release decides, so unset stays unset."""
        if self.cache.gpu_memory_utilization is None and Version(self.vllm_version) < Version(UNSET_UTILIZATION_SINCE):
            self.cache.gpu_memory_utilization = LEGACY_UTILIZATION
        return self

    @model_validator(mode="before")
    @classmethod
    def _lift_flat(cls, data: Any) -> Any:
        """Profiles (and stored desired state) written before the sections load: flat keys move into them."""
        return lift_flat_layout(data)[0] if isinstance(data, dict) else data
