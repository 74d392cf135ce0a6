"""The stack's secrets held once, by the command provider, with the real engine: a stack of the old shape (the API
key in every converge's environment, on the default provider) moves to the new one with one in-place update of its
commands and no delete (the removal playbook never runs); the node's state then holds no secret, a no-op preview
changes nothing, and a rotated key runs the converge again with the new key."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

SECRET_SIG = "4dabf18193072939515e22adb298388d"  # how Pulumi's state marks a secret value


def test_old_stack_moves_its_keys_to_the_provider_without_a_delete(tmp_path: Path) -> None:
    import pulumi
    from pulumi import automation as auto

    from tests.e2e.legacy_commands import API_KEY, CommandProvider, LocalCommand
    from vllm_fleet.deploy.engine import ensure_engine

    engine = ensure_engine()

    def key_version(provider: CommandProvider, key: Any) -> Any:  # 0.3's api-key-version, on the provider
        new = "python3 -c 'import uuid; print(uuid.uuid4())'"
        secret = {"VLLM_FLEET_API_KEY": pulumi.Output.secret(key)}
        opts = pulumi.ResourceOptions(provider=provider)
        version = LocalCommand("api-key-version", create=new, update=new, environment=secret, opts=opts)
        return version.stdout.apply(lambda out: out.strip())

    mark = tmp_path / "mark"
    # Each run leaves "<action> <sha256 of the key it got>" (not the key): create/update converge, delete removes.
    digest = '"$(printf %s "$VLLM_FLEET_API_KEY" | sha256sum | cut -c1-16)"'
    runs = {action: f"printf '%s %s\\n' {action} {digest} >> {mark}" for action in ("create", "update", "delete")}
    phase = {"new": False}

    def program() -> None:
        key = pulumi.Config().require_secret("apiKey")
        node = {"VLLM_FLEET_NODE": json.dumps({"host": {"name": "node1"}})}
        if not phase["new"]:  # 0.2's shape: the key in the converge's own (secret) environment, default provider
            LocalCommand(
                "node1-converge",
                **runs,
                environment={**node, "VLLM_FLEET_API_KEY": key},
                opts=pulumi.ResourceOptions(additional_secret_outputs=["environment"]),
            )
            return
        provider = CommandProvider("commands", api_key=key)
        LocalCommand(
            "node1-converge",
            **runs,
            environment={**node, "VLLM_FLEET_API_KEY_VERSION": key_version(provider, key)},
            secret_environment={"VLLM_FLEET_API_KEY": API_KEY},
            opts=pulumi.ResourceOptions(provider=provider),
        )

    st: Any = auto.create_or_select_stack(
        stack_name=f"secrets-{secrets.token_hex(3)}",
        project_name="vllm-fleet-secrets-test",
        program=program,
        opts=auto.LocalWorkspaceOptions(
            work_dir=str(tmp_path),
            pulumi_home=str(engine.home),
            env_vars=engine.env(),
            secrets_provider="passphrase",
            pulumi_command=auto.PulumiCommand(root=str(engine.bin_dir.parent), skip_version_check=True),
        ),
    )

    def h(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def lines() -> list[str]:
        return mark.read_text().splitlines() if mark.exists() else []

    try:
        first, second = "api-key-" + secrets.token_hex(8), "api-key-" + secrets.token_hex(8)
        st.set_config("apiKey", auto.ConfigValue(first, secret=True))
        st.up(color="never")
        assert lines() == [f"create {h(first)}"]

        phase["new"] = True
        st.up(color="never")
        assert lines() == [f"create {h(first)}", f"update {h(first)}"]  # updated in place, no delete ran

        # The checkpoint as the backend keeps it (the Automation API's export shows secrets in plaintext).
        (saved,) = engine.backend.glob(f".pulumi/stacks/vllm-fleet-secrets-test/{st.name}.json")
        state = saved.read_text()
        resources = {r["urn"].rsplit("::", 1)[-1]: r for r in json.loads(state)["checkpoint"]["latest"]["resources"]}
        converge = json.dumps(resources["node1-converge"])
        assert SECRET_SIG not in converge and "ciphertext" not in converge  # the node's state holds no secret
        assert resources["node1-converge"]["inputs"]["secret_environment"] == {"VLLM_FLEET_API_KEY": "apiKey"}
        assert set(resources["node1-converge"]["outputs"]) == {"stdout", "stderr"}  # inputs are not echoed
        assert "ciphertext" in json.dumps(resources["commands"]["inputs"]["apiKey"])  # the provider's, encrypted
        assert first not in state, state[max(0, state.find(first) - 700) : state.find(first) + 100]

        preview = st.preview(color="never")
        assert set(preview.change_summary) == {auto.OpType.SAME}, preview.change_summary

        st.set_config("apiKey", auto.ConfigValue(second, secret=True))  # a rotated key reaches the node
        st.up(color="never")
        assert lines() == [f"create {h(first)}", f"update {h(first)}", f"update {h(second)}"]
    finally:
        st.destroy(color="never")
        st.workspace.remove_stack(st.name, force=True)
    assert lines()[-1] == f"delete {h(second)}"  # a destroy still runs the delete, with the provider's key
