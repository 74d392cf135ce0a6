"""The stack's keys reach its commands with the real engine, though no input holds them: a command names its
stack (`VLLM_FLEET_SECRETS`) and reads the keys from the stack's config when it runs -- in `up`, and in `destroy`,
where no program runs. The state and the engine's logs never hold a key."""

from __future__ import annotations

import hashlib
import json
import secrets
import shlex
import sys
from pathlib import Path

import pytest

from tests.e2e.inline_stack import inline_stack

pytestmark = pytest.mark.e2e

# What a command does with the keys: writes their digests (not the keys) to the mark file.
READ = (
    "import hashlib, sys; from vllm_fleet.pulumi.stack_secrets import stack_secrets; "
    "keys = stack_secrets(sys.argv[2]); "
    "open(sys.argv[1], 'a').write(' '.join(hashlib.sha256((k or '').encode()).hexdigest()[:16] for k in keys) + '\\n')"
)


def test_commands_read_the_stack_keys_in_up_and_destroy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pulumi
    import pulumi_command
    from pulumi import automation as auto

    from vllm_fleet.deploy.engine import ensure_engine
    from vllm_fleet.pulumi.stack_secrets import SECRETS_ENV

    engine = ensure_engine()
    monkeypatch.chdir(tmp_path)  # the provider's working directory: the project's (where its stack files are)
    mark = tmp_path / "mark"
    ssh_key, api_key = f"ssh-key-{secrets.token_hex(8)}", f"api-key-{secrets.token_hex(8)}"

    def program() -> None:
        stack = f"{pulumi.get_project()}/{pulumi.get_stack()}"
        read = f"{shlex.quote(sys.executable)} -c {shlex.quote(READ)} {mark} $VLLM_FLEET_SECRETS"
        pulumi_command.local.Command("node1-converge", create=read, delete=read, environment={SECRETS_ENV: stack})

    st = inline_stack(engine, "vllm-fleet-stack-secrets-test", program, tmp_path,
                      PYTHONPATH=str(Path(__file__).resolve().parents[2]))  # fmt: skip
    try:
        st.set_config("vllm-fleet:sshPrivateKey", auto.ConfigValue(value=ssh_key, secret=True))
        st.set_config("vllm-fleet:apiKey", auto.ConfigValue(value=api_key, secret=True))
        st.up(color="never")
        state = json.dumps(st.export_stack().deployment)
        assert "node1-converge" in state and ssh_key not in state and api_key not in state
        st.destroy(color="never")
        digests = " ".join(hashlib.sha256(k.encode()).hexdigest()[:16] for k in (ssh_key, api_key))
        assert mark.read_text().splitlines() == [digests, digests]  # create (up), delete (destroy: no program)
        logs = "".join(p.read_text(errors="ignore") for p in Path(engine.home, "logs").rglob("*") if p.is_file())
        assert ssh_key not in logs and api_key not in logs
    finally:
        st.workspace.remove_stack(st.name, force=True)
