"""Run the Pulumi program with the locally built engine, offline: a DIY backend, passphrase secrets.

The Automation API drives the same `pulumi` CLI a user would run; nothing talks to Pulumi Cloud. The backend is a
setting: ``file://`` under the cache by default (one controller, the lab), or ``VLLM_FLEET_PULUMI_BACKEND`` — a
``postgres://`` URL for a team sharing one fleet (Pulumi's DIY PostgreSQL backend, with its stack locks), or
another ``file://`` directory. ``VLLM_FLEET_PULUMI_PASSPHRASE_FILE`` names the passphrase file the team shares
(default: one generated under the cache); secrets in state stay encrypted with it, whatever the backend.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_fleet.project.paths import cache_dir, project_root

BACKEND_ENV = "VLLM_FLEET_PULUMI_BACKEND"
PASSPHRASE_ENV = "VLLM_FLEET_PULUMI_PASSPHRASE_FILE"  # noqa: S105 (a variable name, not a secret)
BACKEND_SCHEMES = ("file://", "postgres://")
"""DIY backends only: state never goes to Pulumi Cloud (an http(s) URL) by accident."""


def backend_url(env: dict[str, str] | None = None) -> str | None:
    """The team's backend from ``VLLM_FLEET_PULUMI_BACKEND``, or None (the default ``file://`` state dir)."""
    value = (os.environ if env is None else env).get(BACKEND_ENV, "").strip()
    if not value:
        return None
    if not value.startswith(BACKEND_SCHEMES):
        raise ValueError(
            f"{BACKEND_ENV} must be a file:// or postgres:// URL (a DIY backend; never Pulumi Cloud), got "
            f"{value.split('://', 1)[0] + '://…' if '://' in value else 'no URL'}"
        )
    return value


