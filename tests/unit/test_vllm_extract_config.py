"""The config-semantics reader (vllm_fleet.vllm.extract.config_semantics) on small synthetic releases, one test per
construct; the committed table (vllm_fleet/vllm/data/config_semantics.json) read through ``semantics_for``; and the
table regenerated from the cached release sources, which must be byte-identical to the committed one.

A synthetic release is a modern layout (``vllm/config/{speculative,cache}.py`` behind ``vllm/config/__init__.py``,
pydantic dataclasses through ``vllm.config.utils.config``, ``EngineArgs`` in ``vllm/engine/arg_utils.py``); each
test replaces the files its construct lives in.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from vllm_fleet.vllm.config_semantics import semantics_for
from vllm_fleet.vllm.extract import releases
from vllm_fleet.vllm.extract.config_semantics import (
    ITEMS,
    ReleaseConfig,
    UndecidableConstruct,
    build_table,
    change_report,
    extract_version,
)
from vllm_fleet.vllm.extract.pysource import ReleaseSource, dump_json

DATA = Path(__file__).resolve().parents[2] / "vllm_fleet" / "vllm" / "data"
TABLE = DATA / "config_semantics.json"
FLAG_TABLE = DATA / "engine_args.json"

BASE: dict[str, str] = {
    "vllm/__init__.py": "",
    "vllm/config/__init__.py": """
        from vllm.config.cache import CacheConfig
        from vllm.config.speculative import SpeculativeConfig
        """,
    "vllm/config/utils.py": """
        from pydantic import ConfigDict
        from pydantic.dataclasses import dataclass

        def config(cls):
            return dataclass(cls, config=ConfigDict(extra="forbid"))
        """,
    "vllm/config/mtp.py": """
        from typing import Literal
        MTPModelTypes = Literal["deepseek_mtp", "mtp"]
        """,
    "vllm/config/speculative.py": """
        from dataclasses import field
        from typing import ClassVar, Literal

        from pydantic import Field

        from vllm.config.mtp import MTPModelTypes
        from vllm.config.utils import config

        EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]
        NgramTypes = Literal["ngram"]
        SpeculativeMethod = Literal["draft_model", EagleModelTypes] | NgramTypes

        @config
        class SpeculativeConfig:
            \"\"\"Speculative decoding.\"\"\"

            KIND: ClassVar[str] = "spec"
            num_speculative_tokens: int = Field(default=None, gt=0)
            method: SpeculativeMethod | None = None
            model: str | None = None
            tensor_parallel_size: int | None = None
            \"\"\"Pass draft_tensor_parallel_size instead.\"\"\"
            old_knob: float = 1.0
            \"\"\"Deprecated and has no effect.\"\"\"
            gone_knob: int | None = Field(default=None, deprecated="use model")
            custom_method: str | None = field(default=None, init=False)
            _resolved: bool = False

            def _verify(self):
                if self.tensor_parallel_size is not None:
                    raise ValueError("use draft_tensor_parallel_size")
        """,
    "vllm/config/cache.py": """
        from typing import ClassVar

        from pydantic import Field

        from vllm.config.utils import config

        @config
        class CacheConfig:
            DEFAULT_BLOCK_SIZE: ClassVar[int] = 64
            DEFAULT_GPU_MEMORY_UTILIZATION: ClassVar[float] = 0.92

            block_size: int = Field(default=None, gt=0)
            gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
            enable_extensible_kv_cache: bool = Field(default=None)

            def _apply_block_size_default(self):
                if self.block_size is None:
                    self.block_size = self.DEFAULT_BLOCK_SIZE
                return self

            @property
            def resolved_gpu_memory_utilization(self) -> float:
                \"\"\"The fraction, resolved.\"\"\"
                if self.gpu_memory_utilization is not None:
                    return self.gpu_memory_utilization
                if self.enable_extensible_kv_cache:
                    return 1.0
                return self.DEFAULT_GPU_MEMORY_UTILIZATION
        """,
    "vllm/config/vllm.py": """
        class VllmConfig:
            def _resolve_extensible_kv_cache(self):
                cache_config = self.cache_config
                if cache_config.enable_extensible_kv_cache is None:
                    cache_config.enable_extensible_kv_cache = self.supported()
        """,
    "vllm/v1/worker.py": """
        class Worker:
            def disable_extensible_kv_cache(self):
                self.cache_config.enable_extensible_kv_cache = False
        """,
    "vllm/engine/__init__.py": "",
    "vllm/engine/arg_utils.py": """
        from dataclasses import dataclass

        from vllm.config import CacheConfig

        @dataclass
        class EngineArgs:
            block_size: int | None = None
            gpu_memory_utilization: float | None = CacheConfig.gpu_memory_utilization
            enable_extensible_kv_cache: bool | None = CacheConfig.enable_extensible_kv_cache
        """,
}

#: An 0.8.2-like release: one vllm/config.py, a plain CacheConfig whose __init__ requires its arguments (the
#: defaults are EngineArgs'), a std dataclass SpeculativeConfig with a str method, the CUDA platform's block size.
OLD: dict[str, str] = {
    "vllm/__init__.py": "",
    "vllm/config.py": """
        from dataclasses import dataclass, field
        from typing import Optional

        class CacheConfig:
            def __init__(self, block_size: int, gpu_memory_utilization: float, swap_space: float = 4) -> None:
                self.block_size = block_size

        @dataclass
        class SpeculativeConfig:
            num_speculative_tokens: int = field(default=None, init=True)
            method: Optional[str] = None
            model: Optional[str] = None

            def __post_init__(self):
                if self.method in ("ngram", "[ngram]"):
                    self.method = "ngram"
                elif self.model is not None:
                    self.method = "eagle" if "eagle" in self.model else "draft_model"
        """,
    "vllm/engine/__init__.py": "",
    "vllm/engine/arg_utils.py": """
        from dataclasses import dataclass
        from typing import Optional

        @dataclass
        class EngineArgs:
            block_size: Optional[int] = None
            gpu_memory_utilization: float = 0.90
        """,
    "vllm/platforms/__init__.py": "",
    "vllm/platforms/cuda.py": """
        class CudaPlatformBase:
            @classmethod
            def check_and_update_config(cls, vllm_config):
                cache_config = vllm_config.cache_config
                if cache_config and cache_config.block_size is None:
                    cache_config.block_size = 16
        """,
}


def release(files: dict[str, str] | None = None, base: dict[str, str] = BASE, version: str = "0.0.1") -> ReleaseSource:
    texts = {path: textwrap.dedent(text) for path, text in {**base, **(files or {})}.items()}
    return ReleaseSource(version, texts, artefact="fake.tar.gz")


def read(files: dict[str, str] | None = None, base: dict[str, str] = BASE) -> ReleaseConfig:
    return extract_version(release(files, base))


def replace_in(path: str, old: str, new: str, base: dict[str, str] = BASE) -> dict[str, str]:
    text = textwrap.dedent(base[path])
    old = textwrap.dedent(old).strip("\n")
    assert old in text, old
    return {path: text.replace(old, textwrap.dedent(new).strip("\n"))}


# -- speculative keys -------------------------------------------------------------------------------------------


def test_keys_are_the_init_fields_without_classvars_private_or_init_false_ones() -> None:
    keys = read().items["speculative_keys"]
    assert keys["value"] == [
        "gone_knob",
        "method",
        "model",
        "num_speculative_tokens",
        "old_knob",
        "tensor_parallel_size",
    ]
    assert keys["source"] == "vllm/config/speculative.py:SpeculativeConfig"


def test_a_deprecated_docstring_or_field_marks_a_key_and_a_refused_key_is_rejected() -> None:
    keys = read().items["speculative_keys"]
    assert keys["deprecated"] == ["gone_knob", "old_knob"]
    assert keys["rejected"] == ["tensor_parallel_size"]


def test_a_string_classvar_annotation_is_a_classvar() -> None:
    files = replace_in("vllm/config/speculative.py", 'KIND: ClassVar[str] = "spec"', 'KIND: "ClassVar[str]" = "spec"')
    assert "KIND" not in read(files).items["speculative_keys"]["value"]


def test_an_old_std_dataclass_in_one_config_module_is_read_the_same_way() -> None:
    items = read(base=OLD).items
    assert items["speculative_keys"] == {
        "value": ["method", "model", "num_speculative_tokens"],
        "deprecated": [],
        "rejected": [],
        "source": "vllm/config.py:SpeculativeConfig",
    }


def test_a_field_whose_default_calls_an_unknown_function_is_undecidable() -> None:
    files = replace_in("vllm/config/speculative.py", "model: str | None = None", "model: str | None = make_field()")
    with pytest.raises(UndecidableConstruct, match=r"0\.0\.1: vllm/config/speculative\.py: SpeculativeConfig\.model"):
        read(files)


def test_a_non_literal_init_flag_is_undecidable() -> None:
    files = replace_in(
        "vllm/config/speculative.py",
        "custom_method: str | None = field(default=None, init=False)",
        "custom_method: str | None = field(default=None, init=FLAG)",
    )
    with pytest.raises(UndecidableConstruct, match=r"SpeculativeConfig\.custom_method: init=FLAG"):
        read(files)


def test_a_decorator_that_may_or_may_not_make_a_dataclass_is_undecidable() -> None:
    files = replace_in("vllm/config/speculative.py", "@config", "@attrs.define")
    files["vllm/config/speculative.py"] = "import attrs\n" + files["vllm/config/speculative.py"]
    with pytest.raises(UndecidableConstruct, match=r"@attrs\.define on SpeculativeConfig: unknown decorator"):
        read(files)


def test_fields_inherited_from_a_base_class_are_undecidable() -> None:
    files = replace_in("vllm/config/speculative.py", "class SpeculativeConfig:", "class SpeculativeConfig(Base):")
    with pytest.raises(UndecidableConstruct, match="has bases"):
        read(files)


def test_a_class_the_config_package_does_not_bind_is_an_error() -> None:
    files = {"vllm/config/__init__.py": "from vllm.config.cache import CacheConfig\n"}
    with pytest.raises(UndecidableConstruct, match=r"vllm\.config\.SpeculativeConfig: not bound"):
        read(files)


# -- speculative methods ----------------------------------------------------------------------------------------


def test_methods_resolve_a_union_of_nested_literal_aliases_across_modules() -> None:
    methods = read().items["speculative_methods"]
    assert methods["value"] == ["deepseek_mtp", "draft_model", "eagle", "eagle3", "mtp", "ngram"]
    assert methods["kind"] == "literal"
    assert methods["open"] is False
    assert methods["validated"] is True  # pydantic, through vllm.config.utils.config
    assert methods["source"] == "vllm/config/speculative.py:SpeculativeMethod"


def test_a_union_with_str_is_open() -> None:
    files = replace_in(
        "vllm/config/speculative.py", "method: SpeculativeMethod | None", "method: SpeculativeMethod | str | None"
    )
    methods = read(files).items["speculative_methods"]
    assert methods["open"] is True
    assert "ngram" in methods["value"]


def test_typing_union_and_optional_spellings_resolve_too() -> None:
    files = replace_in(
        "vllm/config/speculative.py",
        'SpeculativeMethod = Literal["draft_model", EagleModelTypes] | NgramTypes',
        'SpeculativeMethod = Union[Literal["draft_model", EagleModelTypes], NgramTypes]',
    )
    text = files["vllm/config/speculative.py"].replace(
        "from typing import ClassVar, Literal", "from typing import ClassVar, Literal, Optional, Union"
    )
    files["vllm/config/speculative.py"] = text.replace(
        "method: SpeculativeMethod | None", "method: Optional[SpeculativeMethod]"
    )
    assert read(files).items["speculative_methods"]["value"] == [
        "deepseek_mtp",
        "draft_model",
        "eagle",
        "eagle3",
        "mtp",
        "ngram",
    ]


def test_a_str_method_lists_the_values_the_class_compares_or_assigns() -> None:
    methods = read(base=OLD).items["speculative_methods"]
    assert methods == {
        "value": ["[ngram]", "draft_model", "eagle", "ngram"],
        "kind": "recognized",
        "open": True,
        "validated": False,  # a std dataclass does not check annotations
        "source": "vllm/config.py:SpeculativeConfig.method",
    }


def test_a_literal_built_from_a_call_is_undecidable() -> None:
    files = replace_in(
        "vllm/config/mtp.py", 'MTPModelTypes = Literal["deepseek_mtp", "mtp"]', "MTPModelTypes = Literal[tuple(NAMES)]"
    )
    with pytest.raises(UndecidableConstruct) as info:
        read(files)
    message = str(info.value)
    assert "vLLM 0.0.1" in message
    assert "vllm/config/mtp.py" in message
    assert "SpeculativeConfig.method -> SpeculativeMethod -> EagleModelTypes -> MTPModelTypes" in message
    assert "tuple(NAMES)" in message


def test_a_literal_alias_bound_only_under_type_checking_is_undecidable() -> None:
    files = {
        "vllm/config/mtp.py": """
            from typing import TYPE_CHECKING, Literal
            if TYPE_CHECKING:
                MTPModelTypes = Literal["mtp"]
            """
    }
    with pytest.raises(
        UndecidableConstruct, match=r"MTPModelTypes: imported by vllm/config/speculative\.py but not bound"
    ):
        read(files)


def test_a_non_literal_alias_is_undecidable() -> None:
    files = replace_in("vllm/config/speculative.py", 'NgramTypes = Literal["ngram"]', "NgramTypes = str")
    with pytest.raises(UndecidableConstruct, match="`str` cannot be resolved to a Literal"):
        read(files)


# -- block size ----------------------------------------------------------------------------------------------


def test_a_none_block_size_takes_the_class_constant_where_the_class_applies_it() -> None:
    assert read().items["block_size_default"] == {
        "value": 64,
        "declared": None,
        "DEFAULT_BLOCK_SIZE": 64,
        "resolved_in": "vllm/config/cache.py:CacheConfig._apply_block_size_default",
        "source": "vllm/config/cache.py:CacheConfig.block_size",
    }


def test_the_constant_may_be_applied_through_object_setattr() -> None:
    files = replace_in(
        "vllm/config/cache.py",
        "self.block_size = self.DEFAULT_BLOCK_SIZE",
        'object.__setattr__(self, "block_size", self.DEFAULT_BLOCK_SIZE)',
    )
    assert read(files).items["block_size_default"]["value"] == 64


def test_a_constant_never_applied_is_undecidable() -> None:
    files = replace_in("vllm/config/cache.py", "self.block_size = self.DEFAULT_BLOCK_SIZE", "self.block_size = 32")
    with pytest.raises(UndecidableConstruct, match="DEFAULT_BLOCK_SIZE: declared but never applied"):
        read(files)


def test_a_literal_block_size_default_is_the_value() -> None:
    files = replace_in(
        "vllm/config/cache.py", "block_size: int = Field(default=None, gt=0)", "block_size: int = Field(32, gt=0)"
    )
    files.update(
        replace_in(
            "vllm/engine/arg_utils.py", "block_size: int | None = None", "block_size: int = CacheConfig.block_size"
        )
    )
    item = read(files).items["block_size_default"]
    assert (item["value"], item["declared"], item["resolved_in"]) == (32, 32, None)


def test_without_a_constant_the_cuda_platform_decides_and_a_required_argument_reads_engine_args() -> None:
    assert read(base=OLD).items["block_size_default"] == {
        "value": 16,
        "declared": None,
        "DEFAULT_BLOCK_SIZE": None,
        "resolved_in": "vllm/platforms/cuda.py:CudaPlatformBase.check_and_update_config",
        "source": "vllm/engine/arg_utils.py:EngineArgs.block_size",
    }


def test_engine_args_disagreeing_with_cache_config_is_an_error() -> None:
    files = replace_in("vllm/engine/arg_utils.py", "block_size: int | None = None", "block_size: int | None = 16")
    with pytest.raises(UndecidableConstruct, match=r"EngineArgs\.block_size: EngineArgs default 16 differs"):
        read(files)


# -- GPU memory utilization -------------------------------------------------------------------------------------


def test_a_literal_gpu_memory_utilization_is_the_value() -> None:
    files = replace_in(
        "vllm/config/cache.py",
        "gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)",
        "gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)",
    )
    item = read(files).items["gpu_memory_utilization_default"]
    assert (item["value"], item["resolution"], item["resolved_in"]) == (0.9, None, None)
    assert item["DEFAULT_GPU_MEMORY_UTILIZATION"] == 0.92
    assert read(base=OLD).items["gpu_memory_utilization_default"]["value"] == 0.9


def test_a_none_gpu_memory_utilization_records_the_resolution_constants() -> None:
    assert read().items["gpu_memory_utilization_default"] == {
        "value": None,
        "DEFAULT_GPU_MEMORY_UTILIZATION": 0.92,
        "resolution": [{"when": "enable_extensible_kv_cache", "value": 1.0}, {"when": None, "value": 0.92}],
        "resolved_in": "vllm/config/cache.py:CacheConfig.resolved_gpu_memory_utilization",
        "source": "vllm/config/cache.py:CacheConfig.gpu_memory_utilization",
    }


def test_a_default_from_a_function_call_is_undecidable() -> None:
    files = replace_in(
        "vllm/config/cache.py",
        "gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)",
        "gpu_memory_utilization: float = Field(default=platform_fraction(), gt=0, le=1)",
    )
    with pytest.raises(UndecidableConstruct) as info:
        read(files)
    assert str(info.value).startswith(
        "vLLM 0.0.1: vllm/config/cache.py: CacheConfig.gpu_memory_utilization: `platform_fraction()` is not a literal"
    )


def test_a_computed_resolution_is_undecidable() -> None:
    files = replace_in("vllm/config/cache.py", "return 1.0", "return measure()")
    with pytest.raises(UndecidableConstruct, match=r"CacheConfig\.resolved_gpu_memory_utilization: `measure\(\)`"):
        read(files)


def test_a_none_default_nothing_resolves_is_undecidable() -> None:
    files = replace_in(
        "vllm/config/cache.py",
        "if self.gpu_memory_utilization is not None:",
        "if self.gpu_memory_utilization:",
    )
    with pytest.raises(UndecidableConstruct, match="declared None and 0 CacheConfig methods resolve it"):
        read(files)


# -- extensible KV cache ------------------------------------------------------------------------------------------


def test_the_extensible_kv_cache_field_and_where_it_is_decided() -> None:
    assert read().items["extensible_kv_cache"] == {
        "value": {
            "field": "enable_extensible_kv_cache",
            "default": None,
            "resolved_in": ["vllm/config/vllm.py:VllmConfig._resolve_extensible_kv_cache"],
            "set_false_in": ["vllm/v1/worker.py:Worker.disable_extensible_kv_cache"],
        },
        "source": "vllm/config/cache.py:CacheConfig.enable_extensible_kv_cache",
    }


def test_no_extensible_kv_cache_field_is_an_absent_option() -> None:
    assert read(base=OLD).items["extensible_kv_cache"] == {"value": None, "source": None}


def test_an_unset_extensible_kv_cache_nothing_decides_is_undecidable() -> None:
    files = {"vllm/config/vllm.py": "class VllmConfig:\n    pass\n"}
    with pytest.raises(UndecidableConstruct, match="declared None and no function decides it"):
        read(files)


# -- the table and its report -----------------------------------------------------------------------------------


def test_rows_compact_equal_answers_and_the_report_names_each_change() -> None:
    old = ReleaseConfig("0.1.0", extract_version(release(version="0.1.0")).items)
    same = ReleaseConfig("0.1.1", extract_version(release(version="0.1.1")).items)
    files = replace_in(
        "vllm/config/speculative.py", 'NgramTypes = Literal["ngram"]', 'NgramTypes = Literal["ngram", "suffix"]'
    )
    files.update(replace_in("vllm/config/mtp.py", 'Literal["deepseek_mtp", "mtp"]', 'Literal["mtp"]'))
    new = ReleaseConfig("0.2.0", extract_version(release(files, version="0.2.0")).items)
    table = build_table([new, old, same])
    assert table["schema"] == 1
    assert table["generated_by"] == "tools/extract_vllm_config.py"
    assert table["versions"] == ["0.1.0", "0.1.1", "0.2.0"]
    assert [(r["since"], r["until"]) for r in table["speculative_methods"]] == [("0.1.0", "0.1.1"), ("0.2.0", "0.2.0")]
    assert [(r["since"], r["until"]) for r in table["block_size_default"]] == [("0.1.0", "0.2.0")]
    assert set(ITEMS) <= set(table)
    report = change_report(table)
    assert "  0.2.0: value: added suffix; removed deepseek_mtp" in report
    assert report[0] == "speculative_keys: 0.1.0 6 values (vllm/config/speculative.py:SpeculativeConfig)"


# -- the committed table -----------------------------------------------------------------------------------------


def test_the_committed_table_covers_the_flag_table_releases() -> None:
    table = json.loads(TABLE.read_text())
    assert table["schema"] == 1
    assert table["versions"] == json.loads(FLAG_TABLE.read_text())["versions"]
    key = releases.version_key
    for item in ITEMS:
        rows = table[item]
        covered = [v for r in rows for v in table["versions"] if key(r["since"]) <= key(v) <= key(r["until"])]
        assert covered == table["versions"], item  # every release in exactly one row, in order


def test_known_facts_read_from_the_committed_table() -> None:
    assert {"medusa", "mlp_speculator"} <= set(semantics_for("0.32.0").speculative_methods)
    assert not {"medusa", "mlp_speculator"} & set(semantics_for("0.33.0").speculative_methods)
    assert not semantics_for("0.24.0").accepts_speculative_key("use_heterogeneous_vocab")
    assert semantics_for("0.25.0").accepts_speculative_key("use_heterogeneous_vocab")
    assert semantics_for("0.33.0").accepts_speculative_key("use_heterogeneous_vocab")
    assert (semantics_for("0.33.0").block_size_default, semantics_for("0.34.0").block_size_default) == (16, 64)
    assert semantics_for("0.34.0").default_block_size_constant == 64
    assert semantics_for("0.19.1").gpu_memory_utilization_declared == 0.9
    assert semantics_for("0.20.0").gpu_memory_utilization_declared == 0.92


def test_the_reading_api_resolves_versions_and_answers_0_34() -> None:
    s34 = semantics_for("0.34.0")
    assert s34.has_extensible_kv_cache and s34.extensible_kv_cache_field == "enable_extensible_kv_cache"
    assert s34.extensible_kv_cache_default is None
    assert s34.gpu_memory_utilization_declared is None
    assert s34.gpu_memory_utilization_when_unset(extensible_kv_cache=True) == 1.0
    assert s34.gpu_memory_utilization_when_unset(extensible_kv_cache=False) == 0.92
    assert s34.speculative_methods_open and s34.accepts_speculative_method("my_plugin_method") is None
    assert not s34.accepts_speculative_key("tensor_parallel_size")  # a field, refused whenever set
    s33 = semantics_for("0.33.1")  # not extracted: the nearest lower release answers
    assert s33.version == "0.33.0" and not s33.has_extensible_kv_cache
    assert s33.gpu_memory_utilization_when_unset(extensible_kv_cache=True) == 0.92
    assert s33.accepts_speculative_method("medusa") is False
    assert semantics_for("0.8.2").speculative_methods_kind == "recognized"
    with pytest.raises(ValueError, match="outside the extracted"):
        semantics_for("0.7.0")


# -- regenerated from the cached releases ------------------------------------------------------------------------


def test_the_config_table_regenerates_byte_identical() -> None:
    versions: list[str] = json.loads(TABLE.read_text())["versions"]
    cache = releases.cache_root() / "py"
    missing = [v for v in versions if not (cache / f"{v}.zip").is_file()]
    if missing:
        pytest.skip(
            f"the source of {len(missing)} of the {len(versions)} recorded vLLM releases is not cached in {cache} "
            f"(first missing: {missing[0]}); `python3 tools/extract_vllm_flags.py` fetches them from PyPI"
        )
    results = [extract_version(ReleaseSource.from_zip(v, cache / f"{v}.zip")) for v in versions]
    assert dump_json(build_table(results)) + "\n" == TABLE.read_text()
