"""`pulumi up` with the real engine on the lab stack: converge + smoke gate per host, no-op re-run, a profile
change that touches one host, a failing batch that stops the rollout, no secret in state or logs, destroy."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

from vllm_fleet.ansible import PlaybookResult
from vllm_fleet.lab.stack import lab_fleet

pytestmark = pytest.mark.e2e
UNIT = "vllm-main.service"


def ssh(site: Any, ip: str, command: str) -> str:
    import subprocess

    from vllm_fleet.lab.ssh import ssh_argv

    argv = ssh_argv(ip, Path(site.state.ssh_key), Path(site.state.known_hosts), command)
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def engine() -> Any:
    from vllm_fleet.deploy import ensure_engine

    return ensure_engine()


@pytest.fixture(scope="module")
def lab_stack(engine: Any, site: Any, first_converge: PlaybookResult) -> Any:
    from vllm_fleet.deploy import stack

    st = stack(engine, f"e2e-{secrets.token_hex(3)}")
    yield st
    st.workspace.remove_stack(st.name, force=True)


def changes(result: Any) -> dict[str, int]:
    return dict(result.summary.resource_changes or {})


def configure(st: Any, site: Any, fleet: dict[str, Any], api_key: str) -> None:
    from vllm_fleet.deploy import configure as set_config

    set_config(
        st, fleet, Path(site.state.ssh_key).read_text(), api_key, {"knownHostsFile": str(site.state.known_hosts)}
    )


def test_pulumi_lifecycle(lab_stack: Any, site: Any, engine: Any) -> None:
    st = lab_stack
    api_key = "sk-lab-" + secrets.token_hex(16)
    fleet = lab_fleet(site.state, site.model_dir)
    configure(st, site, fleet, api_key)
    log: list[str] = []

    # 1. First `pulumi up`: every host converged and smoke-gated, ending serving (now behind the API key).
    first = st.up(on_output=log.append, color="never")
    assert first.summary.result == "succeeded"
    nodes = first.outputs["nodes"].value
    assert [n["host"] for n in nodes] == [h.name for h in site.state.hosts]
    for n in nodes:
        assert httpx.get(f"{n['endpoint']}/v1/models", timeout=10).status_code == 401  # key required
        ok = httpx.get(f"{n['endpoint']}/v1/models", headers={"Authorization": f"Bearer {api_key}"}, timeout=10)
        assert ok.status_code == 200

    # 2. No-op: nothing changes, no Ansible runs.
    again = st.up(on_output=log.append, color="never")
    assert set(changes(again)) == {"same"}, changes(again)

    # 3. A profile change on one host re-converges only that host.
    second = site.state.hosts[1]
    fleet["hosts"][1]["overrides"] = {"max_num_seqs": 6}
    configure(st, site, fleet, api_key)
    one = st.up(on_output=log.append, color="never")
    assert changes(one).get("update") == 2, changes(one)  # that host's converge and smoke gate
    assert "max-num-seqs: 6" in ssh(site, second.ip, "cat /etc/vllm/main.yaml")
    first_host = site.state.hosts[0]
    assert "max-num-seqs: 8" in ssh(site, first_host.ip, "cat /etc/vllm/main.yaml")

    # 4. A bad profile on the first batch fails the update; the next batch is not touched; the node keeps serving.
    before_pid = ssh(site, first_host.ip, f"systemctl show -p MainPID --value {UNIT}").strip()
    fleet["hosts"][0]["overrides"] = {"max_model_len": 4096}  # vLLM's parser accepts it, the model has 2048
    fleet["hosts"][1]["overrides"] = {"max_num_seqs": 5}
    configure(st, site, fleet, api_key)
    from pulumi import automation as auto

    with pytest.raises(auto.CommandError):
        st.up(on_output=log.append, color="never")
    assert "max-num-seqs: 8" in ssh(site, first_host.ip, "cat /etc/vllm/main.yaml")  # last-known-good restored
    assert "max-num-seqs: 6" in ssh(site, second.ip, "cat /etc/vllm/main.yaml")  # later batch not rolled
    ok = httpx.get(f"{nodes[0]['endpoint']}/health", timeout=10)
    assert ok.status_code == 200
    assert ssh(site, first_host.ip, f"systemctl is-active {UNIT}").strip() == "active"
    assert before_pid  # it was serving before

    # 5. No secret in plain text: the state files the backend keeps (current, history, backups) and everything
    #    the engine printed or logged. (`stack export` would not do: the Automation API passes --show-secrets.)
    state_text = "".join(
        p.read_text(errors="ignore")
        for p in Path(engine.backend, ".pulumi").rglob("*")
        if p.is_file() and st.name in str(p)
    )
    assert '"ciphertext"' in state_text  # the secrets are there, encrypted
    key_text = Path(site.state.ssh_key).read_text().strip()
    key_body = key_text.splitlines()[1]
    logs = "\n".join(log) + "".join(
        p.read_text(errors="ignore") for p in Path(engine.home, "logs").rglob("*") if p.is_file()
    )
    for haystack in (state_text, logs):
        assert api_key not in haystack
        assert key_body not in haystack

    # 6. Destroy: services stopped and disabled, nothing of the node's config left; disks untouched.
    fleet["hosts"][0]["overrides"] = {}
    configure(st, site, fleet, api_key)
    st.destroy(on_output=log.append, color="never")
    for h in site.state.hosts:
        assert ssh(site, h.ip, f"systemctl is-active {UNIT} || true").strip() in ("inactive", "unknown")
        assert ssh(site, h.ip, "test -e /etc/vllm/main.yaml && echo present || echo gone").strip() == "gone"
