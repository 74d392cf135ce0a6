"""systemd's value syntax, in ONE place: what may go into templates/vllm.service.j2 and how the template escapes it.

Pure (no I/O). The role vllm_service checks the same rules (an assert before it writes the unit, with the same
message texts) and the template escapes with the same replacements (builtin Jinja2 ``replace`` chains), so the
stack-config validator can reject at ``pulumi preview`` exactly what the role would reject on the host.

Why (systemd.syntax(7), systemd.exec(5), systemd.unit(5); checked against systemd 252's parser):

* A newline, a carriage return and a NUL byte all end a unit-file line: a value carrying one would start a line
  of its own, e.g. ``ExecStartPre=+/bin/sh ...`` (runs as root). Control characters are therefore rejected in
  every free value, and the template turns the three line breakers into the inert text ``\\n``, ``\\r``, ``\\x00``.
* ``%`` starts a specifier (``%h``, ``%n``, ...) in Environment=, ReadWritePaths=, ExecStart=, User=, ... : the
  template writes ``%%``. ExecStart= also expands ``$NAME``: the template writes ``$$``.
* Environment= and ReadWritePaths= values are written inside double quotes: ``\\`` -> ``\\\\``, ``"`` -> ``\\"``.
  Environment= then C-unescapes; ReadWritePaths= only unquotes. Either way systemd reads back exactly the value.
* Paths written unquoted (ExecStart=, LoadCredential=, ReadOnlyPaths=) may not hold whitespace, quotes or
  backslashes; user and group names are plain names; instance names are lower-case words.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INSTANCE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
ACCOUNT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
DEVICE_ALLOW_RE = re.compile(r"^[^\s\"'\\]+( +[rwm]{1,3})?$")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
UNQUOTED_PATH_BAD_RE = re.compile(r"[\s\"'\\]")

_CONTROL_NAMES = {
    "\x00": "a NUL byte (\\0)",
    "\t": "a tab (\\t)",
    "\n": "a newline (\\n)",
    "\r": "a carriage return (\\r)",
    "\x7f": "a DEL character (\\x7f)",
}

CONTROL_REASON = "control characters are not allowed in a systemd unit (a line break would start a new directive)"
ENV_NAME_REASON = "is not a valid environment variable name (letters, digits and _, not starting with a digit)"
INSTANCE_REASON = "is not a lower-case name (a-z, 0-9, _ and -, not starting with _ or -)"
UNQUOTED_PATH_REASON = (
    "must be an absolute path without whitespace, quotes or backslashes "
    "(the unit uses it unquoted in ExecStart=, LoadCredential= and ReadOnlyPaths=)"
)


def describe_control(char: str) -> str:
    """'a newline (\\n)', 'a control character (\\x1b)', ...: how messages name a control character."""
    return _CONTROL_NAMES.get(char, f"a control character (\\x{ord(char):02x})")


def control_character(value: str) -> str | None:
    """The first control character (U+0000-U+001F, U+007F) of ``value``, described; None if there is none."""
    m = CONTROL_RE.search(value)
    return describe_control(m.group(0)) if m else None


def value_problem(value: object) -> str | None:
    """Why ``value`` cannot be a systemd unit value (it holds a control character); None if it can."""
    found = control_character(str(value))
    return f"contains {found}; {CONTROL_REASON}" if found else None


def env_name_problem(name: object) -> str | None:
    """Why ``name`` is not a POSIX environment variable name; None if it is."""
    text = str(name)
    if CONTROL_RE.search(text):
        return value_problem(text)
    return None if ENV_NAME_RE.fullmatch(text) else ENV_NAME_REASON


def path_problem(path: object) -> str | None:
    """Why ``path`` cannot be a ReadWritePaths= entry; None if it can.

    An absolute path, optionally prefixed by ``-`` (ignore it when missing), ``+`` (relative to RootDirectory=)
    or ``-+`` (both), as systemd.exec(5) allows; without control characters or ``..`` components (systemd
    ignores a path that is not normalized). Spaces, quotes, backslashes, ``%`` and unicode are fine: the
    template quotes and escapes them.
    """
    if not isinstance(path, str):
        return "is not a string"
    if problem := value_problem(path):
        return problem
    bare = path[2:] if path.startswith("-+") else path[1:] if path[:1] in ("-", "+") else path
    if not bare.startswith("/"):
        return "is not an absolute path (it must start with /, optionally after a -, + or -+ prefix)"
    if ".." in bare.split("/"):
        return "has a .. component (systemd ignores a path that is not normalized)"
    return None


def unquoted_path_problem(path: object) -> str | None:
    """Why ``path`` cannot be a path the unit writes unquoted (venv, config dir, models dir, API key file)."""
    if not isinstance(path, str):
        return "is not a string"
    if problem := value_problem(path):
        return problem
    if not path.startswith("/") or UNQUOTED_PATH_BAD_RE.search(path) or ".." in path.split("/"):
        return UNQUOTED_PATH_REASON
    return None


def instance_problem(name: object) -> str | None:
    """Why ``name`` cannot be an instance name (unit vllm-<name>.service); None if it can."""
    text = str(name)
    if problem := value_problem(text):
        return problem
    return None if INSTANCE_RE.fullmatch(text) else INSTANCE_REASON


def account_problem(name: object) -> str | None:
    """Why ``name`` cannot be the User= or Group= of the unit; None if it can."""
    text = str(name)
    if problem := value_problem(text):
        return problem
    return None if ACCOUNT_RE.fullmatch(text) else "is not a plain user or group name (letters, digits, _, . and -)"


def device_allow_problem(entry: object) -> str | None:
    """Why ``entry`` cannot be a DeviceAllow= entry ("<device path or class> [rwm]"); None if it can."""
    text = str(entry)
    if problem := value_problem(text):
        return problem
    if DEVICE_ALLOW_RE.fullmatch(text):
        return None
    return "is not a DeviceAllow= entry (a device path or class without quotes, then optionally r, w and m)"


def problem_message(field: str, value: object, problem: str) -> str:
    """``<field>: "<value>" <problem>.``; a value holding a control character is not echoed (``the value``)."""
    shown = "the value" if CONTROL_RE.search(str(value)) else f'"{value}"'
    return f"{field}: {shown} {problem}."


def environment_problems(env: Mapping[object, object], field: str = "vllm_service_environment") -> list[str]:
    """Every problem of an extra-environment mapping, each naming ``field`` and the variable."""
    problems = []
    for name, value in env.items():
        if problem := env_name_problem(name):
            shown = "a name" if CONTROL_RE.search(str(name)) else f'the name "{name}"'
            problems.append(f"{field}: {shown} {problem}.")
        elif problem := value_problem(value):
            problems.append(problem_message(f"{field}.{name}", value, problem))
    return problems


def read_write_paths_problems(paths: Iterable[object], field: str = "vllm_service_read_write_paths") -> list[str]:
    """Every problem of a ReadWritePaths= list, each naming ``field`` and the entry's index."""
    return [
        problem_message(f"{field}[{i}]", path, problem)
        for i, path in enumerate(paths)
        if (problem := path_problem(path))
    ]


