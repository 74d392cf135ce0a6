"""A stack's ``role_vars`` checked against the roles' own ``meta/argument_specs.yml``, before any host is touched.

The schema is not kept here: it is read (once) from the roles — every option of every entry point of every role
(preflight's ``playbooks`` entry point declares what the playbooks themselves read), with its type, ``choices``,
``elements`` and ``required`` — plus preflight's ``vars/main.yml`` (removed variables, the variables it checks,
version formats). The rules are here, in one language: ``pulumi preview`` and ``vllm-fleet validate`` call them,
and so does the preflight role on each host's final variables (:func:`preflight_problems`, through the filter in
``plugins/filter/preflight.py``), so both refuse the same values in the same words.

* :func:`role_var_problems` — each role variable on its own: unknown or misspelt (with the closest real name),
  removed (with the release and what to use instead), one vllm-fleet computes from the host's profile, a
  wrong type (a quoted ``"false"``), a value outside ``choices``, a version that is not exact.
* :func:`required_problems` — a host's effective variables as a whole: what preflight requires (the driver's and
  the toolkit's pins) and its cross-variable rules.
* :func:`preflight_problems` — the preflight role's check: both of the above on the variables it reads.

Values are never echoed beyond ~40 characters, and never for options whose name looks like a secret.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vllm_fleet.catalog import load_hardware
from vllm_fleet.fleet.plan import ConvergeInput
from vllm_fleet.gpu_host.kernel_modules import architectures, choose_flavour
from vllm_fleet.models.staging import models_problems
from vllm_fleet.profiles.loader import Problem
from vllm_fleet.project.paths import project_root
from vllm_fleet.trust.values import SECRET_NAMES

TYPES = ("str", "bool", "int", "float", "list", "dict", "path", "raw")
"""The argument_specs types the schema knows; any other type is checked as ``raw`` (not at all)."""

_FROM_PROFILE = "set by vllm-fleet from the host's profile; change the profile (e.g. its vllm_version) instead"
COMPUTED: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "vllm_version",
            "vllm_config",
            "vllm_config_hash",
            "vllm_profile_name",
            "vllm_fleet_profile",
            "vllm_fleet_profile_data",
            "vllm_service_config",
            "vllm_service_vllm_version",
            "vllm_service_profile_name",
        ),
        _FROM_PROFILE,
    ),
    "vllm_fleet_hardware": "set by vllm-fleet from the host's hardware; change the host's hardware instead",
    "vllm_fleet_system_digest": (
        "set by vllm-fleet from the roles and the host's inputs (a host that matches it only rolls the server); "
        "set vllm_fleet_full_converge: true to run every role instead"
    ),
    **dict.fromkeys(
        ("vllm_service_canary_command", "vllm_service_canary_baseline", "vllm_service_canary_url"),
        "set by vllm-fleet from the stack's rollout.analysis for a rollout's canary (the first batch against the "
        "later ones); set rollout.analysis (or rollout.yml's vllm_fleet_canary_command) instead",
    ),
    "vllm_service_api_key": (
        "set by vllm-fleet from the stack's apiKey secret (role_vars are not secret); "
        "use `pulumi config set --secret apiKey` instead"
    ),
}
"""Variables role_vars must not set, with the reason: vllm-fleet sets them for every host from its profile and
hardware (``extravars``) or from the apiKey secret, or (vllm_fleet_profile, vllm_service_*) setting them
would bypass the host's validated profile."""

HARDWARE_DEFAULTS = (
    "vllm_fleet_nvidia_driver",
    "vllm_fleet_cuda_toolkit",
    "nvidia_driver_gpu_architecture",
    "nvidia_driver_nvswitch",
)
"""Variables ``extravars`` derives from the host's hardware that role_vars MAY override (the lab does)."""

# The rules for the variables a decode profile provides (not expressible in argument_specs): the component, the
# variable reported, the variables any one of which satisfies it, and the message.
_PROFILE_PROVIDED: Mapping[str, tuple[str, tuple[str, ...], str]] = {
    "vllm": (
        "vllm_version",
        ("vllm_version", "vllm_fleet_profile"),
        "missing; set it, or vllm_fleet_profile (the profile's vllm_version pin is used)",
    ),
    "vllm_service": (
        "vllm_fleet_profile",
        ("vllm_config", "vllm_fleet_profile"),
        "missing; name a built-in decode profile or a profile file (or pass a rendered vllm_config)",
    ),
}

