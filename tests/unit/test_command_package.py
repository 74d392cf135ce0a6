"""The move to pulumi-command's `command` package: the state edit (remote commands dropped, references fixed, the
keys' provider gone), the stack's secrets read from its config by the command that needs them, and the preflight's
SSH (the system ssh, the host key pinned, the key from an agent, nothing secret in argv)."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_fleet.pulumi.stack_secrets import stack_secrets
from vllm_fleet.pulumi.state_migration import migrate_deployment

P = "urn:pulumi:lab::vllm-fleet::"
OLD_PROVIDER = f"{P}pulumi:providers:vllm-fleet-command::commands"
NODE = f"{P}vllm-fleet:index:GpuNode::gpu-a"


def old_deployment() -> dict[str, Any]:
    ref = f"{OLD_PROVIDER}::p-id"
    return {
        "resources": [
            {"urn": f"{P}pulumi:pulumi:Stack::vllm-fleet-lab", "type": "pulumi:pulumi:Stack"},
            {"urn": OLD_PROVIDER, "custom": True, "id": "p-id", "type": "pulumi:providers:vllm-fleet-command",
             "inputs": {"apiKey": {"ciphertext": "x"}}},
            {"urn": NODE, "type": "vllm-fleet:index:GpuNode"},
            {"urn": f"{P}vllm-fleet:index:GpuNode$vllm-fleet-command:remote:Command::gpu-a-preflight", "custom": True,
             "id": "1", "type": "vllm-fleet-command:remote:Command", "parent": NODE, "provider": ref,
             "inputs": {"create": "sh", "connection": {"host": "10.0.0.1"}}},
            {"urn": f"{P}vllm-fleet:index:GpuNode$vllm-fleet-command:local:Command::gpu-a-converge", "custom": True,
             "id": "2", "type": "vllm-fleet-command:local:Command", "parent": NODE, "provider": ref,
             "inputs": {"create": "c", "environment": {"VLLM_FLEET_NODE": "{}"},
                        "secret_environment": {"VLLM_FLEET_API_KEY": "apiKey"}},
             "outputs": {"stdout": "ok\n"},
             "dependencies": [f"{P}vllm-fleet:index:GpuNode$vllm-fleet-command:remote:Command::gpu-a-preflight"],
             "propertyDependencies": {"create": []}},
            {"urn": f"{P}vllm-fleet-command:local:Command::rollout-pause-0", "custom": True, "id": "3",
             "type": "vllm-fleet-command:local:Command", "provider": ref, "inputs": {"create": "sleep 1"},
             "dependencies": [f"{P}vllm-fleet:index:GpuNode$vllm-fleet-command:local:Command::gpu-a-converge"]},
        ]
    }  # fmt: skip


def test_state_edit_moves_commands_and_drops_the_remote_preflight() -> None:
    deployment, done = migrate_deployment(old_deployment(), version="1.2.1")
    by_name = {r["urn"].rsplit("::", 1)[-1]: r for r in deployment["resources"]}
    assert "gpu-a-preflight" not in by_name and "commands" not in by_name and len(done) == 4
    provider = by_name["default_1_2_1"]
    assert provider["type"] == "pulumi:providers:command" and provider["inputs"] == {
        "__internal": {},
        "version": "1.2.1",
    }
    converge = by_name["gpu-a-converge"]
    assert converge["urn"] == f"{P}vllm-fleet:index:GpuNode$command:local:Command::gpu-a-converge"
    assert converge["type"] == "command:local:Command" and converge["id"] == "2"
    assert converge["provider"] == f"{P}pulumi:providers:command::default_1_2_1::p-id"
    assert converge["inputs"] == {
        "create": "c",
        "environment": {"VLLM_FLEET_NODE": "{}", "VLLM_FLEET_SECRETS": "vllm-fleet/lab"},
    }
    assert converge["dependencies"] == [] and converge["outputs"] == {"stdout": "ok\n"}
    assert by_name["rollout-pause-0"]["dependencies"] == [converge["urn"]]
    assert "environment" not in by_name["rollout-pause-0"]["inputs"]  # it named no secret
    # Each resource after what it refers to (the engine checks the order on import).
    seen: set[str] = set()
    for r in deployment["resources"]:
        refs = [r.get("parent"), *(r.get("dependencies") or []), (r.get("provider") or "").rsplit("::", 1)[0]]
        assert all(u in seen for u in refs if u), r["urn"]
        seen.add(r["urn"])
    assert "ciphertext" not in json.dumps(deployment)
    assert migrate_deployment(deployment) == (deployment, [])  # once


def test_commands_read_the_stack_secrets_from_its_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pulumi config --show-secrets --json` of the named stack, through a pipe: what the converge, the smoke gate
    and the preflight get, with no value in their inputs; an unreadable config fails the command, naming the stack."""
    from vllm_fleet import converge

    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "pulumi"
    fake.parent.mkdir()
    config = {"vllm-fleet:sshPrivateKey": {"value": "KEY", "secret": True}, "vllm-fleet:apiKey": {"value": "API"},
              "vllm-fleet:fleet": {"value": "{}"}}  # fmt: skip
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        f'[ "$6" = lab ] || {{ echo "error: no stack named $6" >&2; exit 255; }}\n'
        f"cat <<'EOF'\n{json.dumps(config)}\nEOF\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    assert stack_secrets("vllm-fleet/lab") == ("KEY", "API")
    assert calls.read_text() == "--non-interactive config --show-secrets --json --stack lab\n"
    with pytest.raises(RuntimeError, match="stack vllm-fleet/other could not be read: error: no stack named other"):
        stack_secrets("vllm-fleet/other")
    with pytest.raises(ValueError):
        stack_secrets("lab; rm -rf /")

    got: list[tuple[Any, ...]] = []
    monkeypatch.setattr(converge, "preflight", lambda host, script, key: got.append((script, key)) or 0)
    monkeypatch.setattr(converge, "smoke_gate", lambda node, key: got.append((key,)) or 0)
    monkeypatch.setattr("sys.stdin", io.StringIO("echo hi\n"))
    monkeypatch.setenv("VLLM_FLEET_NODE", json.dumps({"host": {"name": "gpu-a"}}))
    for action in ("preflight", "smoke"):
        monkeypatch.setenv("VLLM_FLEET_SECRETS", "vllm-fleet/lab")
        assert converge.main([action]) == 0
        assert "VLLM_FLEET_SECRETS" not in os.environ
    assert got == [("echo hi\n", "KEY"), ("API",)]
    monkeypatch.setenv("VLLM_FLEET_SECRETS", "vllm-fleet/other")
    assert converge.main(["smoke"]) == 1 and len(got) == 2  # no key, no run