UNQUOTED_PATH_VARS = (
    "vllm_service_venv",
    "vllm_service_config_dir",
    "vllm_service_models_dir",
    "vllm_service_api_key_file",
    "vllm_service_sentinel_nvidia_smi",
)


def role_input_problems(role_vars: Mapping[str, object]) -> list[str]:
    """What a unit must not hold: the vllm_service role's check "Check the values written into the unit" is this
    function (plugins/filter/systemd_values.py), and the stack-config validator calls it too.

    ``role_vars``: the role's variables by name (vllm_service_instance, vllm_service_environment,
    vllm_service_read_write_paths, vllm_service_venv, vllm_service_config_dir, vllm_service_models_dir,
    vllm_service_api_key_file, vllm_service_user, vllm_service_group, vllm_service_device_allow,
    vllm_service_profile_name, vllm_service_vllm_version); missing ones are not checked.
    """
    problems: list[str] = []
    if "vllm_service_instance" in role_vars and (problem := instance_problem(role_vars["vllm_service_instance"])):
        problems.append(problem_message("vllm_service_instance", role_vars["vllm_service_instance"], problem))
    env = role_vars.get("vllm_service_environment")
    if isinstance(env, Mapping):
        problems += environment_problems(env)
    paths = role_vars.get("vllm_service_read_write_paths")
    if isinstance(paths, list | tuple):
        problems += read_write_paths_problems(paths)
    for name in UNQUOTED_PATH_VARS:
        value = role_vars.get(name)
        if value is None or (name in ("vllm_service_api_key_file", "vllm_service_sentinel_nvidia_smi") and value == ""):
            continue
        if problem := unquoted_path_problem(value):
            problems.append(problem_message(name, value, problem))
    for name in ("vllm_service_user", "vllm_service_group"):
        if name in role_vars and (problem := account_problem(role_vars[name])):
            problems.append(problem_message(name, role_vars[name], problem))
    devices = role_vars.get("vllm_service_device_allow")
    if isinstance(devices, list | tuple):
        for i, entry in enumerate(devices):
            if problem := device_allow_problem(entry):
                problems.append(problem_message(f"vllm_service_device_allow[{i}]", entry, problem))
    for name in ("vllm_service_profile_name", "vllm_service_vllm_version"):
        if name in role_vars and (problem := value_problem(role_vars[name])):
            problems.append(problem_message(name, role_vars[name], problem))
    listen = role_vars.get("vllm_service_sentinel_listen_address")
    if listen is not None and (problem := listen_address_problem(listen)):
        problems.append(problem_message("vllm_service_sentinel_listen_address", listen, problem))
    return problems


