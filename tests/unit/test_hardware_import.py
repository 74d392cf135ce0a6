"""`vllm-fleet hardware import` on recorded nvidia-smi outputs of five GPU generations (hand-written in NVIDIA's
documented format: tests/data/nvidia-smi/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from vllm_fleet.catalog import hardware_catalog
from vllm_fleet.catalog.hardware import Hardware
from vllm_fleet.catalog.hardware_import import (
    HardwareImportError,
    Imported,
    import_hardware,
    parse_query,
    parse_topology,
)
from vllm_fleet.cli.commands import app

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"


def _import(server: str) -> Imported:
    return import_hardware((DATA / f"{server}.query.csv").read_bytes(), (DATA / f"{server}.topo.txt").read_bytes())


@pytest.mark.parametrize(
    ("server", "key", "gpus", "architecture", "memory_mib", "nvlink", "nvswitch", "open_modules"),
    [
        ("v100-dgx1", "v100-sxm2-32gb", 8, "volta", 32768, True, False, "unsupported"),
        ("a100-hgx", "a100-80gb", 8, "ampere", 81920, True, True, "recommended"),
        ("l40s-4x", "l40s", 4, "ada", 46068, False, False, "recommended"),
        ("h100-hgx", "h100-sxm", 8, "hopper", 81559, True, True, "recommended"),
        ("rtx4090", "rtx4090", 1, "ada", 24564, False, False, "recommended"),
    ],
)
def test_recorded_servers_import_as_their_catalogue_entry(
    server: str,
    key: str,
    gpus: int,
    architecture: str,
    memory_mib: int,
    nvlink: bool,
    nvswitch: bool,
    open_modules: str,
) -> None:
    imported = _import(server)
    entry = imported.entry
    assert (entry.key, imported.gpus, entry.architecture, entry.memory_mib) == (key, gpus, architecture, memory_mib)
    assert (entry.nvlink, entry.nvswitch, entry.open_kernel_module) == (nvlink, nvswitch, open_modules)
    assert entry.fp8 == (architecture in ("ada", "hopper")) and (entry.fp8_tflops is not None) == entry.fp8
    # The figures nvidia-smi cannot give come from the catalogue's entry of the same name.
    known = hardware_catalog()[key]
    assert entry.bandwidth_gb_s == known.bandwidth_gb_s and entry.bf16_tflops == known.bf16_tflops
    assert imported.differences == {}
    text = imported.to_yaml()
    assert f"The catalogue's {key} is this server: give its hosts hardware: {key}, gpus: {gpus}." in text
    # The YAML is a catalogue entry: hardware.yaml's schema takes it back unchanged.
    ((name, data),) = yaml.safe_load(text).items()
    assert Hardware.model_validate({"key": name, **data}) == entry


def test_a_server_that_differs_from_the_catalogue_says_how() -> None:
    query = (DATA / "h100-hgx.query.csv").read_text().replace("81559 MiB", "81000 MiB")
    imported = import_hardware(query, (DATA / "h100-hgx.topo.txt").read_text())
    assert imported.entry.memory_mib == 81000  # what the server really has: the planner's budget
    # torch's total keeps the catalogued board's driver reserve (81559 - 81091 MiB)
    assert imported.differences == {"memory_mib": (81559, 81000), "torch_memory_mib": (81091, 80532)}
    assert "Differs from the catalogue's h100-sxm: memory_mib 81559 there, 81000 here" in imported.to_yaml()


def test_an_unknown_gpu_needs_its_datasheet_figures() -> None:
    query = "index, name, memory.total [MiB], compute_cap\n0, NVIDIA L20, 46068 MiB, 8.9\n"
    with pytest.raises(HardwareImportError, match="give --bandwidth-gb-s"):
        import_hardware(query)
    with pytest.raises(HardwareImportError, match="give --fp8-tflops"):
        import_hardware(query, bandwidth_gb_s=300, bf16_tflops=121)
    imported = import_hardware(query, bandwidth_gb_s=300, bf16_tflops=121, fp8_tflops=242.5)
    assert (imported.entry.key, imported.entry.architecture, imported.entry.memory_mib) == ("l20", "ada", 46068)
    assert imported.entry.torch_memory_mib is None  # nvidia-smi does not say it, and no catalogued board does
    assert imported.known is None and "torch_memory_mib unknown" in imported.to_yaml()


def test_nounits_and_header_units() -> None:
    gpus = parse_query((DATA / "l40s-nounits.query.csv").read_text())
    assert [(g.index, g.name, g.memory_mib, g.compute_capability) for g in gpus] == [
        (0, "NVIDIA L40S", 46068, "8.9"),
        (1, "NVIDIA L40S", 46068, "8.9"),
    ]


def test_topology_reads_gpu_links_only() -> None:
    topo = parse_topology((DATA / "v100-dgx1.topo.txt").read_text())
    assert topo.gpus == 8 and topo.any_nvlink and not topo.all_pairs_nvlink
    assert topo.links[(0, 1)] == "NV1" and topo.links[(0, 3)] == "NV2" and topo.links[(0, 5)] == "SYS"
    a100 = parse_topology((DATA / "a100-hgx.topo.txt").read_text())  # NIC columns and rows ignored
    assert a100.gpus == 8 and a100.all_pairs_nvlink and set(a100.links.values()) == {"NV12"}


@pytest.mark.parametrize(
    ("query", "topo", "message"),
    [
        ("", None, "empty; run `nvidia-smi --query-gpu="),
        ("index, name\n0, NVIDIA L40S\n", None, "no memory.total, compute_cap column"),
        ("name, memory.total [MiB], compute_cap\n", None, "a header and no GPU"),
        ("name, memory.total [MiB], compute_cap\nNVIDIA L40S, lots, 8.9\n", None, "memory.total 'lots'"),
        ("name, memory.total [MiB], compute_cap\nNVIDIA L40S, 46068 MiB, [N/A]\n", None, "compute_cap '[N/A]'"),
        ("name, memory.total [MiB], compute_cap\nNVIDIA K80, 11441 MiB, 3.7\n", None, "3.7 is not in the architecture"),
        ("name, memory.total [MiB], compute_cap\nx\x1b[31m, 1 MiB, 8.9\n", None, "is not a GPU name"),
        (
            "name, memory.total [MiB], compute_cap\nNVIDIA L40S, 46068 MiB, 8.9\nNVIDIA L4, 23034 MiB, 8.9\n",
            None,
            "GPUs of different models (NVIDIA L4, NVIDIA L40S)",
        ),
        ("name, memory.total [MiB], compute_cap\nNVIDIA L40S, 46068 MiB, 8.9\n", "nothing here\n", "no GPU0 column"),
        (
            "name, memory.total [MiB], compute_cap\nNVIDIA L40S, 46068 MiB, 8.9\n",
            "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n",
            "2 GPUs, query lists 1",
        ),
        (
            "name, memory.total [MiB], compute_cap\nNVIDIA L40S, 46068 MiB, 8.9\nNVIDIA L40S, 46068 MiB, 8.9\n",
            "\tGPU0\tGPU1\nGPU0\t X \t$(reboot)\nGPU1\tNV4\t X \n",
            "is not a topo -m link",
        ),
    ],
)
def test_bad_input_is_refused_with_the_fix(query: str, topo: str | None, message: str) -> None:
    with pytest.raises(HardwareImportError, match=None) as caught:
        import_hardware(query, topo)
    assert message in str(caught.value)


def test_oversized_input_is_refused() -> None:
    with pytest.raises(HardwareImportError, match="more than nvidia-smi writes"):
        parse_query("name, memory.total, compute_cap\n" + "x" * 300_000)


def test_cli_writes_the_entry(tmp_path: Path) -> None:
    out = tmp_path / "entry.yaml"
    result = CliRunner().invoke(
        app,
        [
            "hardware",
            "import",
            str(DATA / "l40s-4x.query.csv"),
            "--topo",
            str(DATA / "l40s-4x.topo.txt"),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(out.read_text())["l40s"]["memory_mib"] == 46068
    bad = CliRunner().invoke(app, ["hardware", "import", str(DATA / "README.md")])
    assert bad.exit_code == 1 and "no name, memory.total, compute_cap column" in " ".join(bad.output.split())
