"""`vllm-fleet hardware import`: a real server's `nvidia-smi` output -> a hardware catalogue entry (hardware.yaml's
schema), so the planner judges profiles against the GPU that is really there.

    nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv > query.csv
    nvidia-smi topo -m > topo.txt

What nvidia-smi says is taken as it is (name, the memory vLLM's gpu_memory_utilization is a fraction of, compute
capability -> architecture through the flavour table); what it cannot say (memory bandwidth, tensor peaks, the
runtime overhead) comes from the catalogue entry of the same GPU name, or must be given. The files are someone
else's output: parsed strictly, bounded, every value checked before it reaches the entry.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from vllm_fleet.catalog.hardware import Hardware, hardware_catalog
from vllm_fleet.gpu_host.kernel_modules import architecture_of

QUERY = "nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv"
TOPOLOGY = "nvidia-smi topo -m"
MAX_BYTES = 256 * 1024
_REQUIRED = ("name", "memory.total", "compute_cap")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()/+-]{0,99}$")
_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_MEMORY = re.compile(r"^(\d{1,7})(?:\s*MiB)?$")
_CC = re.compile(r"^\d{1,2}\.\d{1,2}$")
_FP8_FROM = ("ada", "hopper", "blackwell")  # native FP8 tensor cores: SM 8.9 and 9.0+


class HardwareImportError(ValueError):
    """A problem with the input, naming the file and what to do."""


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int
    compute_capability: str
    driver_version: str = ""


@dataclass(frozen=True)
class Topology:
    """GPU-to-GPU links from `nvidia-smi topo -m`: ``links[(i, j)]`` is NV<n>, PIX, PXB, PHB, NODE or SYS."""

    gpus: int
    links: dict[tuple[int, int], str] = field(default_factory=dict)

    def nvlinked(self, a: int, b: int) -> bool:
        return self.links.get((a, b), "").startswith("NV")

    @property
    def any_nvlink(self) -> bool:
        return any(v.startswith("NV") for v in self.links.values())

    @property
    def all_pairs_nvlink(self) -> bool:
        pairs = [(a, b) for a in range(self.gpus) for b in range(self.gpus) if a != b]
        return bool(pairs) and all(self.nvlinked(a, b) for a, b in pairs)


def read_output(path: str) -> bytes:
    """A saved nvidia-smi output (``-``: stdin), read up to one byte past the bound (the parser refuses it)."""
    import sys
    from pathlib import Path

    if path == "-":
        return sys.stdin.buffer.read(MAX_BYTES + 1)
    try:
        with Path(path).open("rb") as f:
            return f.read(MAX_BYTES + 1)
    except OSError as e:
        raise HardwareImportError(f"{path}: cannot read: {e.strerror or e}; give the saved nvidia-smi output") from None


def _text(data: str | bytes, source: str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    if len(raw) > MAX_BYTES:
        raise HardwareImportError(f"{source}: {len(raw)} bytes, more than nvidia-smi writes ({MAX_BYTES} at most)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HardwareImportError(f"{source}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def parse_query(data: str | bytes, source: str = "query") -> list[Gpu]:
    """The rows of ``nvidia-smi --query-gpu=…,name,memory.total,compute_cap… --format=csv`` (units or nounits)."""
    try:
        rows = list(csv.reader(io.StringIO(_text(data, source)), skipinitialspace=True))
    except csv.Error as e:  # a field past csv's field_size_limit, a NUL byte: not nvidia-smi's CSV
        raise HardwareImportError(f"{source}: not nvidia-smi's CSV ({e}); run `{QUERY}` on the server") from None
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise HardwareImportError(f"{source}: empty; run `{QUERY}` on the server")
    header = [re.sub(r"\s*\[.*\]$", "", c.strip()) for c in rows[0]]
    missing = [f for f in _REQUIRED if f not in header]
    if missing:
        raise HardwareImportError(
            f"{source}: no {', '.join(missing)} column (header {', '.join(header)[:80]!r}); run `{QUERY}` (with the "
            "header: no noheader)"
        )
    gpus = []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise HardwareImportError(f"{source}: line {n} has {len(row)} fields, the header {len(header)}")
        cell = dict(zip(header, (c.strip() for c in row), strict=True))
        name, memory, cc = cell["name"], cell["memory.total"], cell["compute_cap"]
        if not _NAME.match(name):
            raise HardwareImportError(f"{source}: line {n}: {name[:60]!r} is not a GPU name as nvidia-smi prints it")
        m = _MEMORY.match(memory)
        if m is None or int(m[1]) == 0:
            raise HardwareImportError(f"{source}: line {n}: memory.total {memory[:30]!r} is not '<MiB> MiB'")
        if not _CC.match(cc):
            raise HardwareImportError(
                f"{source}: line {n}: compute_cap {cc[:20]!r} is not a compute capability such as 9.0 (driver too "
                "old for compute_cap? R510 and later have it)"
            )
        index = cell.get("index", str(n - 2))
        gpus.append(
            Gpu(
                index=int(index) if index.isascii() and index.isdigit() else n - 2,
                name=name,
                memory_mib=int(m[1]),
                compute_capability=cc,
                driver_version=cell.get("driver_version", "")[:32],
            )
        )
    if not gpus:
        raise HardwareImportError(f"{source}: a header and no GPU; is the driver loaded (`nvidia-smi` alone)?")
    return gpus


def parse_topology(data: str | bytes, source: str = "topo") -> Topology:
    """The GPU-to-GPU part of ``nvidia-smi topo -m`` (NIC columns and the legend are ignored)."""
    lines = [line for line in _text(data, source).splitlines() if line.strip()]
    header = next((line.split() for line in lines if re.match(r"^\s+GPU0\b", line)), None)
    if header is None:
        raise HardwareImportError(f"{source}: no GPU0 column header; run `{TOPOLOGY}` on the server")
    labels = []
    for token in header:
        if not re.fullmatch(r"GPU\d+", token):
            break
        labels.append(token)
    links: dict[tuple[int, int], str] = {}
    for line in lines:
        cells = line.split()
        if line[:1].isspace() or not cells or not re.fullmatch(r"GPU\d+", cells[0]):  # the header, NICs, legend
            continue
        row = labels.index(cells[0]) if cells[0] in labels else None
        if row is None or len(cells) < len(labels) + 1:
            raise HardwareImportError(f"{source}: row {cells[0]} does not match the {len(labels)} GPU columns")
        for col, value in enumerate(cells[1 : len(labels) + 1]):
            if col != row:
                if not re.fullmatch(r"NV\d+|PIX|PXB|PHB|NODE|SYS|SOC", value):
                    raise HardwareImportError(
                        f"{source}: {cells[0]}/{labels[col]}: {value[:20]!r} is not a topo -m link"
                    )
                links[(row, col)] = value
    return Topology(gpus=len(labels), links=links)


def _slug(name: str) -> str:
    base = re.sub(r"^(nvidia|tesla)\s+", "", name.strip(), flags=re.I)
    base = re.sub(r"^(geforce)\s+", "", base, flags=re.I)
    return re.sub(r"[^a-z0-9.]+", "-", base.lower()).strip("-.")


@dataclass(frozen=True)
class Imported:
    """The entry (hardware.yaml's schema), the host's GPU count, and what the catalogue says of the same GPU."""

    entry: Hardware
    gpus: int
    known: Hardware | None
    notes: list[str]

    @property
    def differences(self) -> dict[str, tuple[Any, Any]]:
        """Field -> (catalogue, this server) where the catalogue entry of the same GPU differs."""
        if self.known is None:
            return {}
        mine, theirs = self.entry.model_dump(), self.known.model_dump()  # runtime_overhead_mib: None on both
        return {k: (theirs[k], mine[k]) for k in mine if k != "key" and mine[k] != theirs[k]}

    def to_yaml(self) -> str:
        data = self.entry.model_dump(exclude={"key", "runtime_overhead_mib"})
        lines = [
            f"# vllm-fleet hardware import: {self.gpus} x {self.entry.name} (compute capability "
            f"{self.entry.compute_capability}: {self.entry.architecture}; open kernel modules: "
            f"{self.entry.open_kernel_module}).",
            *(f"# {note}" for note in self.notes),
        ]
        if self.known is not None and not self.differences:
            lines.append(
                f"# The catalogue's {self.known.key} is this server: give its hosts hardware: "
                f"{self.known.key}, gpus: {self.gpus}."
            )
        elif self.known is not None:
            diff = ", ".join(f"{k} {a} there, {b} here" for k, (a, b) in self.differences.items())
            lines.append(
                f"# Differs from the catalogue's {self.known.key}: {diff}. Update that entry (or add this one "
                f"under its own key, --key) and give its hosts gpus: {self.gpus}."
            )
        else:
            lines.append(
                f"# Add it to vllm_fleet/catalog/hardware.yaml; give its hosts hardware: {self.entry.key}, "
                f"gpus: {self.gpus}."
            )
        return "\n".join(lines) + "\n" + yaml.safe_dump({self.entry.key: data}, sort_keys=False)


def import_hardware(
    query: str | bytes,
    topology: str | bytes | None = None,
    *,
    key: str | None = None,
    bandwidth_gb_s: float | None = None,
    bf16_tflops: float | None = None,
    fp8_tflops: float | None = None,
    nvswitch: bool | None = None,
    query_source: str = "query",
    topology_source: str = "topo",
) -> Imported:
    """One catalogue entry from the server's nvidia-smi output (see the module docstring)."""
    gpus = parse_query(query, query_source)
    names = sorted({g.name for g in gpus})
    if len(names) > 1:
        raise HardwareImportError(
            f"{query_source}: GPUs of different models ({', '.join(names)}): a catalogue entry is one model; run "
            "vLLM on one model per server (CUDA_VISIBLE_DEVICES) and import that model's rows"
        )
    first = gpus[0]
    architecture = architecture_of(first.compute_capability)
    if architecture is None:
        raise HardwareImportError(
            f"{query_source}: compute capability {first.compute_capability} is not in the architecture table "
            "(vllm_fleet/catalog/nvidia_kernel_modules.yaml): no driver branch vllm-fleet knows supports it"
        )
    known = next((h for h in hardware_catalog().values() if h.name == first.name), None)
    topo = parse_topology(topology, topology_source) if topology is not None else None
    if topo is not None and topo.gpus != len(gpus):
        raise HardwareImportError(
            f"{topology_source}: {topo.gpus} GPUs, {query_source} lists {len(gpus)}: same server?"
        )
    notes = []
    if known is not None:
        notes.append(
            f"Same GPU as catalogue entry {known.key}: bandwidth and tensor peaks from there; memory_mib "
            f"{first.memory_mib} measured here ({known.memory_mib} there)."
        )
    else:
        notes.append(f"{first.name} is not in the catalogue: bandwidth and tensor peaks as given on the command line.")

    def figure(given: float | None, name: str, option: str) -> Any:
        if given is not None:
            if not (math.isfinite(given) and given > 0):
                raise HardwareImportError(f"{option} {given}: not a positive finite figure; give the datasheet's")
            return given
        if known is not None:
            return getattr(known, name)
        raise HardwareImportError(
            f"{query_source}: {first.name} is not in the hardware catalogue and nvidia-smi does not report its "
            f"{name.replace('_', ' ')}: give {option} (from NVIDIA's datasheet)"
        )

    fp8 = architecture in _FP8_FROM
    nvlink = topo.any_nvlink if topo is not None else (known.nvlink if known is not None else False)
    if nvswitch is None:
        # HGX/DGX 8-GPU boards: every pair over NVLink through NVSwitch; smaller full meshes are direct links.
        nvswitch = (topo.all_pairs_nvlink and topo.gpus >= 8) if topo is not None else bool(known and known.nvswitch)
        if topo is not None:
            notes.append(
                f"NVLink: {'every pair' if topo.all_pairs_nvlink else 'some pairs' if topo.any_nvlink else 'none'} "
                f"(topo -m); nvswitch {'assumed' if nvswitch else 'not assumed'} (--nvswitch/--no-nvswitch to say)."
            )
    entry_key = key or (known.key if known is not None else _slug(first.name))
    if not _KEY.match(entry_key):
        raise HardwareImportError(f"--key: {entry_key!r} is not a catalogue key (lower case, digits, . _ -)")
    try:
        entry = Hardware.model_validate(
            {
                "key": entry_key,
                "name": first.name,
                "architecture": architecture,
                "compute_capability": first.compute_capability,
                "memory_mib": min(g.memory_mib for g in gpus),
                # torch's total is not in nvidia-smi's output: the same board's driver reserve, from the catalogue
                "torch_memory_mib": (
                    min(g.memory_mib for g in gpus) - (known.memory_mib - known.torch_memory_mib)
                    if known is not None and known.torch_memory_mib is not None
                    else None
                ),
                "bandwidth_gb_s": figure(bandwidth_gb_s, "bandwidth_gb_s", "--bandwidth-gb-s"),
                "bf16_tflops": figure(bf16_tflops, "bf16_tflops", "--bf16-tflops"),
                "fp8_tflops": figure(fp8_tflops, "fp8_tflops", "--fp8-tflops") if fp8 else None,
                "fp8": fp8,
                "nvlink": nvlink,
                "nvswitch": nvswitch,
                "kv_block_size": known.kv_block_size if known is not None else 16,
            }
        )
    except ValidationError as e:
        raise HardwareImportError(
            "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
        ) from None
    if entry.torch_memory_mib is None:
        notes.append(
            "torch_memory_mib unknown: the planner takes memory_mib less 480 MiB; add torch's total "
            "(python -c 'import torch; print(torch.cuda.mem_get_info()[1] // 2**20)') for an exact budget."
        )
    drivers = sorted({g.driver_version for g in gpus if g.driver_version})
    if drivers:
        notes.append(f"Driver {', '.join(drivers)} on the server.")
    return Imported(entry=entry, gpus=len(gpus), known=known, notes=notes)
