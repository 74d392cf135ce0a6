"""Rollouts that meet a fault, on the 3-host lab, with a load client sending requests through the router the
whole time: a config vLLM's parser rejects (the canary refuses it, the rollout stops there), then one that fails at
start and one that starts but fails the smoke test, met at once on two hosts. After each, every node passes the
smoke test on the config it has. (A host cut off mid-rollout is met behind the router, in test_rollout_router.py:
the rollout it stops is the one those tests finish.)"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.converge.rollout_helpers import (
    LOAD_PAUSE_S,
    MODEL,
    _ssh,
    all_serving,
    assert_all_pass_smoke,
    config_of,
    lab_profile,
    rollout,
    router,
    snapshot,
)
from vllm_fleet.deploy.ansible import PlaybookResult
from vllm_fleet.profiles.render import render
from vllm_fleet.rollout.load import LoadClient

pytestmark = pytest.mark.lab


@pytest.fixture
def serving_lab(first_converge: PlaybookResult, site: Any) -> Any:
    assert first_converge.ok
    all_serving(site)
    return site


def faulty_rollout(site: Any, change: dict[str, Any]) -> tuple[PlaybookResult, dict[str, dict[str, Any]]]:
    """Roll the lab profile's config with ``change`` applied, under load; the result and the hosts before it.
    The faulty rollout must fail, and no request through the router may."""
    before = snapshot(site)
    with LoadClient(site.router_url, MODEL, pause=LOAD_PAUSE_S) as load:
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


def test_configs_that_fail_at_start_or_at_the_smoke_test_roll_their_hosts_back(serving_lab: Any) -> None:
    """Two rollouts at once, each of one host (vllm_fleet_hosts), under one load through the router; the third host
    serves it. One config starts and fails: vLLM's parser and engine config accept it (check_config.py
    --engine-config, measured), the engine raises after loading the weights ("No available memory for the cache
    blocks" in 4 KiB). The other starts and answers /health, under another model name than the profile's: the smoke
    gate fails it. Each host is back on its last-known-good config (restarted on it) and in the router."""
    site = serving_lab
    at_start, at_smoke, serving = site.state.hosts
    faults: dict[str, dict[str, Any]] = {
        at_start.name: {"kv-cache-memory-bytes": 4096},
        at_smoke.name: {"served-model-name": "not-the-lab-model"},
    }
    before = snapshot(site)

    def roll(name: str) -> PlaybookResult:
        return rollout(site, {**render(lab_profile()).config, **faults[name]}, lab_profile(), vllm_fleet_hosts=name)

    with LoadClient(site.router_url, MODEL, pause=LOAD_PAUSE_S) as load, ThreadPoolExecutor(len(faults)) as pool:
        results = dict(zip(faults, pool.map(roll, faults), strict=True))
    assert load.report.failed == [] and load.report.ok > 0, load.report
    assert not any(r.ok for r in results.values()), {n: r.stats for n, r in results.items()}
    assert results[at_start.name].count("failures", at_start.name) >= 1
    after = snapshot(site)
    for name in faults:
        assert after[name]["config"] == before[name]["config"], name
        assert after[name]["journal"]["phase"] == "rolled-back", (name, after[name]["journal"])
        assert after[name]["pid"] != before[name]["pid"], name  # it did restart, on the new config and back
        state = router(site).state(name)
        assert (state.admin, state.operational) == ("ready", "up"), name
    assert "not-the-lab-model" not in config_of(_ssh(site, at_smoke))
    assert after[serving.name] == before[serving.name]  # in neither rollout: not touched
    assert_all_pass_smoke(site, dict.fromkeys(before, lab_profile()))
