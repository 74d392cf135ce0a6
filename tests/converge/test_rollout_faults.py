"""Rollouts that meet a fault, on the 3-host lab, with a load client sending requests through the router the
whole time: a config vLLM's parser rejects, one that fails at start, one that starts but fails the smoke test.
After each, every node passes the smoke test on the config it has. (A host cut off mid-rollout is met behind the
router, in test_rollout_router.py: the rollout it stops is the one those tests finish.)"""

from __future__ import annotations

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
