"""Render a decode profile into what one pinned vLLM version accepts: argv, a ``--config`` YAML, env.

Every argument is looked up in the flag table for that version (``data/engine_args.json``, extracted from the
releases): a profile section's field names are vLLM's dests, so the flag's spelling, kind and accepted values
all come from the table. A field the version lacks (vLLM removed or renamed it) is a problem naming the release
that removed it and what to use instead; nothing is emitted from memory.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

import jinja2

from vllm_fleet.profiles.loader import Problem, ProfileError
from vllm_fleet.profiles.model import SECTIONS, DecodeProfile, SpeculativeConfig, section_of
from vllm_fleet.project.paths import templates_dir
from vllm_fleet.vllm import config_semantics, flags, replacements

ARGV_ORDER = (
    "served_model_name",
    "host",
    "port",
    "dtype",
    "quantization",
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "kv_cache_dtype",
    "calculate_kv_scales",
    "swap_space",
    "block_size",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "enforce_eager",
    "speculative_config",
    "shutdown_timeout",
)
"""The order flags have been rendered in since before the profile sections: kept, so a deployed node's argv and
config file stay byte-identical (a reorder would restart every server for nothing). Only the order: the flags
themselves come from the profile's sections, whose field names are the dests. A dest not listed here (a new
section field) follows, in section order."""

DEFAULT_SHUTDOWN_TIMEOUT = 60
"""Seconds in-flight requests get on SIGTERM when the profile does not say (releases with --shutdown-timeout)."""

# Values that equal vLLM's own default are still rendered (explicit beats implicit in an audit), except these
# dests, whose "unset" value means "let vLLM decide".
_UNSET_MEANS_DEFAULT = {"enforce_eager": False, "dtype": "auto", "kv_cache_dtype": "auto"}


@dataclass(frozen=True)
class Rendered:
    """A profile rendered for one vLLM version."""

    vllm_version: str
    model: str
    args: dict[str, Any]
    """vLLM dest -> value, in render order (the model is separate)."""
    argv: list[str]
    """Arguments after ``vllm serve``: the model first, then the flags."""
    config: dict[str, Any]
    """The ``vllm serve --config`` mapping: dashed flag names -> values, ``model`` first."""


def section_args(profile: DecodeProfile) -> dict[str, tuple[str, Any]]:
    """dest -> (profile field path, value) for every flag the profile's sections set, in :data:`ARGV_ORDER`."""
    out: dict[str, tuple[str, Any]] = {}
    for name in SECTIONS:
        section = getattr(profile, name)
        if section is None:
            continue
        for dest, value in section.flag_values().items():
            if value is None or _UNSET_MEANS_DEFAULT.get(dest, object()) == value:
                continue
            out[dest] = (name if dest == SpeculativeConfig.dest else f"{name}.{dest}", value)
    rank = {dest: i for i, dest in enumerate(ARGV_ORDER)}
    return dict(sorted(out.items(), key=lambda item: rank.get(item[0], len(rank))))


def profile_args(profile: DecodeProfile) -> tuple[dict[str, tuple[str, Any]], list[Problem]]:
    """dest -> (profile field path, value) for every argument the profile sets: its sections, then extra_args."""
    out = section_args(profile)
    problems: list[Problem] = []
    for dest, value in profile.extra_args.items():
        section = section_of(dest)
        if section is not None:
            problems.append(Problem(f"extra_args.{dest}", f"set it in the profile as {section}.{dest} instead"))
            continue
        if dest == SpeculativeConfig.dest:
            problems.append(Problem(f"extra_args.{dest}", "set it as the profile's `speculative` section instead"))
            continue
        out[dest] = (f"extra_args.{dest}", value)
    return out, problems


def _missing(version: str, dest: str, field: str) -> Problem:
    flag = "--" + dest.replace("_", "-")
    gone = flags.removed_in(dest)
    if gone and flags.compare(version, gone) >= 0:
        advice = replacements.instead(dest) or "remove it"
        return Problem(field, f"vLLM {version} has no {flag}: removed in {gone}; instead: {advice}")
    first = flags.first_version(dest)
    if first:
        return Problem(field, f"vLLM {version} has no {flag}: it appeared in {first}; pin vllm_version >= {first}")
    return Problem(field, f"{flag} is not a vLLM engine argument in any known release; remove it")


def _check_value(version: str, spec: flags.ArgSpec, field: str, value: Any) -> Problem | None:
    # `metavar_choices`: values vLLM lists (Literal[...] | str) but argparse no longer enforces; vLLM's config
    # validation still refuses others, later and at start-up, so we refuse them here.
    allowed = spec.choices or spec.metavar_choices
    if allowed and spec.kind != "json" and str(value) not in {str(c) for c in allowed}:
        return Problem(field, f"{value!r} is not accepted by vLLM {version} {spec.flag}; choose one of {allowed}")
    if spec.kind == "store_true" and value is False:
        return Problem(field, f"vLLM {version} {spec.flag} can only be switched on; remove `{field}: false`")
    return None


