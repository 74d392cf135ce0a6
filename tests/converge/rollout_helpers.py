"""What the rollout tests read from the lab's hosts and router, and how they roll a config: shared by the fault
tests and the tests behind the router (a helper module, not a test module)."""

from __future__ import annotations

import json
from typing import Any

import testinfra

from tests.fixtures_lab import converge
from vllm_fleet.deploy.ansible import PlaybookResult
from vllm_fleet.lab import config
from vllm_fleet.probes.smoke import smoke
from vllm_fleet.profiles.loader import load_profile
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.rollout.router import HAProxyRouter

UNIT = "vllm-main.service"
JOURNAL = "/var/lib/vllm-fleet/main.rollout.json"
MODEL = "tiny-llama-lab"
LOAD_PAUSE_S = 2.0
"""Each load worker's pause between its requests: past vLLM's 1 s busy-wait after a step, so a host serving the
load idles between requests instead of spinning (on 2 cores the spin slows a restarting neighbour about 2x)."""


def _ssh(site: Any, h: Any) -> Any:
    extra = f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={site.state.known_hosts}"
    return testinfra.get_host(f"ssh://root@{h.ip}", ssh_identity_file=str(site.state.ssh_key), ssh_extra_args=extra)


def router(site: Any) -> HAProxyRouter:
    return HAProxyRouter(config.router_dir(site.state.state_dir) / "haproxy.sock")


def main_pid(h: Any) -> str:
    return str(h.run(f"systemctl show -p MainPID --value {UNIT}").stdout.strip())


def journal(h: Any) -> dict[str, Any]:
    text = h.run(f"cat {JOURNAL}").stdout
    return json.loads(text) if text.strip() else {}


def config_of(h: Any) -> str:
    return str(h.file("/etc/vllm/main.yaml").content_string)


def all_serving(site: Any) -> None:
    r = router(site)
    for h in site.state.hosts:
        r.wait_serving(h.name, 60)


def lab_profile() -> DecodeProfile:
    return load_profile("cpu-lab")


def with_max_num_seqs(n: int) -> DecodeProfile:
    """The lab profile with another ``max_num_seqs``: a change vLLM accepts that restarts the server."""
    lab = lab_profile()
    return lab.model_copy(update={"scheduler": lab.scheduler.model_copy(update={"max_num_seqs": n})})


def snapshot(site: Any, hosts: list[Any] | None = None) -> dict[str, dict[str, Any]]:
    """What each host (default: all) runs now: its server's PID, its config file and its rollout journal."""
    out = {}
    for h in site.state.hosts if hosts is None else hosts:
        host = _ssh(site, h)
        out[h.name] = {"pid": main_pid(host), "config": config_of(host), "journal": journal(host)}
    return out


def assert_all_pass_smoke(site: Any, profiles: dict[str, DecodeProfile]) -> None:
    for h in site.state.hosts:
        result = smoke(f"http://{h.ip}:{profiles[h.name].frontend.port}", profiles[h.name], timeout_s=120)
        assert result.exit_code == 0, (h.name, [(c.name, c.status, c.detail) for c in result.checks], result.reason)


def rollout(site: Any, config: dict[str, Any], profile: DecodeProfile, **extra: Any) -> PlaybookResult:
    # The profile the smoke gate judges against is given as data with the config, as the Pulumi program does.
    return converge(
        site,
        "rollout.yml",
        vllm_config=config,
        vllm_fleet_profile_data=profile.model_dump(mode="json", exclude_none=True),
        **extra,
    )
