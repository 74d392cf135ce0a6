"""Run the Pulumi program with the locally built engine, offline: file backend, passphrase secrets.

The Automation API drives the same `pulumi` CLI a user would run; nothing talks to Pulumi Cloud.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_fleet.paths import cache_dir, project_root


@dataclass(frozen=True)
class Engine:
    bin_dir: Path
    home: Path
    backend: Path
    passphrase_file: Path

    def env(self) -> dict[str, str]:
        return {
            # The engine first, then this interpreter's venv: dynamic providers run `python3` from PATH.
            "PATH": f"{self.bin_dir}:{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PULUMI_HOME": str(self.home),
            "PULUMI_BACKEND_URL": f"file://{self.backend}",
            "PULUMI_CONFIG_PASSPHRASE_FILE": str(self.passphrase_file),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
            "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "true",
        }


def ensure_engine(log: Callable[[str], None] = print) -> Engine:
    """Build (once, cached) the Pulumi CLI, language host and command provider; set up state and passphrase."""
    log("pulumi engine: tools/build_pulumi_engine.sh (cached after the first build)")
    out = subprocess.run(
        [str(project_root() / "tools" / "build_pulumi_engine.sh")], check=True, capture_output=True, text=True
    ).stdout
    bin_dir = Path(out.strip().splitlines()[-1])
    state = cache_dir() / "pulumi-state"
    state.mkdir(parents=True, exist_ok=True)
    passphrase = cache_dir() / "pulumi-passphrase"
    if not passphrase.exists():
        fd = os.open(passphrase, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(24))
    return Engine(bin_dir=bin_dir, home=bin_dir.parent / "home", backend=state, passphrase_file=passphrase)


def stack(engine: Engine, name: str) -> Any:
    from pulumi import automation as auto

    os.environ.update(engine.env())
    return auto.create_or_select_stack(
        stack_name=name,
        work_dir=str(project_root()),
        opts=auto.LocalWorkspaceOptions(
            pulumi_home=str(engine.home),
            env_vars=engine.env(),
            secrets_provider="passphrase",
            pulumi_command=auto.PulumiCommand(root=str(engine.bin_dir.parent), skip_version_check=True),
        ),
    )


def configure(
    st: Any, fleet: dict[str, Any], ssh_private_key: str, api_key: str | None, extra: dict[str, str] | None = None
) -> None:
    from pulumi import automation as auto

    st.set_config("vllm-fleet:fleet", auto.ConfigValue(value=json.dumps(fleet)))
    st.set_config("vllm-fleet:sshPrivateKey", auto.ConfigValue(value=ssh_private_key, secret=True))
    if api_key:
        st.set_config("vllm-fleet:apiKey", auto.ConfigValue(value=api_key, secret=True))
    for key, value in (extra or {}).items():
        st.set_config(f"vllm-fleet:{key}", auto.ConfigValue(value=value))


def up(st: Any, on_output: Callable[[str], None] = print) -> dict[str, Any]:
    result = st.up(on_output=on_output, color="never")
    return {k: v.value for k, v in result.outputs.items()}
