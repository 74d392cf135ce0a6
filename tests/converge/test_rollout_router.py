"""Rollouts behind the lab's real router (Debian's HAProxy), a load client sending requests through it the whole time:
a host cut off mid-rollout stops the rollout; the same rollout run again finishes it and drops no request, and the
values it carries (spaces, quotes, `%`, `$`, unicode) reach every server exactly. (A rollout killed with SIGKILL
after a host's restart, resumed without restarting it twice and leaving no host drained, is
tests/e2e/test_pulumi_lab.py's step 3: the controller crash kills ansible-playbook with `pulumi up`.) They run after
every test that needs the lab profile on the hosts (tests/conftest.py orders them, in this file's order), so they
leave the hosts on their new configs and need no rollout back."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.converge.rollout_helpers import (
    LOAD_PAUSE_S,
    MODEL,
    UNIT,
    _ssh,
    all_serving,
    assert_all_pass_smoke,
    config_of,
    journal,
    lab_profile,
    main_pid,
    rollout,
    router,
    snapshot,
    with_max_num_seqs,
)
from tests.fixtures_lab import converge
from vllm_fleet.deploy.ansible import PlaybookResult
from vllm_fleet.lab import network
from vllm_fleet.profiles.render import render
from vllm_fleet.rollout.load import LoadClient

pytestmark = pytest.mark.lab

NEW_SEQS = 6
"""The rollout the cut stops and the next test finishes: the lab profile with max_num_seqs 6."""
NOTE = 'say "héllo" — 100% ok, $HOME stays literal'
SCRATCH = "/srv/données partagées"
VALUES: dict[str, Any] = {
    "vllm_service_environment": {"VLLM_FLEET_NOTE": NOTE, "VLLM_FLEET_EMPTY": ""},
    "vllm_service_read_write_paths": [f"-{SCRATCH}"],
}
"""What that rollout also carries: legitimate values with spaces, quotes, `%`, `$` and unicode. The trust boundary
refuses syntax, not text: they pass through Ansible (as data) and the unit (quoted for systemd) to the server."""


def assert_values_reach_the_server(h: Any) -> None:
    pid = main_pid(h)
    environ = h.run(f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout.splitlines()
    for name, value in VALUES["vllm_service_environment"].items():
        assert f"{name}={value}" in environ, [e for e in environ if e.startswith("VLLM_FLEET")]
    assert SCRATCH in h.run(f"systemctl show -p ReadWritePaths --value {UNIT}").stdout


def canary_command(window_s: int, min_requests: int, max_ttft_increase: float, warmup_s: int) -> list[str]:
    """vllm-fleet's canary analysis as the role runs it (rollout.yml's vllm_fleet_canary_command); the default
    two windows."""
    vllm_fleet = str(Path(sys.executable).parent / "vllm-fleet")
    return [vllm_fleet, "canary", "--window", str(window_s), "--min-requests", str(min_requests),
            "--max-ttft-increase", str(max_ttft_increase), "--warmup", str(warmup_s)]  # fmt: skip


def test_a_canary_slower_than_the_baseline_is_rolled_back(
    first_converge: PlaybookResult, site: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A profile that passes health and smoke but prefills 8 tokens a step (max_num_batched_tokens 8, the lab
    profile's 2048) under 6 client streams of distinct ~480-token prompts: the canary serves its share through the
    router (a warm-up, then two analysis windows), its TTFT is compared with the two hosts still on the old profile in
    each window, and it is rolled back (drained first) with the figures of both windows in its journal; the other
    hosts are untouched and no client request fails.
    The load starts when the canary re-enters the router for its window and runs through the rollback (a drain and
    a restart under load); the canary's first restart is no part of this test (a restart under load is the rollout
    tests' below) and runs on an idle lab, at half the time.
    (Measured: max_num_seqs 1 is not slower on this lab: 3 CPU engines share 2 cores, and the canary serving one
    sequence at a time answered faster, TTFT p95 0.50 s against 0.94 s: promoted, rightly. 16 tokens a step under
    clients that pause 2 s: TTFT p95 0.65 s against 0.48 s, +35 %, p = 0.012: promoted, rightly by the rule; 8 tokens
    a step: 0.74 s against 0.48 s, +52 %, p = 0.0001.)"""
    assert first_converge.ok
    all_serving(site)
    first, *others = site.state.hosts
    before = snapshot(site)
    lab = lab_profile()
    slow = lab.model_copy(update={"scheduler": lab.scheduler.model_copy(update={"max_num_batched_tokens": 8})})
    prompt = " the servers hum along in the night" * 60
    # Each client pauses past vLLM's busy-wait (LOAD_PAUSE_S): a spinning engine would slow the rollback's restart 2x.
    # Distinct prompts (no prefix-cache hit): every request prefills its ~480 tokens, in one step on the baseline
    # and in 8-token steps on the canary. (A worker repeating its prompt hits the cache after its first request,
    # leaving little for the step size to slow: the +35 % and +52 % measured below.)
    load = LoadClient(site.router_url, MODEL, workers=6, pause=LOAD_PAUSE_S, prompt=prompt, distinct=True)
    window = threading.Event()
    stop = threading.Event()

    def load_from_the_window() -> None:
        """Out of the router for its restart, then back in for the window: the load starts."""
        r, drained = router(site), False
        while not stop.wait(0.2):
            try:
                admin = r.state(first.name).admin
            except (OSError, ValueError, KeyError):  # a busy socket: ask again
                continue
            drained = drained or admin == "drain"
            if drained and admin == "ready":
                load.__enter__()
                window.set()
                return

    watcher = threading.Thread(target=load_from_the_window, daemon=True)
    watcher.start()
    try:
        # A regression of a quarter of the TTFT is what this stack rolls back (the default is +50 %: measured +52 %
        # and +35 % for this profile on this lab, too near it for a test).
        # Two windows of 20 s after 10 s of warm-up (the load ramps up in it): the rollback needs both.
        command = canary_command(20, 8, 0.25, warmup_s=10)
        result = rollout(site, render(slow).config, slow, vllm_fleet_canary_command=command)
    finally:
        stop.set()
        watcher.join(10)
        if window.is_set():
            load.__exit__(None, None, None)
    assert window.is_set(), "the canary was never seen back in the router for its window"
    assert not result.ok
    h = _ssh(site, first)
    entry = journal(h)
    analysis = entry.get("analysis", {})
    with capsys.disabled():
        print(f"\nslow canary analysis: {json.dumps(analysis)}; load: {load.report.ok} ok")
    assert entry["phase"] == "rolled-back" and analysis["decision"] == "rollback", entry
    assert any(reason.startswith("TTFT p95 ") for reason in analysis["reasons"]), analysis
    assert analysis["reasons"][-1] == "the regression held in each of 2 consecutive windows", analysis
    assert [w["decision"] for w in analysis["earlier"]] == ["rollback"], analysis
    assert "max-num-seqs: 8" in config_of(h)  # back on the lab profile
    assert snapshot(site, others) == {o.name: before[o.name] for o in others}  # untouched
    assert load.report.failed == [] and load.report.ok > 0, (load.report.ok, load.report.failed[:5])
    router(site).wait_serving(first.name, 60)


