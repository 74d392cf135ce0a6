"""Every read from a node is bounded: against a hostile node (tests/hostile_node.py, a real server on loopback) the
reads of the audit, smoke, bench and router end within their deadline and size bound, each naming the bound, and
node bytes that are not UTF-8 are kept, not fatal. Time limits here are hang guards several times the bound."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.hostile_node import NOT_UTF8, DripServer, DripUnixServer, HostileNode, free_port
from vllm_fleet.trust.node_reads import (
    NodeReadError,
    ReadBounds,
    client,
    get_all,
    get_one,
    run_bounded,
    run_sync,
    stream_lines,
)

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIHeeJukZjp0s2DKI5E6HuAERmgsC49tKSiBPF+l7U7h"
"""A real ed25519 public key (any: the dripping SSH side never gets as far as showing one)."""
FAST = ReadBounds(request_s=1.5, stream_s=2.0, ssh_s=2.0, json_bytes=64 * 1024, metrics_bytes=1 << 20)


@pytest.fixture(scope="module")
def node() -> Iterator[HostileNode]:
    with HostileNode() as server:
        yield server


def timed(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.monotonic()
    try:
        return fn(*args, **kwargs), time.monotonic() - start
    except Exception as err:
        return err, time.monotonic() - start


def test_a_dripping_answer_ends_at_the_request_deadline(node: HostileNode) -> None:
    err, took = timed(get_one, node.url("drip"), "/version", bounds=FAST)
    assert isinstance(err, NodeReadError) and err.bound == "deadline", err
    assert "1.5 s" in str(err) and "request deadline" in str(err)
    assert 1.4 < took < 4.0  # the total, not one read: each byte comes within the per-read timeout


def test_an_endless_body_is_cut_at_its_size_bound_without_holding_it(node: HostileNode) -> None:
    tracemalloc.start()
    try:
        err, _ = timed(get_one, node.url("flood"), "/metrics", bounds=FAST)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(err, NodeReadError) and err.bound == "size" and "1 MiB" in str(err), err
    assert peak < 8 * FAST.metrics_bytes
    err, _ = timed(get_one, node.url("flood"), "/version", bounds=FAST)  # JSON endpoints: the smaller bound
    assert isinstance(err, NodeReadError) and "64 KiB" not in str(err) and "65536 bytes" in str(err), err


def test_a_declared_length_over_the_bound_is_refused_before_reading(node: HostileNode) -> None:
    err, took = timed(get_one, node.url("flood-declared"), "/metrics", bounds=FAST)
    assert isinstance(err, NodeReadError) and "1073741824 bytes" in str(err), err
    assert took < 1.0


def test_a_redirect_is_the_answer_not_followed(node: HostileNode) -> None:
    answer = get_one(node.url("redirect"), "/version", bounds=FAST)
    assert answer.status == 302


def test_bytes_that_are_not_utf8_are_kept(node: HostileNode) -> None:
    answer = get_one(node.url("escapes"), "/metrics", bounds=FAST)
    assert answer.body.endswith(NOT_UTF8)
    assert answer.text.encode("utf-8", "surrogateescape") == answer.body


def test_a_refused_connection_is_an_error_not_a_traceback() -> None:
    results = get_all(f"http://127.0.0.1:{free_port()}", ["/version", "/metrics"], bounds=FAST)
    assert all(isinstance(r, NodeReadError) and r.bound is None for r in results.values())


@pytest.mark.parametrize("behaviour", ["hang", "noline"])
def test_a_stream_ends_within_its_bounds(node: HostileNode, behaviour: str) -> None:
    async def read() -> int:
        http = client(node.url(behaviour), bounds=replace(FAST, request_s=FAST.stream_s))
        async with http, asyncio.timeout(FAST.stream_s), http.stream("POST", "/v1/completions", json={}) as r:
            return len([line async for line in stream_lines(r, FAST)])

    err, took = timed(run_sync, read())
    expected = TimeoutError if behaviour == "hang" else NodeReadError
    assert isinstance(err, expected), err
    assert took < 6.0


def test_ssh_output_is_bounded_in_time_and_size() -> None:
    drip = ["sh", "-c", "while :; do printf x; sleep 0.2; done"]
    err, took = timed(run_sync, run_bounded(drip, deadline_s=1.0, max_bytes=1 << 20, what="ssh drip"))
    assert isinstance(err, NodeReadError) and err.bound == "deadline" and "ssh drip" in str(err), err
    assert took < 4.0
    flood = ["sh", "-c", "yes"]
    err, _ = timed(run_sync, run_bounded(flood, deadline_s=10.0, max_bytes=1 << 20, what="ssh flood"))
    assert isinstance(err, NodeReadError) and err.bound == "size", err
    ok = run_sync(run_bounded(["sh", "-c", "cat; printf '\\377'"], stdin=b"hi", deadline_s=10, max_bytes=99, what="x"))
    assert (ok.returncode, ok.stdout) == (0, b"hi\xff")


def test_the_audit_collection_of_a_dripping_host_ends_at_its_deadline(node: HostileNode) -> None:
    """The SSH side drips (a real TCP server playing sshd), the HTTP side drips: the host is one error naming the
    bound, within the SSH deadline."""
    from tests.audit_samples import sample_desired
    from vllm_fleet.audit.collect import Target, collect
    from vllm_fleet.audit.reconcile import judge

    with DripServer(b"S") as ssh_side:
        desired = replace(sample_desired(), address="127.0.0.1", port=node.port)
        target = Target(desired, ssh_port=ssh_side.port, host_key=HOST_KEY)
        bounds = ReadBounds(request_s=1.0, ssh_s=2.0)
        (ev,), took = timed(collect, [target], bounds=bounds)
    assert took < 8.0
    assert ev.error is not None and "2 s" in ev.error and "deadline" in ev.error, ev.error
    assert [(f.check, f.status) for f in judge(desired, ev)] == [("VF-REACH", "error")]


def test_the_router_does_not_hang_on_a_dripping_stats_socket(tmp_path: Path) -> None:
    from vllm_fleet.rollout import router

    with DripUnixServer(tmp_path / "stats.sock"):
        err, took = timed(router.HAProxyRouter(tmp_path / "stats.sock").command, "show servers state")
    assert isinstance(err, router.RouterError) and "no whole reply" in str(err), err
    assert took < router.SOCKET_TIMEOUT_S + 3


def test_smoke_against_hostile_nodes_is_could_not_check_on_time(node: HostileNode) -> None:
    from vllm_fleet.probes.smoke import CANNOT_CHECK, FAIL, smoke
    from vllm_fleet.profiles.loader import load_profile

    profile = load_profile("cpu-lab")
    result, took = timed(smoke, node.url("drip"), profile, timeout_s=2.0, bounds=FAST)
    assert result.exit_code == CANNOT_CHECK and "request deadline" in (result.reason or ""), result
    assert took < 6.0
    result = smoke(node.url("shapes"), profile, timeout_s=2.0, bounds=FAST)  # /health is an HTML page (200)
    assert result.exit_code == CANNOT_CHECK and "not an OpenAI model list" in (result.reason or ""), result
    result = smoke(node.url("lies"), profile, timeout_s=2.0, bounds=FAST)
    assert result.exit_code == FAIL and result.checks[0].name == "model" and result.checks[0].status == "fail"
    result = smoke("http://[::1", profile, timeout_s=2.0, bounds=FAST)
    assert result.exit_code == CANNOT_CHECK and "not a URL" in (result.reason or "")


def test_bench_against_a_hanging_stream_is_one_error_on_time(node: HostileNode) -> None:
    from vllm_fleet.cli.bench import BenchError, sweep
    from vllm_fleet.profiles.loader import load_profile

    err, took = timed(sweep, node.url("hang"), load_profile("cpu-lab"), [1], bounds=FAST)
    assert isinstance(err, BenchError) and "2 s" in str(err), err
    assert took < 8.0
    err, _ = timed(sweep, node.url("noline"), load_profile("cpu-lab"), [1], bounds=FAST)
    assert isinstance(err, BenchError) and "stream line" in str(err), err
    assert json.dumps(str(err))  # one line of text