def _argv_items(spec: flags.ArgSpec, value: Any) -> list[str]:
    if spec.kind == "boolean_optional":
        return [spec.flag] if value else [spec.negative_flag or "--no-" + spec.flag.removeprefix("--")]
    if spec.kind == "store_true":
        return [spec.flag] if value else []
    if isinstance(value, dict):
        return [spec.flag, json.dumps(value, separators=(",", ":"), sort_keys=False)]
    if isinstance(value, list | tuple):
        return [spec.flag, *(str(v) for v in value)]
    if isinstance(value, bool):
        return [spec.flag, "true" if value else "false"]
    return [spec.flag, str(value)]


def _config_items(spec: flags.ArgSpec, value: Any) -> dict[str, Any]:
    """One `--config` YAML entry, in the form every release's loader reads (engine_args_notes.md):
    dashed keys; `false` as `no-KEY: true` (loaders before 0.28.0 drop a plain false); mappings as a JSON string
    (loaders before 0.16.0 pass a Python repr)."""
    key = spec.flag.removeprefix("--")
    if spec.kind == "boolean_optional" and value is False:
        return {f"no-{key}": True}
    if isinstance(value, dict):
        return {key: json.dumps(value, separators=(",", ":"))}
    return {key: value}


def render(profile: DecodeProfile, vllm_version: str | None = None) -> Rendered:
    """Render ``profile`` for ``vllm_version`` (default: the profile's pin). Raises ProfileError."""
    version = vllm_version or profile.vllm_version
    try:
        table = flags.args_for(version)
    except ValueError as err:
        raise ProfileError(profile.name, [Problem("vllm_version", str(err))]) from None
    wanted, problems = profile_args(profile)
    if "shutdown_timeout" not in wanted and "shutdown_timeout" in table:
        wanted["shutdown_timeout"] = ("frontend.shutdown_timeout", DEFAULT_SHUTDOWN_TIMEOUT)  # vLLM's 0 aborts requests
    if "enable_server_load_tracking" in table:  # GET /load: the sentinel's in-flight count (a wedge needs it)
        wanted["enable_server_load_tracking"] = ("frontend.enable_server_load_tracking", True)
    args: dict[str, Any] = {}
    argv: list[str] = [profile.model.serve_model]
    config: dict[str, Any] = {"model": profile.model.serve_model}
    for dest, (field, value) in wanted.items():
        spec = table.get(dest)
        if spec is None:
            problems.append(_missing(version, dest, field))
            continue
        bad = _check_value(version, spec, field, value)
        if bad:
            problems.append(bad)
            continue
        args[dest] = value
        argv.extend(_argv_items(spec, value))
        config.update(_config_items(spec, value))
    if profile.speculative is not None and "speculative_config" in args:
        spec = args["speculative_config"]
        problems += [
            Problem(field, message)
            for field, message in config_semantics.speculative_problems(version, str(spec["method"]), list(spec))
        ]
    if problems:
        raise ProfileError(profile.name, problems)
    return Rendered(vllm_version=version, model=profile.model.serve_model, args=args, argv=argv, config=config)


# -- text outputs: the ONE template shared with the Ansible role ----------------------------------------------
def template_env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,  # as Ansible's template module, so both render the same bytes
        autoescape=False,  # noqa: S701 - renders YAML and systemd units, not HTML
    )


def config_yaml(profile: DecodeProfile, rendered: Rendered) -> str:
    """The ``vllm serve --config`` file, through templates/vllm-config.yaml.j2 (the role uses it too)."""
    return config_text(rendered.config, profile.name, rendered.vllm_version)


def config_text(config: dict[str, Any], profile_name: str, vllm_version: str) -> str:
    """The config file for a rendered mapping, byte for byte what the role writes (the same template)."""
    return (
        template_env()
        .get_template("vllm-config.yaml.j2")
        .render(vllm_config=config, vllm_profile_name=profile_name, vllm_version=vllm_version)
    )


def env_file(rendered: Rendered) -> str:
    """An EnvironmentFile: the whole command line, shell-quoted, for units that do not use --config."""
    return (
        f"VLLM_FLEET_VLLM_VERSION={rendered.vllm_version}\n"
        f"VLLM_FLEET_MODEL={shlex.quote(rendered.model)}\n"
        f"VLLM_FLEET_SERVE_ARGS={shlex.quote(shlex.join(rendered.argv))}\n"
    )