def test_preflight_runs_the_system_ssh_with_the_host_key_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_fleet import converge

    record = tmp_path / "ssh.json"
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\nargs = sys.argv[1:]\n"
        "known = args[args.index('-o', args.index('StrictHostKeyChecking=yes') - 2) + 3].split('=', 1)[1]\n"
        f"json.dump({{'argv': args, 'known': open(known).read(), 'stdin': sys.stdin.read(),"
        f" 'agent': os.environ.get('SSH_AUTH_SOCK')}}, open({str(record)!r}, 'w'))\nprint('os=debian-12')\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/user/agent.sock")
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    host = {"name": "gpu-a", "address": "10.20.0.11", "ssh_port": 2222, "ssh_user": "root", "host_key": host_key}
    assert converge.preflight(host, "echo hi\n", None) == 0
    seen = json.loads(record.read_text())
    argv = seen["argv"]
    assert argv[-3:] == ["--", "root@10.20.0.11", "sh -s"] and argv[:2] == ["-p", "2222"]
    for option in ("StrictHostKeyChecking=yes", "GlobalKnownHostsFile=/dev/null", "BatchMode=yes"):
        assert option in argv
    assert seen["known"] == f"[10.20.0.11]:2222 {host_key}\n" and seen["stdin"] == "echo hi\n"
    assert seen["agent"] == "/run/user/agent.sock"  # no key given: the controller's own agent
    host["host_key"] = None
    with pytest.raises(ValueError, match="host_key"):  # no pin, no connection
        converge.preflight(host, "true\n", None)


def test_without_pulumi_on_path_the_error_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no pulumi
    with pytest.raises(RuntimeError, match=r"stack vllm-fleet/lab .*no `pulumi` on this command's PATH"):
        stack_secrets("vllm-fleet/lab")


def test_our_command_plugin_serves_the_version_the_sdk_asks_for() -> None:
    """The Go provider's `commandVersion` and the pinned pulumi_command SDK's plugin version are one value (the
    engine matches a plugin's version exactly: a bumped pin alone leaves every stack without its provider)."""
    import re

    from vllm_fleet.project.paths import project_root
    from vllm_fleet.pulumi.state_migration import command_sdk_version

    main_go = project_root() / "tools/pulumi_engine/cmd/pulumi-resource-vllm-fleet-command/main.go"
    found = re.search(r'commandVersion\s*=\s*"([^"]+)"', main_go.read_text(encoding="utf-8"))
    assert found is not None, main_go
    assert found[1] == command_sdk_version()