@dataclass(frozen=True)
class Engine:
    bin_dir: Path
    home: Path
    backend: Path
    """The file backend's directory (the default backend, and where stale lock files are looked for)."""
    passphrase_file: Path
    backend_url: str | None = None
    """A ``postgres://`` (or other ``file://``) backend instead of ``backend``."""

    @property
    def url(self) -> str:
        return self.backend_url or f"file://{self.backend}"

    def env(self) -> dict[str, str]:
        return {
            # The engine first, then this interpreter's venv: dynamic providers run `python3` from PATH.
            "PATH": f"{self.bin_dir}:{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PULUMI_HOME": str(self.home),
            "PULUMI_BACKEND_URL": self.url,
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
    url = backend_url()
    state = cache_dir() / "pulumi-state"
    if url and url.startswith("file://"):
        state, url = Path(url.removeprefix("file://")), None
    state.mkdir(parents=True, exist_ok=True)
    shared = os.environ.get(PASSPHRASE_ENV)
    if shared:
        passphrase = Path(shared)
        if not passphrase.is_file():
            raise FileNotFoundError(f"{PASSPHRASE_ENV}={shared}: no such file (the team's stack passphrase)")
    else:
        passphrase = cache_dir() / "pulumi-passphrase"
        if not passphrase.exists():
            fd = os.open(passphrase, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(24))
    return Engine(
        bin_dir=bin_dir, home=bin_dir.parent / "home", backend=state, passphrase_file=passphrase, backend_url=url
    )


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


LEGACY_COMMAND_TYPE = "pulumi-python:dynamic:Resource"
"""Command resources of vllm-fleet 0.1 (a Python dynamic provider), before the `vllm-fleet-command` plugin."""


def _pulumi(st: Any, *args: str) -> str:
    ws = st.workspace
    env = {**ws.env_vars, "PULUMI_HOME": ws.pulumi_home or ""}
    return str(ws.pulumi_command.run([*args, "--stack", st.name], ws.work_dir, env).stdout)


def export(st: Any) -> dict[str, Any]:
    """`pulumi stack export` (ciphertext only: the state's secrets stay encrypted)."""
    exported: dict[str, Any] = json.loads(_pulumi(st, "stack", "export"))
    return exported


def forget_legacy_commands(
    st: Any, log: Callable[[str], None] = print, exported: dict[str, Any] | None = None
) -> list[str]:
    """Drop 0.1's dynamic-provider command resources from the stack's state, without running their deletes.

    Their type differs from the `vllm-fleet-command` resources that replace them, so Pulumi would otherwise
    create the new ones and then *delete* the old: the old converge's delete is the removal playbook, which
    would take a just-converged node out of service. Forgotten instead, the next `up` creates the new ones:
    preflight and converge run once more (the roles are idempotent; an unchanged node is not restarted).
    """
    forgotten: list[str] = []
    while True:
        deployment = (exported if exported is not None and not forgotten else export(st)).get("deployment") or {}
        legacy = [r["urn"] for r in deployment.get("resources") or [] if r.get("type") == LEGACY_COMMAND_TYPE]
        if not legacy:
            return forgotten
        # The last registered first; its dependents (a later batch's GpuNode) are forgotten with it: a
        # component's state holds nothing, the program registers it again.
        urn = legacy[-1]
        log(f"state: forgetting {urn.rsplit('::', 1)[-1]} (0.1 dynamic command; its delete is not run)")
        _pulumi(st, "state", "delete", urn, "--target-dependents", "--yes")
        forgotten.append(urn)


def migrate_commands(st: Any, log: Callable[[str], None] = print, exported: dict[str, Any] | None = None) -> list[str]:
    """Move the stack's `vllm-fleet-command` resources to pulumi-command's `command` package by editing its state
    (vllm_fleet/pulumi/state_migration.py): no command runs, none is deleted. Returns what was done."""
    from vllm_fleet.pulumi.state_migration import migrate_deployment

    exported = exported if exported is not None else export(st)
    deployment, done = migrate_deployment(exported.get("deployment") or {})
    if not done:
        return []
    for line in done:
        log(f"state: {line}")
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-migrate-") as tmp:
        path = Path(tmp) / "deployment.json"  # ciphertext only: the state's secrets stay encrypted
        path.write_text(json.dumps({**exported, "deployment": deployment}), encoding="utf-8")
        _pulumi(st, "stack", "import", "--file", str(path))
    return done


def stale_locks(backend: Path, project: str, stack_name: str, hostname: str | None = None) -> list[Path]:
    """Lock files of a file-backend stack left by a `pulumi` process of this machine that no longer runs
    (killed mid-update: SIGKILL, a lost terminal). A lock of a live process, or of another machine, is kept."""
    hostname = hostname or socket.gethostname()
    out = []
    for lock in sorted((backend / ".pulumi" / "locks" / "organization" / project / stack_name).glob("*.json")):
        try:
            info = json.loads(lock.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        pid = info.get("pid")
        if info.get("hostname") != hostname or not isinstance(pid, int):
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            out.append(lock)
        except PermissionError:
            continue
    return out


def clear_stale_locks(engine: Engine, stack_name: str, log: Callable[[str], None] = print) -> list[Path]:
    """Remove the stack's stale locks (see stale_locks), as `pulumi cancel` would for a service backend: a run
    killed mid-rollout must not block the run that finishes it. The hosts' own journals say where it stopped.

    File backend only: a PostgreSQL backend's locks are rows other controllers share; a lock left by a killed
    run there is removed with `pulumi cancel` by whoever knows that run is gone (the lock names its host and pid).
    """
    if engine.backend_url:
        return []
    locks = stale_locks(engine.backend, "vllm-fleet", stack_name)
    for lock in locks:
        log(f"pulumi: removing the lock of a killed run ({lock.name}: its process is gone)")
        lock.unlink(missing_ok=True)
        lock.with_name(lock.name + ".attrs").unlink(missing_ok=True)
    return locks


def up(
    st: Any, on_output: Callable[[str], None] = print, on_event: Callable[[Any], None] | None = None
) -> dict[str, Any]:
    """`pulumi up`: its text to ``on_output``, its engine events (for the progress display) to ``on_event``."""
    exported = export(st)  # once: a large fleet's state takes seconds to export
    if forget_legacy_commands(st, on_output, exported):
        exported = export(st)
    migrate_commands(st, on_output, exported)
    result = st.up(on_output=on_output, on_event=on_event, color="never")
    return {k: v.value for k, v in result.outputs.items()}
