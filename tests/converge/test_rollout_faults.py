"""Rollouts that meet a fault, on the 3-host lab, with a load client sending requests through the router the
whole time: a config vLLM's parser rejects, one that fails at start, one that starts but fails the smoke test,
and a host cut off mid-rollout. After each, every reachable node passes the smoke test on the config it has."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.converge.test_rollout_router import _ssh, all_serving, config_of, journal, main_pid, router
from tests.fixtures_lab import converge
from vllm_fleet.ansible import PlaybookResult
from vllm_fleet.lab import network
from vllm_fleet.profile import DecodeProfile
from vllm_fleet.profile_loader import load_profile
from vllm_fleet.rollout.load import LoadClient
from vllm_fleet.smoke import smoke
from vllm_fleet.vllm.render import render

pytestmark = pytest.mark.lab

MODEL = "tiny-llama-lab"


def lab_profile() -> DecodeProfile:
    return load_profile("cpu-lab")


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


def rollout(site: Any, config: dict[str, Any], profile: DecodeProfile) -> PlaybookResult:
    # The profile the smoke gate judges against is given as data with the config, as the Pulumi program does.
    return converge(
        site,
        "rollout.yml",
        vllm_config=config,
        vllm_fleet_profile_data=profile.model_dump(mode="json", exclude_none=True),
    )


def assert_canary_failed_the_rest_untouched(site: Any, before: dict[str, dict[str, Any]], phase: str) -> None:
    """The canary (first host) is back on its last-known-good and in the router; the others never moved."""
    after = snapshot(site)
    canary, *rest = (h.name for h in site.state.hosts)
    assert after[canary]["config"] == before[canary]["config"]
    assert after[canary]["journal"]["phase"] == phase
    state = router(site).state(canary)
    assert (state.admin, state.operational) == ("ready", "up")
    for name in rest:
        assert after[name] == before[name], name  # same process, same config, same journal: not touched


@pytest.fixture
def serving_lab(first_converge: PlaybookResult, site: Any) -> Any:
    assert first_converge.ok
    all_serving(site)
    return site


def faulty_rollout(site: Any, change: dict[str, Any]) -> tuple[PlaybookResult, dict[str, dict[str, Any]]]:
    """Roll the lab profile's config with ``change`` applied, under load; the result and the hosts before it.
    The faulty rollout must fail, and no request through the router may."""
    before = snapshot(site)
    with LoadClient(site.router_url, MODEL) as load:
        result = rollout(site, {**render(lab_profile()).config, **change}, lab_profile())
    assert not result.ok
    assert load.report.failed == [] and load.report.ok > 0, load.report
    return result, before


def test_a_config_the_parser_rejects_restarts_no_host(serving_lab: Any) -> None:
    site = serving_lab
    result, before = faulty_rollout(site, {"max-num-seqs": "many"})
    assert result.count("failures", site.state.hosts[0].name) == 1  # the canary refused it, before any restart
    assert snapshot(site) == before  # no host restarted, no config or journal written
    assert_all_pass_smoke(site, dict.fromkeys(before, lab_profile()))


def test_a_config_that_fails_at_start_rolls_the_canary_back(serving_lab: Any) -> None:
    site = serving_lab
    # vLLM's parser and engine config accept it (check_config.py --engine-config, measured); the engine raises
    # after loading the weights: "No available memory for the cache blocks" in 4 KiB.
    result, before = faulty_rollout(site, {"kv-cache-memory-bytes": 4096})
    assert result.count("failures", site.state.hosts[0].name) >= 1
    assert_canary_failed_the_rest_untouched(site, before, "rolled-back")
    assert_all_pass_smoke(site, dict.fromkeys(before, lab_profile()))


def test_a_config_that_fails_the_smoke_test_rolls_the_canary_back(serving_lab: Any) -> None:
    site = serving_lab
    # It starts and answers /health, but under another model name than the profile's: the smoke gate fails.
    _, before = faulty_rollout(site, {"served-model-name": "not-the-lab-model"})
    assert "not-the-lab-model" not in config_of(_ssh(site, site.state.hosts[0]))
    assert_canary_failed_the_rest_untouched(site, before, "rolled-back")
    assert_all_pass_smoke(site, dict.fromkeys(before, lab_profile()))


def test_a_host_cut_off_mid_rollout_stops_it(serving_lab: Any) -> None:
    site = serving_lab
    first, second, third = site.state.hosts
    before = snapshot(site)
    lab = lab_profile()
    new = lab.model_copy(update={"scheduler": lab.scheduler.model_copy(update={"max_num_seqs": 6})})
    cut: dict[str, float] = {}

    def unplug_second_while_first_restarts() -> None:
        h = _ssh(site, first)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if journal(h).get("phase") == "restarting":
                network.set_host_link(second.index, up=False)
                cut["at"] = time.monotonic()
                return
            time.sleep(0.3)

    watcher = threading.Thread(target=unplug_second_while_first_restarts)
    watcher.start()
    try:
        # Two workers with a short timeout: a request in flight to the host when its cable goes is lost (that
        # is the fault), and must not hold the client for the router's 300 s server timeout.
        with LoadClient(site.router_url, MODEL, workers=2, timeout=20) as load:
            result = rollout(site, render(new).config, new)
            watcher.join()
            assert cut, "the canary was never seen restarting"
            ok_at_cut = load.report.ok
            time.sleep(6)  # the others keep serving through the router
            assert load.report.ok > ok_at_cut, load.report
        assert not result.ok
        assert result.count("dark", second.name) == 1, result.stats  # reported unreachable
        after_first = _ssh(site, first)
        assert "max-num-seqs: 6" in config_of(after_first) and journal(after_first)["phase"] == "done"
        assert snapshot(site, [third])[third.name] == before[third.name]  # the batch after the cut never started
    finally:
        network.set_host_link(second.index, up=True)
    router(site).wait_serving(second.name, 60)  # back on its cable, still serving its old config
    assert snapshot(site)[second.name] == before[second.name]
    assert_all_pass_smoke(site, {first.name: new, second.name: lab_profile(), third.name: lab_profile()})
    # The fleet back on the lab profile: the next tests expect it.
    restored = converge(site, "rollout.yml")
    assert restored.ok, restored.stats
    assert all("max-num-seqs: 8" in config_of(_ssh(site, h)) for h in site.state.hosts)
