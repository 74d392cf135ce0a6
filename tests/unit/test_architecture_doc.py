"""docs/architecture.md's module tables name every module and package of vllm_fleet/ exactly once, and nothing
that is not there: a module added, moved or removed without its row fails here, so the page cannot silently rot.

The tables are those whose header's first cell is ``module``; a row's first cell names one or more paths relative
to ``vllm_fleet/`` in backticks (``cli.py``, ``audit/collect.py``, ``audit/`` for a package and its
``__init__.py``). ``__init__.py`` and ``__main__.py`` are their package's row; private modules (``_data.py``) have
rows of their own like any other.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from vllm_fleet.project.paths import project_root

ROOT = project_root()
PACKAGE = ROOT / "vllm_fleet"
DOC = ROOT / "docs" / "architecture.md"
NAME = re.compile(r"`([^`]+)`")


def modules_on_disk() -> set[str]:
    """Every package (``audit/``) and every module but ``__init__``/``__main__`` (``audit/collect.py``)."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if "__pycache__" in rel.parts:
            continue
        if path.name == "__init__.py":
            if rel.parent != Path():
                found.add(f"{rel.parent.as_posix()}/")
        elif path.name != "__main__.py":
            found.add(rel.as_posix())
    return found


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def modules_in_doc(text: str) -> list[str]:
    """The paths the first cells of the module tables name, once per mention."""
    named: list[str] = []
    in_table = False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        first = cells(line)[0]
        if not in_table:
            in_table = first == "module"  # a header row starts a module table; other tables are skipped
            continue
        if set(first) <= set("-: "):
            continue  # the separator row
        row = cells(line)
        assert NAME.search(first), f"docs/architecture.md: a module-table row names no module: {line!r}"
        assert len(row) == 3 and all(row), f"docs/architecture.md: a module row needs its role and its I/O: {line!r}"
        named += NAME.findall(first)
    return named


def test_the_parser_reads_rows_and_skips_other_tables() -> None:
    text = (
        "| concern | the one place |\n|---|---|\n| x | `planner.py` |\n\n"
        "| module | role | I/O |\n|---|---|---|\n| `a.py`, `b/` | r | none |\n| `b/c.py` | r | none |\n"
    )
    assert modules_in_doc(text) == ["a.py", "b/", "b/c.py"]
    with pytest.raises(AssertionError, match="role and its I/O"):
        modules_in_doc("| module | role | I/O |\n|---|---|---|\n| `a.py` | r |  |\n")


def test_every_module_is_in_the_table_once_and_every_row_exists() -> None:
    on_disk = modules_on_disk()
    named = modules_in_doc(DOC.read_text(encoding="utf-8"))
    assert len(on_disk) > 50 and len(named) > 50, (len(on_disk), len(named))  # both sides really read
    missing = sorted(on_disk - set(named))
    gone = sorted(set(named) - on_disk)
    twice = sorted(name for name, n in Counter(named).items() if n > 1)
    assert not missing, f"docs/architecture.md: add a row (role, I/O) for {missing}"
    assert not gone, f"docs/architecture.md: rows name modules that do not exist: {gone}"
    assert not twice, f"docs/architecture.md: modules in more than one row: {twice}"


def contract_layers() -> list[str]:
    """The package layers of pyproject.toml's first import-linter contract, top down, ``vllm_fleet.`` dropped."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = config["tool"]["importlinter"]["contracts"][0]
    assert contract["type"] == "layers" and "containers" not in contract, contract
    return [layer.replace("vllm_fleet.", "") for layer in contract["layers"]]


def doc_layers(text: str) -> list[str]:
    """The second cells of the table under "## Layers, checked", backticks dropped, ``\\|`` read as ``|``."""
    section = text.split("## Layers, checked", 1)[1].split("\n## ", 1)[0]
    rows = [cells(line.replace("\\|", "\0")) for line in section.splitlines() if line.startswith("|")]
    assert rows and rows[0] == ["layer", "packages"], rows[:1]
    return [row[1].replace("`", "").replace("\0", "|") for row in rows[2:]]


def test_the_layers_table_is_the_import_contract() -> None:
    layers = contract_layers()
    assert len(layers) >= 10, layers  # the contract really read
    assert doc_layers(DOC.read_text(encoding="utf-8")) == layers


def test_every_package_is_in_a_layer() -> None:
    in_layers = {name.strip() for layer in contract_layers() for name in re.split(r"[|:]", layer)}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if not p.name.startswith("__")}
    top = packages | modules
    assert top == in_layers, f"not in a layer: {sorted(top - in_layers)}; naming nothing: {sorted(in_layers - top)}"
