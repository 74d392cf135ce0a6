"""Rewrite an old ``vllm serve …`` command line (such as the article's) into a decode profile.

Flags are recognised through the flag table (every release it covers), so the spelling, arity and booleans of
old releases are understood; arguments the target release removed are translated or dropped with a note.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from vllm_fleet.catalog import hardware_catalog, model_catalog
from vllm_fleet.profiles.loader import Problem, ProfileError, parse_profile
from vllm_fleet.profiles.model import DecodeProfile, section_of
from vllm_fleet.profiles.render import render
from vllm_fleet.vllm import flags, replacements
from vllm_fleet.vllm.config_semantics import semantics_for

_SPEC_FLAGS = {
    "speculative_model": "model",
    "num_speculative_tokens": "num_speculative_tokens",
    "speculative_draft_tensor_parallel_size": "draft_tensor_parallel_size",
    "ngram_prompt_lookup_max": "prompt_lookup_max",
    "ngram_prompt_lookup_min": "prompt_lookup_min",
}


@dataclass
class Migration:
    profile: DecodeProfile
    notes: list[str] = field(default_factory=list)

    def to_yaml(self) -> str:
        data = self.profile.model_dump(mode="json", exclude_defaults=True)
        data = {"name": data.pop("name"), **data}
        head = "".join(f"# {line}\n" for line in ["Migrated by `vllm-fleet migrate`.", *self.notes])
        return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def split_command(command: str) -> list[str]:
    """Tokens of a shell command line: comments dropped, backslash continuations joined, `vllm serve` cut."""
    lines = [re.sub(r"(^|\s)#.*$", "", line).rstrip() for line in command.splitlines()]
    joined = " ".join(line.removesuffix("\\").strip() for line in lines)
    try:
        tokens = shlex.split(joined)
    except ValueError as e:  # an unclosed quote
        raise ValueError(f"the command line: {e} (as a shell reads it); quote it as you would run it") from None
    if tokens[:2] == ["vllm", "serve"]:
        tokens = tokens[2:]
    elif tokens[:1] == ["vllm"]:
        raise ValueError("only `vllm serve` command lines can be migrated")
    return tokens


def _method_for(drafter: str) -> str:
    name = drafter.lower()
    if name in {"[ngram]", "ngram"}:
        return "ngram"
    if "eagle3" in name:
        return "eagle3"
    if "eagle" in name:
        return "eagle"
    return "draft_model"


_JSON_OBJECT = {"speculative_config"}
"""JSON flags whose value is an object (merged into a profile section)."""


def _coerce(spec: flags.ArgSpec, raw: str, name: str) -> Any:
    """The value of flag ``name``; ValueError naming the flag and the fix."""
    shown = repr(raw[:60])
    if spec.kind == "json":
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"{name} {shown}: not JSON ({e}); give a JSON object in single quotes") from None
        if spec.dest in _JSON_OBJECT and not isinstance(value, dict):
            raise ValueError(f'{name} {shown}: a JSON object is wanted, e.g. \'{{"method": "ngram"}}\'')
        return value
    if spec.type == "int":
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{name} {shown}: not a whole number") from None
    if spec.type == "float":
        try:
            number = float(raw)
        except ValueError:
            raise ValueError(f"{name} {shown}: not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"{name} {shown}: not a finite number")
        return number
    return raw


def parse_flags(tokens: list[str]) -> tuple[str | None, dict[str, Any]]:
    """(model, {dest: value}) using the newest spelling each flag had in any release."""
    model: str | None = None
    values: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-"):
            if model is not None:
                raise ValueError(f"unexpected argument {tok!r}")
            model = tok
            continue
        name, eq, inline = tok.partition("=")
        found = flags.find_option(name)
        if found is None:
            raise ValueError(f"{name} is not a vLLM argument in any release {flags.known_range()}")
        spec, negated = found
        if negated:
            values[spec.dest] = False
            continue
        if spec.kind in {"store_true", "boolean_optional"} and not eq:
            values[spec.dest] = True
            continue
        raw = inline if eq else tokens[i] if i < len(tokens) else None
        if raw is None:
            raise ValueError(f"{name} needs a value")
        if not eq:
            i += 1
        values[spec.dest] = _coerce(spec, raw, name)
    if model is None and "model" in values:
        model = str(values.pop("model"))
    return model, values


def _vocab_sizes_differ(target: str, drafter: str) -> bool:
    catalog = model_catalog()
    return target in catalog and drafter in catalog and catalog[target].vocab_size != catalog[drafter].vocab_size


def migrate(command: str, vllm_version: str, hardware: str, name: str | None = None) -> Migration:
    """Turn ``command`` into a profile pinned to ``vllm_version``. Raises ValueError or ProfileError."""
    known = hardware_catalog()
    if hardware not in known:
        raise ValueError(f"--hardware {hardware!r}: not in the hardware catalog; known: {', '.join(sorted(known))}")
    model, values = parse_flags(split_command(command))
    if model is None:
        raise ValueError("the command line names no model")
    notes: list[str] = []
    data: dict[str, Any] = {
        "name": name or re.sub(r"[^a-z0-9._-]+", "-", f"{hardware}-{model.split('/')[-1]}".lower()),
        "hardware": hardware,
        "vllm_version": vllm_version,
        "model": {"model": model},
    }
    spec: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for dest, value in values.items():
        if dest in _SPEC_FLAGS:
            spec[_SPEC_FLAGS[dest]] = value
            notes.append(f"--{dest.replace('_', '-')} -> speculative.{_SPEC_FLAGS[dest]}")
        elif dest == "speculative_config":
            spec.update(value)
        elif section_of(dest) and flags.arg_spec(vllm_version, dest) is None and flags.removed_in(dest):
            notes.append(
                f"dropped --{dest.replace('_', '-')} {value}: removed in vLLM {flags.removed_in(dest)}; "
                f"{replacements.instead(dest) or 'no replacement'}"
            )
        elif (section := section_of(dest)) is not None:
            data.setdefault(section, {})[dest] = value
        else:
            extra[dest] = value
    if spec:
        if "model" in spec and "method" not in spec:
            spec["method"] = _method_for(str(spec["model"]))
        if spec.get("method") == "ngram":
            spec.pop("model", None)
        if spec.get("method") == "draft_model" and _vocab_sizes_differ(model, str(spec.get("model"))):
            if semantics_for(vllm_version).accepts_speculative_key("use_heterogeneous_vocab"):
                spec.setdefault("use_heterogeneous_vocab", True)
                notes.append(
                    "speculative.use_heterogeneous_vocab: true -- the drafter's vocabulary size differs from the "
                    "target's, which vLLM refuses for draft_model without it"
                )
            else:
                notes.append(
                    f"the drafter's vocabulary size differs from the target's and vLLM {vllm_version} has no "
                    "use_heterogeneous_vocab: `vllm-fleet plan` names the fix (another drafter, eagle3 or ngram)"
                )
        data["speculative"] = spec
    if extra:
        data["extra_args"] = extra
    profile = parse_profile(data, "migrated command")
    render(profile)  # refuse to print a profile the target version cannot run
    return Migration(profile, notes)


__all__ = ["Migration", "Problem", "ProfileError", "migrate", "parse_flags", "split_command"]
