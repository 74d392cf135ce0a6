"""The hardware catalog: one GPU model per entry (see hardware.yaml for every figure's source)."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from vllm_fleet.catalog._data import read_yaml

if TYPE_CHECKING:
    from vllm_fleet.gpu_host.kernel_modules import OpenModules

MIB = 1024**2


class Hardware(BaseModel):
    """One accelerator model, as the planner and the roles need it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    """Catalog key (``rtx4090``, ``h100-sxm``…), also the host's hardware label in the fleet spec."""
    name: str
    """Marketing name as nvidia-smi prints it."""
    architecture: Literal["maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "cpu"]
    """GPU generation; picks the kernel-module flavour (nvidia_kernel_modules.yaml) and FP8 support."""
    compute_capability: str | None
    """CUDA SM version (``"8.9"``), ``None`` for the CPU lab."""
    memory_mib: int = Field(gt=0)
    """Total device memory as nvidia-smi reports it (``memory.total``)."""
    torch_memory_mib: int | None = Field(default=None, gt=0)
    """Total device memory as torch (``torch.cuda.mem_get_info``) and so vLLM see it, a little under nvidia-smi's:
    what ``gpu_memory_utilization`` is a fraction of. ``None`` where no source gives it: the planner then takes
    ``memory_mib`` less the usual driver reserve (docs/planner.md)."""
    bandwidth_gb_s: float = Field(gt=0)
    """Peak DRAM bandwidth, 10^9 bytes/s: the decode roofline's denominator."""
    bf16_tflops: float = Field(gt=0)
    """Dense BF16 tensor peak, 10^12 FLOP/s."""
    fp8_tflops: float | None = None
    """Dense FP8 tensor peak, ``None`` where the GPU has no FP8 units."""
    fp8: bool
    """Native FP8 tensor cores (Ada, Hopper and later)."""
    nvlink: bool
    """GPUs talk over NVLink."""
    nvswitch: bool
    """NVSwitch fabric (HGX boards): the driver role installs a version-locked nvidia-fabricmanager."""
    kv_block_size: int = Field(default=16, gt=0)
    """The CPU build's tokens per KV block (128); GPUs take the pinned release's default (16, 64 from 0.34)."""
    runtime_overhead_mib: int | None = Field(default=None, ge=0)
    """Ignored: entries written before the per-release memory model (vllm_fleet/vllm/memory_model.py) carry it,
    and still load."""

    @property
    def open_kernel_module(self) -> OpenModules:
        """What NVIDIA's open kernel modules are to this GPU (required, recommended, unsupported; none: no GPU),
        from the one flavour table (nvidia_kernel_modules.yaml)."""
        from vllm_fleet.gpu_host.kernel_modules import open_kernel_module  # the table reads the catalog package

        return open_kernel_module(self.architecture)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.bandwidth_gb_s * 1e9


@cache
def hardware_catalog() -> dict[str, Hardware]:
    """All hardware entries, keyed by label."""
    raw: dict[str, dict[str, object]] = read_yaml("hardware.yaml")
    return {key: Hardware.model_validate({"key": key, **value}) for key, value in raw.items()}


def load_hardware(key: str) -> Hardware:
    """Look up a hardware label; the error lists the known ones."""
    catalog = hardware_catalog()
    if key not in catalog:
        raise KeyError(f"unknown hardware {key!r}; known: {', '.join(sorted(catalog))}")
    return catalog[key]