_CROSS_READS = (
    "preflight_components",
    "nvidia_driver_branch",
    "nvidia_driver_version",
    "nvidia_driver_gpu_architecture",
    "nvidia_driver_kernel_modules",
    "vllm_package",
    "vllm_pip_steps",
    "vllm_pip_lock_url",
    "vllm_pip_lock_sha256",
)
"""The variables :func:`required_problems`'s cross-variable rules read (beyond the required ones and the gates)."""

_TEMPLATE = re.compile(r"{{|{%")
_TRUE_WORDS = ("yes", "on", "1", "true")


@dataclass(frozen=True)
class RoleOption:
    """One option of one role's argument_specs (the first declaration when several entry points share it)."""

    name: str
    role: str
    entry_point: str
    type: str
    elements: str | None
    choices: tuple[Any, ...] | None
    required: bool
    default: Any
    description: str


@dataclass(frozen=True)
class RemovedVariable:
    name: str
    release: str
    instead: str


@dataclass(frozen=True)
class VersionFormat:
    name: str
    pattern: str
    example: str


@dataclass(frozen=True)
class RoleSchema:
    """Everything the checks read from the roles."""

    options: Mapping[str, RoleOption]
    declarations: Mapping[str, tuple[RoleOption, ...]]
    """Every declaration of each option (a name may be an option of several entry points)."""
    removed: Mapping[str, RemovedVariable]
    formats: Mapping[str, VersionFormat]
    preflight_checked: tuple[str, ...]
    """The variables whose values preflight checks (its booleans, choices and formats), by their argument_specs."""
    components: tuple[str, ...]
    """preflight_components' choices, in order: the roles whose required variables preflight checks."""
    default_components: tuple[str, ...]
    """preflight_components' default (roles/preflight/defaults/main.yml)."""
    builtin_recipes: tuple[str, ...]
    """vllm_package values with a built-in install recipe (the vllm role's _vllm_builtin_pip_steps)."""

    def required(self, role: str) -> list[RoleOption]:
        """The required options of a role's main entry point, in the order the role declares them."""
        return [
            o
            for decls in self.declarations.values()
            for o in decls
            if o.role == role and o.entry_point == "main" and o.required
        ]


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _description(spec: Mapping[str, Any]) -> str:
    desc = spec.get("description") or ""
    return " ".join(desc) if isinstance(desc, list) else str(desc)


def load_role_schema(roles_dir: Path) -> RoleSchema:
    """Read the schema from a roles directory (uncached; :func:`role_schema` caches the project's)."""
    declarations: dict[str, list[RoleOption]] = {}
    for specs_file in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        role = specs_file.parent.parent.name
        entry_points: Mapping[str, Any] = (_yaml(specs_file) or {}).get("argument_specs") or {}
        # main first: its declaration is the one reported when entry points share a name.
        for entry_point in sorted(entry_points, key=lambda e: (e != "main", e)):
            for name, spec in ((entry_points[entry_point] or {}).get("options") or {}).items():
                spec = spec or {}
                kind = str(spec.get("type", "str"))
                choices = spec.get("choices")
                declarations.setdefault(name, []).append(
                    RoleOption(
                        name=name,
                        role=role,
                        entry_point=entry_point,
                        type=kind if kind in TYPES else "raw",
                        elements=spec.get("elements"),
                        choices=tuple(choices) if choices else None,
                        required=bool(spec.get("required", False)),
                        default=spec.get("default"),
                        description=_description(spec),
                    )
                )
    preflight = roles_dir / "preflight"
    pvars = _yaml(preflight / "vars" / "main.yml") or {}
    removed = {
        e["name"]: RemovedVariable(e["name"], str(e["release"]), str(e["instead"]))
        for e in pvars.get("_preflight_removed_variables") or []
    }
    formats = {
        name: VersionFormat(name, str(pattern), str(example))
        for name, pattern, example in pvars.get("_preflight_formats") or []
    }
    checked = [*(pvars.get("_preflight_booleans") or []), *(pvars.get("_preflight_choices") or []), *formats]
    components_opt = declarations["preflight_components"][0]
    defaults = _yaml(preflight / "defaults" / "main.yml") or {}
    vllm_vars = _yaml(roles_dir / "vllm" / "vars" / "main.yml") or {}
    return RoleSchema(
        options={name: decls[0] for name, decls in declarations.items()},
        declarations={name: tuple(decls) for name, decls in declarations.items()},
        removed=removed,
        formats=formats,
        preflight_checked=tuple(dict.fromkeys(str(name) for name in checked)),
        components=tuple(components_opt.choices or ()),
        default_components=tuple(defaults.get("preflight_components") or components_opt.default or ()),
        builtin_recipes=tuple(vllm_vars.get("_vllm_builtin_pip_steps") or ()),
    )


