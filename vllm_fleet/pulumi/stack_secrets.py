"""The stack's secrets, for its commands: held once, in the stack's config, read by the command that needs them.

The SSH private key and the API key are Pulumi secrets in stack config (`vllm-fleet:sshPrivateKey`,
`vllm-fleet:apiKey`: encrypted there; no resource of the state carries them, except the API key once, as
``api-key-version``'s input). The commands are plain `pulumi_command` resources, so their inputs are the SDK's:
a command names its stack (``VLLM_FLEET_SECRETS=<project>/<stack>``), never a value, and `python -m
vllm_fleet.converge` reads the two keys when it runs, with ``pulumi config --show-secrets --json``: the engine's
own CLI, in the project directory (the provider's working directory), with the engine's environment (backend,
passphrase), whose output comes through a pipe -- no argv, no file. The same works when no program runs
(`pulumi destroy`: the removal playbook needs the SSH key too) and after it has ended (the engine runs deletes
last).
"""

from __future__ import annotations

import json
import os
import re
import subprocess

SECRETS_ENV = "VLLM_FLEET_SECRETS"
"""A command's input naming its stack (``<project>/<stack>``): whose config holds the keys it uses."""
SSH_KEY, API_KEY = "vllm-fleet:sshPrivateKey", "vllm-fleet:apiKey"
_NAME = re.compile(r"^([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)$")


def stack_secrets(name: str, timeout: float = 120) -> tuple[str | None, str | None]:
    """(SSH private key, API key) from stack ``<project>/<stack>``'s config; None for a key it does not set.

    Raises ``RuntimeError`` naming the stack and pulumi's message (never a value) if the config cannot be read."""
    match = _NAME.match(name)
    if match is None:
        raise ValueError(f"{SECRETS_ENV}={name!r}: want <project>/<stack>")
    try:
        proc = subprocess.run(
            ["pulumi", "--non-interactive", "config", "--show-secrets", "--json", "--stack", match[2]],
            capture_output=True, text=True, timeout=timeout, check=False,
            env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
        )  # fmt: skip
    except FileNotFoundError:
        raise RuntimeError(
            f"the config of stack {name} could not be read: no `pulumi` on this command's PATH "
            "(run `pulumi up` with the pulumi CLI's directory on PATH: the commands read the keys with it)"
        ) from None
    if proc.returncode != 0:
        raise RuntimeError(f"the config of stack {name} could not be read: {proc.stderr.strip()[-500:]}")
    config = json.loads(proc.stdout)

    def value(key: str) -> str | None:
        entry = config.get(key) or {}
        return str(entry["value"]) if entry.get("value") else None

    return value(SSH_KEY), value(API_KEY)
