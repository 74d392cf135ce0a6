"""The planner held to real GPUs: public vLLM start-up reports, planned with the settings each states.

A report (tests/data/kv_reports/reports.yaml) is what vLLM printed at start-up on a real GPU ("Model loading took",
"Available KV cache memory", "GPU KV cache size"), with its source URL, the settings the source states and every
assumption marked. :func:`compare` plans the same settings and sets the planner's KV budget beside vLLM's.
Used by the real-report test, ``bench/kv_real.py`` and the node calibration of smoke and the audit.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vllm_fleet.catalog import ModelArch, hardware_catalog, model_catalog
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.planner import GIB, Plan, plan
from vllm_fleet.trust.user_yaml import parse_user_yaml
from vllm_fleet.vllm import flags, memory_model

MEDIAN_TOLERANCE = 0.02
"""The median of the cases' absolute errors (each is held to memory_model.UNCERTAINTY)."""


class Settings(BaseModel):
    """The engine settings of a report: stated in the source, or the release's default and listed as assumed."""

    model_config = ConfigDict(extra="allow")

    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    dtype: str | None = None
    enforce_eager: bool | None = False
    block_size: int | None = None


class Reported(BaseModel):
    """What vLLM printed, exactly (GiB as vLLM prints them)."""

    model_config = ConfigDict(extra="allow")

    model_loading_gib: float | None = None
    kv_cache_memory_gib: float | None = None
    kv_cache_tokens: int | None = None
    gpu_blocks: int | None = None


class Report(BaseModel):
    """One public vLLM start-up report."""

    model_config = ConfigDict(extra="allow")

    id: str
    source: str = Field(pattern=r"^https://")
    gpu: str
    vllm_version: str | None
    """None where the source does not say it (such a report is kept, not planned)."""
    model: str
    tensor_parallel_size: int = Field(ge=1)
    settings: Settings
    assumptions: list[str] = Field(default_factory=list)
    reported: Reported
    quote: str = Field(min_length=20)


@dataclass(frozen=True)
class Comparison:
    report: Report
    plan: Plan
    reported_kv_bytes: int

    @property
    def error(self) -> float:
        """(planner - vLLM) / vLLM of the KV budget."""
        return (self.plan.kv_budget_bytes - self.reported_kv_bytes) / self.reported_kv_bytes

    @property
    def within(self) -> bool:
        off = abs(self.plan.kv_budget_bytes - self.reported_kv_bytes)
        return off <= max(memory_model.UNCERTAINTY * self.reported_kv_bytes, memory_model.UNCERTAINTY_BYTES)


def load_reports(directory: Path) -> tuple[list[Report], dict[str, ModelArch]]:
    """The corpus (reports.yaml) and the architectures of its models that the catalogue lacks (models.yaml)."""
    raw_reports: list[dict[str, Any]] = parse_user_yaml(
        (directory / "reports.yaml").read_text(encoding="utf-8"), "reports.yaml"
    )
    raw_models: dict[str, dict[str, Any]] = parse_user_yaml(
        (directory / "models.yaml").read_text(encoding="utf-8"), "models.yaml"
    )
    models = dict(model_catalog())
    fields = set(ModelArch.model_fields)
    for key, value in raw_models.items():
        models[key] = ModelArch.model_validate({"key": key, **{k: v for k, v in value.items() if k in fields}})
    return [Report.model_validate(r) for r in raw_reports], models


def not_covered(report: Report, models: dict[str, ModelArch]) -> str | None:
    """Why the planner cannot plan a report (None: it can)."""
    if report.vllm_version is None:
        return "the source does not state the vLLM release"
    try:
        flags.resolve_version(report.vllm_version)
    except ValueError:
        return f"vLLM {report.vllm_version}: before the V1 engine releases the planner plans (from 0.8.2)"
    if report.gpu not in hardware_catalog():
        return f"{report.gpu}: not in the hardware catalogue"
    if report.model not in models:
        return f"{report.model}: no architecture"
    if report.reported.kv_cache_memory_gib is None:
        return "vLLM's KV budget not printed"
    if report.settings.model_extra and report.settings.model_extra.get("kv_transfer_config"):
        return "a KV connector attached (its buffers are outside the planner's model)"
    return None


def profile_for(report: Report, model: ModelArch) -> DecodeProfile:
    s = report.settings
    quant = s.quantization.removesuffix("_marlin") if s.quantization else None
    cache: dict[str, Any] = {"kv_cache_dtype": s.kv_cache_dtype}
    if s.gpu_memory_utilization is not None:
        cache["gpu_memory_utilization"] = s.gpu_memory_utilization
    if s.block_size:
        cache["block_size"] = s.block_size
    scheduler: dict[str, Any] = {"max_num_batched_tokens": s.max_num_batched_tokens}
    if s.max_num_seqs:
        scheduler["max_num_seqs"] = s.max_num_seqs
    return DecodeProfile.model_validate(
        {
            "name": "report",
            "hardware": report.gpu,
            "gpus": report.tensor_parallel_size,
            "vllm_version": flags.resolve_version(report.vllm_version or ""),
            "model": {
                "model": model.key,
                "dtype": s.dtype or "auto",
                "max_model_len": s.max_model_len,
                "enforce_eager": bool(s.enforce_eager),
                "quantization": quant if quant in {"fp8", "awq", "gptq", "compressed-tensors"} else None,
            },
            "cache": cache,
            "scheduler": scheduler,
            "parallel": {"tensor_parallel_size": report.tensor_parallel_size},
        }
    )


def compare(report: Report, models: dict[str, ModelArch]) -> Comparison:
    model = models[report.model]
    result = plan(profile_for(report, model), model=model)
    reported = int((report.reported.kv_cache_memory_gib or 0) * GIB)
    return Comparison(report, result, reported)


def median_abs_error(comparisons: list[Comparison]) -> float:
    return statistics.median(abs(c.error) for c in comparisons)