@functools.cache
def _cached_schema(roles_dir: Path) -> RoleSchema:
    return load_role_schema(roles_dir)


def role_schema(roles_dir: Path | None = None) -> RoleSchema:
    """The schema of the project's roles (``<project root>/roles``), read once per process."""
    return _cached_schema((roles_dir or project_root() / "roles").resolve())


# ---------------------------------------------------------------------------------------------------------------
# Showing values (never long, never secret)


def _truncate(text: str, length: int = 40, end: str = "...", leeway: int = 5) -> str:
    """Jinja's ``truncate(40)`` (word boundary, leeway 5): the length every message shows a value at."""
    if len(text) <= length + leeway:
        return text
    return text[: length - len(end)].rsplit(" ", 1)[0] + end


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null (an empty value)"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def _shown(name: str, value: Any) -> str:
    """A value as a message may show it: short scalars as YAML/JSON would write them, containers by kind."""
    if SECRET_NAMES.search(name):
        return f"{_kind(value)} (not shown: {name} may be a secret)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and len(repr(value)) <= 40:
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(_truncate(value), ensure_ascii=False)
    return _kind(value)


def _plain(value: Any) -> str:
    """A value shown bare (not quoted), truncated like the quoted ones."""
    return _truncate(str(value))


# ---------------------------------------------------------------------------------------------------------------
# Types

_WANTED = {
    "str": "a string",
    "path": "a string (a path)",
    "bool": "a YAML boolean (true/false, unquoted)",
    "int": "an integer (unquoted)",
    "float": "a number (unquoted)",
    "list": "a list",
    "dict": "a mapping",
}
_PLURAL = {
    "str": "strings",
    "path": "paths",
    "bool": "booleans",
    "int": "integers",
    "float": "numbers",
    "dict": "mappings",
    "list": "lists",
}


def _is_type(kind: str, value: Any) -> bool:
    if kind == "raw":
        return True
    if kind in ("str", "path"):
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list | tuple)
    if kind == "dict":
        return isinstance(value, Mapping)
    return True


def _wanted(kind: str, elements: str | None = None) -> str:
    if kind == "list" and elements:
        return f"a list of {_PLURAL.get(elements, elements)}"
    return _WANTED.get(kind, kind)


def _type_problem(field: str, name: str, kind: str, elements: str | None, value: Any) -> Problem:
    got = _shown(name, value)
    if kind in ("str", "path") and isinstance(value, bool | int | float):
        # YAML reads 12.10 as the number 12.1 and yes as true: a version or word must be quoted.
        return Problem(field, f"must be {_wanted(kind)}, got {got}; quote it")
    return Problem(field, f"must be {_wanted(kind, elements)}, got {got}")


def _is_template(value: Any) -> bool:
    """A Jinja template, which Ansible evaluates on the host: its type is only known there (preflight checks it)."""
    return isinstance(value, str) and _TEMPLATE.search(value) is not None


def _value_problems(field: str, option: RoleOption, value: Any, schema: RoleSchema) -> list[Problem]:
    name = option.name
    if _is_template(value):
        return []
    if not _is_type(option.type, value):
        return [_type_problem(field, name, option.type, option.elements, value)]
    problems: list[Problem] = []
    items: Sequence[Any] = list(value) if option.type == "list" else [value]
    if option.type == "list" and option.elements:
        for i, item in enumerate(items):
            if not _is_template(item) and not _is_type(option.elements, item):
                problems.append(_type_problem(f"{field}[{i}]", name, option.elements, None, item))
        if problems:
            return problems
    if option.choices is not None:
        allowed = ", ".join(str(c) for c in option.choices)
        for i, item in enumerate(items):
            if not _is_template(item) and item not in option.choices:
                where = f"{field}[{i}]" if option.type == "list" else field
                problems.append(Problem(where, f"{_shown(name, item)} is not one of {allowed}"))
    fmt = schema.formats.get(name)
    if fmt is not None and isinstance(value, str) and not re.match(fmt.pattern, value):
        problems.append(Problem(field, f"{_shown(name, value)} is not an exact version such as {fmt.example}"))
    rule = _VALUE_RULES.get(name)
    if rule is not None:
        problems += [Problem(f"{field}{where}", message) for where, message in rule(value)]
    return problems


_VALUE_RULES: dict[str, Callable[[Any], list[tuple[str, str]]]] = {"vllm_models": models_problems}
"""Rules of one variable's value beyond its type and choices: (where inside it, message)."""


# ---------------------------------------------------------------------------------------------------------------
# The checks