def listen_address_problem(value: object) -> str | None:
    """The sentinel's listen address is one word of its ExecStart=: an IP address, nothing else."""
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return "must be an IP address (0.0.0.0 for every IPv4 address, :: for every address)"
    return None if isinstance(value, str) else "must be a string"


# -- escaping: exactly the template's replace chains, in the same order ----------------------------------------


def _line_safe(text: str) -> str:
    """The three characters that end a unit-file line, as inert text (the role has rejected them already)."""
    return text.replace("\n", "\\n").replace("\r", "\\r").replace("\x00", "\\x00")


def escape_specifiers(text: str) -> str:
    """``%`` -> ``%%``: systemd resolves specifiers (%h, %n, ...) in most settings."""
    return text.replace("%", "%%")


def escape_quoted(value: object) -> str:
    """The inside of a double-quoted unit value (template macro ``sd_quoted``, without the quotes)."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return _line_safe(text)


def quote(value: object) -> str:
    """A double-quoted unit value, as Environment= and ReadWritePaths= are written."""
    return f'"{escape_quoted(value)}"'


def escape_word(value: object) -> str:
    """An unquoted word of an unquoting setting (ReadOnlyPaths=, CacheDirectory=, DeviceAllow=): macro ``sd_word``."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("'", "\\'").replace("%", "%%")
    return _line_safe(text)


def escape_exec_word(value: object) -> str:
    """An unquoted word of ExecStart= (also ``$`` -> ``$$``): macro ``sd_exec``."""
    return escape_word(value).replace("$", "$$")


def escape_raw(value: object) -> str:
    """A setting systemd does not unquote (User=, Group=, LoadCredential=, Description=, numbers): ``sd_raw``."""
    return _line_safe(escape_specifiers(str(value).replace("\\", "\\\\")))


def escape_comment(value: object) -> str:
    """Text inside a comment line (the unit's header): only the line breakers are neutralised (``sd_line``)."""
    return _line_safe(str(value))


def quote_env_assignment(name: object, value: object) -> str:
    """The unit line of one extra environment variable: ``Environment="NAME=VALUE"``, escaped."""
    return f"Environment={quote(f'{name}={value}')}"


def read_write_paths_line(path: object) -> str:
    """The unit line of one extra writable path: ``ReadWritePaths="PATH"``, escaped."""
    return f"ReadWritePaths={quote(path)}"
