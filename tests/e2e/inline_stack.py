"""A throwaway stack of an inline program on the locally built engine (file backend, passphrase secrets, offline)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_fleet.deploy.engine import Engine


def inline_stack(engine: Engine, project: str, program: Callable[[], None], work_dir: Path, **env: str) -> Any:
    """A new stack ``<project>-<random>`` of ``program`` in ``work_dir``; ``env`` adds to the engine's environment."""
    from pulumi import automation as auto

    return auto.create_or_select_stack(
        stack_name=f"{project.removeprefix('vllm-fleet-')}-{secrets.token_hex(3)}",
        project_name=project,
        program=program,
        opts=auto.LocalWorkspaceOptions(
            work_dir=str(work_dir),
            pulumi_home=str(engine.home),
            env_vars={**engine.env(), **env},
            secrets_provider="passphrase",
            pulumi_command=auto.PulumiCommand(root=str(engine.bin_dir.parent), skip_version_check=True),
        ),
    )
