"""What a string from a profile, a stack config or an inventory may contain, by where it ends up.

Each function takes the value and returns it unchanged, or raises ``ValueError`` with a message that says what
is wrong and what to write instead (pydantic turns it into ``field: message``). They are the schema's patterns:
a value that passes cannot become a second line of a unit or config, an ssh option, a shell word or a
template. (systemd's own value syntax lives in ``systemd_values``.)
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re

from vllm_fleet.trust.systemd_values import control_character

_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")
_DNS_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_POSIX_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_ENGINE_ARG = re.compile(r"^[a-z][a-z0-9_]*$")
_HOST_PORT = re.compile(r"^(?P<host>[^:\s]+):(?P<port>\d+)$")
HOST_KEY_TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
    "sk-ssh-ed25519@openssh.com",
)
SECRET_NAMES = re.compile(r"key|secret|token|password|passphrase", re.IGNORECASE)
"""Fields whose values are never repeated in an error message."""


def plain_text(value: str) -> str:
    bad = control_character(value)
    if bad:
        raise ValueError(f"contains {bad}: write it on one line, without control characters")
    return value


def _absolute_path(value: str) -> str:
    plain_text(value)
    if not value.startswith("/"):
        raise ValueError("not an absolute path")
    if ".." in value.split("/"):
        raise ValueError("a path with '..' in it: write the real absolute path")
    return value


def model_ref(value: str) -> str:
    """A Hugging Face id (``org/name``) or an absolute path of a model directory."""
    if value.startswith("/"):
        return _absolute_path(value)
    if _HF_ID.match(value) and ".." not in value:
        return value
    raise ValueError(
        "not a Hugging Face id (org/name: letters, digits, '.', '_', '-') nor an absolute path of a model "
        "directory; write e.g. Qwen/Qwen2.5-7B-Instruct or /opt/vllm-fleet/models/<name>"
    )


def served_name(value: str) -> str:
    if _SERVED_NAME.match(value):
        return value
    raise ValueError(
        "a served model name is up to 128 letters, digits and . _ : / @ + - (starting with a letter or digit); "
        "write e.g. qwen2.5-7b or Qwen/Qwen2.5-7B-Instruct"
    )


def _port_hint(value: str, port_field: str) -> None:
    m = _HOST_PORT.match(value)
    if m:
        raise ValueError(f"the port goes in its own field: write {m['host']!r} here and {port_field}: {m['port']}")


def _is_dns_name(value: str) -> bool:
    labels = value.removesuffix(".").split(".")
    return len(value) <= 253 and all(_DNS_LABEL.match(label) for label in labels) and not labels[-1].isdigit()


def network_host(value: str, port_field: str = "port") -> str:
    """An IPv4/IPv6 address or a DNS name, nothing else (no port, no user, no option)."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    _port_hint(value, port_field)
    if _is_dns_name(value):
        return value
    labels = value.split(".")
    if labels and all(label.isdigit() for label in labels):
        raise ValueError(f"{value!r} is not a valid IPv4 address (four numbers 0-255)")
    raise ValueError("not an IP address or DNS name (letters, digits, '-' and dots; no spaces, '@', ':' or options)")


def listen_host(value: str) -> str:
    return network_host(value, "port")


def ssh_address(value: str) -> str:
    return network_host(value, "ssh_port")


def posix_user(value: str) -> str:
    if _POSIX_USER.match(value):
        return value
    raise ValueError("not a POSIX user name (lower-case letters, digits, '_' and '-', starting with a letter or '_')")


def host_key(value: str) -> str:
    """``<type> <base64 key>`` as in a .pub file or ssh-keyscan's output, without host name or comment."""
    plain_text(value)
    parts = value.split()
    if len(parts) == 3 and parts[1] in HOST_KEY_TYPES:
        raise ValueError(
            f"starts with a host name ({parts[0]!r}, as ssh-keyscan prints it): keep only '{parts[1]} <key>'"
        )
    if len(parts) == 3 and parts[0] in HOST_KEY_TYPES:
        raise ValueError(f"has a comment after the key: keep only '{parts[0]} <key>'")
    if len(parts) != 2 or parts[0] not in HOST_KEY_TYPES:
        raise ValueError(
            f"a host key is '<type> <base64>' with type one of {', '.join(HOST_KEY_TYPES)}: "
            "take it from `ssh-keyscan -t ed25519 <address>` (the last two fields)"
        )
    kind, blob = parts
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the key part is not base64: copy it again, whole") from None
    fields = _wire_strings(raw)
    if not fields or fields[0] != kind.encode() or len(fields) != _KEY_FIELDS[kind]:
        raise ValueError(f"the key part is not an {kind} key (truncated or from another key type): copy it again")
    if kind == "ssh-ed25519" and len(fields[1]) != 32:
        raise ValueError("the key part is not a whole ssh-ed25519 key (truncated?): copy it again")
    return value


_KEY_FIELDS = {
    "ssh-ed25519": 2,
    "ecdsa-sha2-nistp256": 3,
    "ecdsa-sha2-nistp384": 3,
    "ecdsa-sha2-nistp521": 3,
    "ssh-rsa": 3,
    "sk-ssh-ed25519@openssh.com": 3,
}


def _wire_strings(raw: bytes) -> list[bytes] | None:
    """The length-prefixed strings of an SSH public key blob (RFC 4253 §6.6), or None if it is not one."""
    out, i = [], 0
    while i < len(raw):
        if i + 4 > len(raw):
            return None
        n = int.from_bytes(raw[i : i + 4], "big")
        if i + 4 + n > len(raw):
            return None
        out.append(raw[i + 4 : i + 4 + n])
        i += 4 + n
    return out


def engine_arg_name(value: str) -> str:
    if not _ENGINE_ARG.match(value):
        raise ValueError("an engine argument is its vLLM name in snake_case (max_logprobs), nothing else")
    if value == "api_key":
        raise ValueError(
            "the API key is a secret, never profile data: `pulumi config set --secret apiKey …` (Pulumi) or "
            "vllm_service_api_key from a vault / vllm_service_api_key_file (Ansible)"
        )
    return value