def test_a_host_cut_off_mid_rollout_stops_it(first_converge: PlaybookResult, site: Any) -> None:
    assert first_converge.ok
    all_serving(site)
    first, second, third = site.state.hosts
    before = snapshot(site)
    new = with_max_num_seqs(NEW_SEQS)
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
        # is the fault), and must not hold the client for the router's 300 s server timeout. Each pauses between
        # requests, so the serving hosts idle between them (a spinning host slows the restart on 2 cores).
        with LoadClient(site.router_url, MODEL, workers=2, timeout=20, pause=LOAD_PAUSE_S) as load:
            result = rollout(site, render(new).config, new, **VALUES)
            watcher.join()
            assert cut, "the canary was never seen restarting"
            ok_at_cut, deadline = load.report.ok, time.monotonic() + 60
            while load.report.ok <= ok_at_cut and time.monotonic() < deadline:
                time.sleep(1)
            assert load.report.ok > ok_at_cut, load.report  # the others keep serving through the router
        assert not result.ok
        assert result.count("dark", second.name) == 1, result.stats  # reported unreachable
        after_first = _ssh(site, first)
        assert f"max-num-seqs: {NEW_SEQS}" in config_of(after_first) and journal(after_first)["phase"] == "done"
        assert_values_reach_the_server(after_first)
        assert snapshot(site, [third])[third.name] == before[third.name]  # the batch after the cut never started
    finally:
        network.set_host_link(second.index, up=True)
    router(site).wait_serving(second.name, 60)  # back on its cable, still serving its old config
    assert snapshot(site)[second.name] == before[second.name]
    assert_all_pass_smoke(site, {first.name: new, second.name: lab_profile(), third.name: lab_profile()})


def test_rollout_behind_the_router_drops_no_request(first_converge: PlaybookResult, site: Any) -> None:
    """The rollout the cut stopped, run again: every host not yet on the new config restarts, one at a time,
    behind the router, and not one request fails; a host already on it (the canary that finished) is not
    restarted. Alone (no cut before it), every host restarts. Every host then runs the rollout's VALUES exactly."""
    assert first_converge.ok
    all_serving(site)
    hosts = {h.name: _ssh(site, h) for h in site.state.hosts}
    before = {name: main_pid(h) for name, h in hosts.items()}
    moved = {name for name, h in hosts.items() if f"max-num-seqs: {NEW_SEQS}" in config_of(h)}
    assert len(moved) < len(hosts) - 1, moved  # at least two hosts to roll: the load must cross a restart
    with LoadClient(site.router_url, MODEL, pause=LOAD_PAUSE_S) as load:
        result = converge(site, "rollout.yml", vllm_config=render(with_max_num_seqs(NEW_SEQS)).config, **VALUES)
    assert result.ok, result.stats
    report = load.report
    assert report.failed == [], report.failed[:5]
    assert report.ok >= 20, report  # requests really flowed during the whole rollout
    for name, h in hosts.items():
        assert f"max-num-seqs: {NEW_SEQS}" in config_of(h)
        if name in moved:
            assert main_pid(h) == before[name], name  # already on the new config: not restarted
        else:
            assert main_pid(h) != before[name], name  # restarted on the new config
        assert journal(h)["phase"] == "done"
        assert_values_reach_the_server(h)
        state = router(site).state(name)
        assert (state.admin, state.operational) == ("ready", "up")