def _field(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _unknown(name: str, schema: RoleSchema) -> str:
    known = list(schema.options)
    close = difflib.get_close_matches(name, known, n=1) or difflib.get_close_matches(
        name.lower().replace("-", "_").replace(" ", "_"), known, n=1
    )
    if close:
        return f"no role reads this variable; did you mean {close[0]}?"
    return "no role reads this variable; the variables that exist are the options in roles/*/meta/argument_specs.yml"


def role_var_problems(
    role_vars: Mapping[str, Any], prefix: str = "role_vars", *, computed: Mapping[str, str] = COMPUTED
) -> list[Problem]:
    """Every problem of each role variable on its own (see the module docstring); empty when all are fine.

    ``computed``: the variables refused because vllm-fleet sets them, with the reason (default: a stack's
    role_vars; an Ansible inventory, where vllm_version or vllm_config may be set by hand, passes ``{}`` or less).
    """
    schema = role_schema()
    problems: list[Problem] = []
    for key, value in role_vars.items():
        name = str(key)
        field = _field(prefix, name)
        if name in computed:
            problems.append(Problem(field, computed[name]))
        elif name in schema.removed:
            gone = schema.removed[name]
            problems.append(Problem(field, f"not read since vllm-fleet {gone.release}; use {gone.instead}"))
        elif name not in schema.options:
            problems.append(Problem(field, _unknown(name, schema)))
        else:
            problems += _value_problems(field, schema.options[name], value, schema)
    return problems


def _ansible_bool(value: Any) -> bool:
    """Ansible's ``bool`` filter."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        value = value.lower()
    return value in (*_TRUE_WORDS, 1)


def _hint(option: RoleOption) -> str:
    """What to set: the choices, or the description ("Exact driver version, e.g. ….")."""
    if option.choices:
        *first, last = (str(c) for c in option.choices)
        return f"{', '.join(first)} or {last}" if first else last
    text = option.description.strip().rstrip(".")
    return "the " + text[:1].lower() + text[1:]


def required_problems(effective_vars: Mapping[str, Any], prefix: str = "role_vars") -> list[Problem]:
    """What the preflight role would refuse for a host with these variables (vllm-fleet's computed variables merged
    with role_vars): the required variables of each component it checks, and the cross-variable rules.

    With ``prefix=""`` each problem's ``str()`` is the line the preflight role shows.
    """
    schema = role_schema()
    v = effective_vars
    components = v.get("preflight_components", schema.default_components)
    if not isinstance(components, list | tuple):
        components = schema.default_components
    problems: list[Problem] = []
    for component in schema.components:
        if component not in components:
            continue
        gate = schema.options.get(f"vllm_fleet_{component}")
        if gate is not None and not _ansible_bool(v.get(gate.name, gate.default)):
            continue
        rule = _PROFILE_PROVIDED.get(component)
        for option in schema.required(component):
            if rule is not None and option.name == rule[0]:
                continue
            if option.name not in v:
                problems.append(Problem(_field(prefix, option.name), f"missing; set {_hint(option)}"))
        if rule is not None:
            name, any_of, message = rule
            if not any(n in v for n in any_of):
                problems.append(Problem(_field(prefix, name), message))
    return problems + cross_problems(v, prefix)


def cross_problems(v: Mapping[str, Any], prefix: str = "role_vars") -> list[Problem]:
    """The rules between variables, each only when the variables it compares are given: the driver's branch and
    version, NVIDIA's kernel-module flavour rule, an install recipe for vllm_package, a lock with its sha256."""
    problems: list[Problem] = []
    branch, version = v.get("nvidia_driver_branch"), v.get("nvidia_driver_version")
    if (
        "nvidia_driver_branch" in v
        and "nvidia_driver_version" in v
        and str(branch)
        and str(version).split(".")[0] != str(branch)
    ):
        problems.append(
            Problem(
                _field(prefix, "nvidia_driver_branch"),
                f"{_plain(branch)} does not match nvidia_driver_version {_plain(version)}",
            )
        )
    architecture, requested = v.get("nvidia_driver_gpu_architecture"), v.get("nvidia_driver_kernel_modules", "auto")
    if architecture in architectures() and requested in ("auto", "open", "proprietary"):
        # NVIDIA's flavour rule (open on Volta, proprietary on Blackwell, a branch that dropped the architecture).
        choice = choose_flavour(architecture, requested, str(v.get("nvidia_driver_version", "")))
        if choice.problem:
            name, message = choice.problem.split(": ", 1)
            problems.append(Problem(_field(prefix, name), message))
    package = v.get("vllm_package")
    if (
        "vllm_package" in v
        and package not in role_schema().builtin_recipes
        and not v.get("vllm_pip_steps")
        and not str(v.get("vllm_pip_lock_url") or "")
    ):
        problems.append(
            Problem(
                _field(prefix, "vllm_package"),
                f"{_plain(package)} has no built-in install recipe; give vllm_pip_steps or vllm_pip_lock_url",
            )
        )
    if str(v.get("vllm_pip_lock_url") or ""):
        digest = str(v.get("vllm_pip_lock_sha256", ""))
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            problems.append(
                Problem(
                    _field(prefix, "vllm_pip_lock_sha256"),
                    f"{_shown('vllm_pip_lock_sha256', digest)} is not the sha256 of the file at vllm_pip_lock_url;"
                    " set the 64 lower-case hex digits `sha256sum` prints for it",
                )
            )
        if v.get("vllm_pip_steps"):
            problems.append(
                Problem(
                    _field(prefix, "vllm_pip_steps"),
                    "set with vllm_pip_lock_url, which replaces the install recipe; set only one of them",
                )
            )
    return problems


def value_problems(variables: Mapping[str, Any]) -> list[str]:
    """A role's own check of the variables it is given (defence in depth for a plain-Ansible user's ``-e``): each
    variable's rules (:func:`role_var_problems`: type, choices, format) and :func:`cross_problems`, one line each,
    the words the validator and preflight use. The roles call it as the ``role_value_problems`` filter."""
    return [str(p) for p in role_var_problems(variables, prefix="", computed={}) + cross_problems(variables, "")]


def preflight_reads(schema: RoleSchema | None = None) -> frozenset[str]:
    """Every variable :func:`preflight_problems` reads: the removed ones, those whose values it checks, the gates
    and required variables of every component, the profile-provided ones and the cross-variable rules' inputs."""
    schema = schema or role_schema()
    names = {*schema.removed, *schema.preflight_checked, *_CROSS_READS}
    for component in schema.components:
        names.add(f"vllm_fleet_{component}")
        names.update(o.name for o in schema.required(component))
    names.update(n for _reported, any_of, _message in _PROFILE_PROVIDED.values() for n in any_of)
    return frozenset(names)


def preflight_problems(host_vars: Mapping[str, Any]) -> list[str]:
    """The preflight role's check of one host's final variables (only those :func:`preflight_reads` names need be
    given): removed variables, the checked values (:func:`role_var_problems`'s rules), then
    :func:`required_problems` — one line per problem, as the role shows them."""
    schema = role_schema()
    checked = {n: host_vars[n] for n in (*schema.removed, *schema.preflight_checked) if n in host_vars}
    problems = role_var_problems(checked, prefix="", computed={}) + required_problems(host_vars, prefix="")
    return [str(p) for p in problems]


def extravars(node: ConvergeInput) -> dict[str, Any]:
    """Role variables for one node (what the converge passes to the roles): hardware facts, the rendered profile,
    then the fleet's role_vars. Pure: the fleet validator and the audit compute the same from the same input."""
    hw = load_hardware(node.host["hardware"])
    out: dict[str, Any] = {
        "vllm_fleet_hardware": hw.key,
        # No GPU, no NVIDIA stack (a lab overrides these through role_vars to exercise the roles on stand-ins).
        "vllm_fleet_nvidia_driver": hw.architecture != "cpu",
        "vllm_fleet_cuda_toolkit": hw.architecture != "cpu",
        "nvidia_driver_nvswitch": hw.nvswitch,
        "vllm_profile_name": node.profile,
        "vllm_version": node.vllm_version,
        "vllm_config": node.vllm_config,
        "vllm_config_hash": node.config_hash,
        # The effective profile (overrides applied), for the role's smoke-test hook.
        "vllm_fleet_profile_data": node.profile_data,
    }
    if node.system_digest:  # site.yml rolls only the server when the host's last full converge matches
        out["vllm_fleet_system_digest"] = node.system_digest
    if hw.architecture != "cpu":  # the driver role's choices are GPU architectures
        out["nvidia_driver_gpu_architecture"] = hw.architecture
    out.update(node.role_vars)
    return out


def role_default(name: str) -> Any:
    """A role variable's default, as its role's argument_specs declares it (the role's defaults/main.yml holds
    the same value: tests/roles check the two agree)."""
    return role_schema().options[name].default


def sentinel_port(role_vars: dict[str, object]) -> int | None:
    """The port of the nodes' sentinels under these role variables (the role's default unless set); None when
    the fleet turns them off."""
    if not role_vars.get("vllm_service_sentinel", role_default("vllm_service_sentinel")):
        return None
    return int(str(role_vars.get("vllm_service_sentinel_port", role_default("vllm_service_sentinel_port"))))
