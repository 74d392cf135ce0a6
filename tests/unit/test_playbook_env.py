"""A playbook started on the controller (the lab's Prometheus: vllm_fleet.lab.prometheus) gets only what it needs
from the caller's environment: no secret of the operator's shell or of `vllm-fleet up` reaches it.

The real ``playbook_env`` and a real ansible-playbook run through ``run_local_playbook`` (a throw-away playbook on
localhost, local connection) that writes the environment its tasks really see.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from vllm_fleet.deploy.ansible import data_yaml, playbook_env, run_local_playbook
from vllm_fleet.project.paths import project_root


def _throwaway_ssh_key() -> str:
    """An OpenSSH private key made for this run (none is tracked in the repository)."""
    key = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    return key.decode()


SECRETS = {
    "PULUMI_CONFIG_PASSPHRASE": f"pp-{secrets.token_hex(8)}",
    "PULUMI_CONFIG_PASSPHRASE_FILE": "/root/.cache/vllm-fleet/pulumi-passphrase",
    "OPENAI_API_KEY": f"sk-test-{secrets.token_hex(8)}",
    "VLLM_FLEET_SSH_KEY": _throwaway_ssh_key(),
    "ANSIBLE_VAULT_PASSWORD_FILE": "/home/op/.vault-pass",  # the operator's Ansible setting, not the project's
}


@pytest.fixture
def operator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("ANSIBLE_NOCOLOR", "0")


@pytest.mark.usefixtures("operator_env")
def test_the_env_holds_the_project_settings_and_the_locale_and_no_secret() -> None:
    env = playbook_env()
    assert not set(SECRETS) & set(env), sorted(set(SECRETS) & set(env))
    assert not [name for name, value in env.items() if any(secret in value for secret in SECRETS.values())]
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)  # this venv's ansible-playbook
    assert env["ANSIBLE_CONFIG"] == str(project_root() / "ansible.cfg")
    assert env["ANSIBLE_NOCOLOR"] == "1"  # the project's value wins over the caller's


def test_what_is_kept_is_named_not_guessed() -> None:
    env = playbook_env({"HOME": "/home/op", "PATH": "/usr/bin", "LANG": "de_DE.UTF-8", "AWS_SECRET_ACCESS_KEY": "x"})
    assert {k: env[k] for k in ("HOME", "LANG")} == {"HOME": "/home/op", "LANG": "de_DE.UTF-8"}
    assert env["PATH"] == f"{Path(sys.executable).parent}:/usr/bin"
    assert "AWS_SECRET_ACCESS_KEY" not in env


@pytest.mark.usefixtures("operator_env")
def test_a_local_playbook_run_sees_no_secret_of_the_caller(tmp_path: Path) -> None:
    seen = tmp_path / "seen.env"
    playbook = tmp_path / "show-env.yml"
    playbook.write_text(
        "- hosts: all\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - ansible.builtin.command: env\n"
        "      register: shown\n"
        "      changed_when: false\n"
        "    - ansible.builtin.copy:\n"
        '        content: "{{ shown.stdout }}\\n"\n'
        f"        dest: {seen}\n"
        "        mode: '0600'\n"
    )
    inventory = tmp_path / "inventory.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(data_yaml({"all": {"hosts": {"controller": host}}}))
    proc = run_local_playbook(str(playbook), inventory, timeout_s=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = seen.read_text()
    names = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line}
    assert "ANSIBLE_CONFIG" in names and "LC_ALL" in names  # the env file is the task's real environment
    assert not set(SECRETS) & names, sorted(set(SECRETS) & names)
    assert not [value for value in SECRETS.values() if value in text]
