"""Loading decode profiles (built-in names or YAML files) with errors that name the field and the fix."""

from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from vllm_fleet.catalog._data import list_dir, read_yaml
from vllm_fleet.profiles.model import DecodeProfile, ProfileLayoutWarning, lift_flat_layout, section_of
from vllm_fleet.trust.user_yaml import InputFileError, read_user_yaml
from vllm_fleet.trust.values import SECRET_NAMES, engine_arg_name
from vllm_fleet.vllm import flags, replacements


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a profile: where, and what to do about it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ProfileError(Exception):
    """A profile that cannot be used; ``problems`` lists every reason."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


def builtin_profile_names() -> list[str]:
    return [name.removesuffix(".yaml") for name in list_dir("profiles") if name.endswith(".yaml")]


def _unknown_key_hint(key: str, known: list[str], where: str) -> str:
    """Why a key is refused, and what to write instead (kubespray-style removed-variable check)."""
    section = section_of(key)
    if section is not None and not where:
        return f"set twice: flat here and as {section}.{key}; keep {section}.{key} and remove this one"
    if section is not None and section != where:
        return f"not a {where} field: it belongs in the {section!r} section, as {section}.{key}"
    if key == "api_key":
        try:
            engine_arg_name(key)
        except ValueError as err:
            return f"not a profile field: {err}"
    hint = replacements.instead(key)
    if hint is not None:
        gone = flags.removed_in(key)
        when = f"vLLM removed --{key.replace('_', '-')} in {gone}; " if gone else ""
        return f"not a profile field: {when}use {hint}"
    if flags.ever_known(key):
        return f"not a profile field; vLLM engine arguments without a field go under extra_args: {{{key}: …}}"
    close = difflib.get_close_matches(key, known, n=1)
    suggestion = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown field{suggestion} (profiles forbid unknown keys)"


def _known_fields(root: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    model: Any = root
    for part in (p for p in loc[:-1] if not isinstance(p, int)):
        field = model.model_fields.get(str(part)) if hasattr(model, "model_fields") else None
        if field is None:
            return []
        ann = field.annotation
        model = next((a for a in getattr(ann, "__args__", (ann,)) if hasattr(a, "model_fields")), None)
        if model is None:
            return []
    return list(model.model_fields)


def problems_from_validation(err: ValidationError, root: type[BaseModel] = DecodeProfile) -> list[Problem]:
    out: list[Problem] = []
    for e in err.errors():
        loc = tuple(e["loc"])
        field = ".".join(str(p) for p in loc if p != "[key]") or "(profile)"
        if e["type"] == "extra_forbidden":
            where = str(loc[0]) if len(loc) > 1 else ""
            out.append(Problem(field, _unknown_key_hint(str(loc[-1]), _known_fields(root, loc), where)))
        elif e["type"] == "missing":
            out.append(Problem(field, "required field is missing: add it"))
        else:
            msg = str(e["msg"]).removeprefix("Value error, ")
            out.append(Problem(field, f"{msg}{_shown(loc, e.get('input'))}"))
    return out


def _shown(loc: tuple[str | int, ...], value: Any) -> str:
    """The offending value for an error message: short scalars only, never a secret's."""
    if value is None or isinstance(value, dict | list | tuple):
        return ""
    if any(SECRET_NAMES.search(str(part)) for part in loc):
        return " (value hidden: it may be a secret)"
    text = repr(value)
    return f" (got {text if len(text) <= 80 else text[:77] + '...'})"


def parse_profile(data: Any, source: str) -> DecodeProfile:
    if not isinstance(data, dict):
        raise ProfileError(source, [Problem("(profile)", "a profile is a YAML mapping of field: value")])
    data, moved = lift_flat_layout(data)
    if moved:
        warnings.warn(ProfileLayoutWarning(source, moved), stacklevel=2)
    try:
        return DecodeProfile.model_validate(data)
    except ValidationError as err:
        raise ProfileError(source, problems_from_validation(err)) from None


def read_profile_file(path: Path) -> DecodeProfile:
    try:
        data = read_user_yaml(path)
    except InputFileError as err:
        raise ProfileError(err.source, [Problem(err.field, err.message)]) from None
    return parse_profile(data, str(path))


def load_profile(ref: str) -> DecodeProfile:
    """A built-in profile name, or a path to a profile YAML file."""
    if ref in builtin_profile_names():
        return parse_profile(read_yaml(f"profiles/{ref}.yaml"), f"builtin:{ref}")
    path = Path(ref)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        return read_profile_file(path)
    known = ", ".join(builtin_profile_names())
    raise ProfileError(ref, [Problem("--profile", f"no built-in profile or file {ref!r}; built-in: {known}")])


def builtin_profiles() -> list[DecodeProfile]:
    return [load_profile(name) for name in builtin_profile_names()]
