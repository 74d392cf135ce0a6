"""The rollout's final report: each host's outcome from what it has after the run (config on disk, journal)."""

from __future__ import annotations

import json

import pytest

from tests.audit_samples import b64
from vllm_fleet.audit.evidence import HostEvidence, sha256_text
from vllm_fleet.rollout.report import host_outcome, outcome, summary, to_json

OLD, NEW = "a" * 64, "b" * 64


@pytest.mark.parametrize(
    ("before", "now", "phase", "error", "want"),
    [
        (OLD, NEW, "done", None, "moved"),
        (None, NEW, "done", None, "moved"),  # a new host
        (NEW, NEW, None, None, "unchanged"),
        (OLD, OLD, None, None, "untouched"),  # a later batch the rollout never reached
        (OLD, OLD, "rolled-back", None, "rolled back"),
        (OLD, OLD, "failed", None, "failed"),
        (OLD, NEW, "restarting", None, "interrupted"),
        (OLD, OLD, "drained", None, "interrupted"),
        (OLD, None, None, "ssh: timed out", "unreachable"),
    ],
)
def test_outcome(before: str | None, now: str | None, phase: str | None, error: str | None, want: str) -> None:
    assert outcome(before, NEW, now, phase, error)[0] == want


def test_a_cordoned_host_the_rollout_skipped_is_reported_with_its_reason() -> None:
    ev = HostEvidence("n1", "10.0.0.1", started_at=100.0)
    ev.remote = {"config": b64("model: x\n"), "journal": "", "cordon": "cordoned\nGPU 0 Xid 79, ticket 4711\n"}
    row = host_outcome("n1", OLD, NEW, ev, since=90.0)
    assert (row.outcome, row.detail) == (
        "cordoned",
        "skipped: cordoned (GPU 0 Xid 79, ticket 4711); uncordon it to roll it",
    )
    ev.remote["cordon"] = ""
    assert host_outcome("n1", OLD, NEW, ev, since=90.0).outcome == "untouched"
    # cordoned after it moved: it is on the new config, and the audit says it is cordoned
    assert outcome(OLD, NEW, NEW, "done", None, "ticket 4711")[0] == "moved"


def test_a_journal_from_an_earlier_run_does_not_count() -> None:
    text = "model: x\n"
    ev = HostEvidence("n1", "10.0.0.1", started_at=100.0)
    ev.remote = {"config": b64(text), "journal": json.dumps({"phase": "rolled-back", "at": 50.0})}
    old = host_outcome("n1", OLD, "c" * 64, ev, since=90.0)
    assert (old.outcome, old.phase) == ("untouched", None)  # rolled back last week, not touched by this run
    ev.remote["journal"] = json.dumps({"phase": "rolled-back", "at": 95.0})
    assert host_outcome("n1", OLD, "c" * 64, ev, since=90.0).outcome == "rolled back"
    moved = host_outcome("n1", OLD, sha256_text(text), HostEvidence("n1", "10.0.0.1", 0.0, remote=ev.remote), 90.0)
    assert moved.outcome == "rolled back"  # the journal of this run wins over a hash that happens to match
    rows = [old, host_outcome("n2", None, NEW, None, since=90.0)]
    assert summary(rows) == {"untouched": 1, "unreachable": 1}
    doc = json.loads(to_json(rows, error="pulumi up failed"))
    assert doc["ok"] is False and doc["summary"] == {"untouched": 1, "unreachable": 1}


def test_the_canary_analysis_the_journal_records_is_in_the_hosts_detail() -> None:
    url = "http://10.0.0.1:8000"
    analysis = {
        "decision": "rollback",
        "reasons": ["TTFT p95 1.9 s vs 0.41 s on the baseline (+363%, over the +50% allowed; p = 1e-06 < 0.01)"],
        "figures": {
            url: {"requests": 31, "ttft_p95_s": 1.9, "itl_mean_s": 0.031, "error_rate": 0.0},
            "baseline": {"requests": 64, "ttft_p95_s": 0.41, "itl_mean_s": 0.0205, "error_rate": 0.0},
            "p": {"ttft": 1e-06, "itl": 0.2, "errors": 1.0},
        },
    }
    ev = HostEvidence("n1", "10.0.0.1", started_at=100.0)
    journal = {"phase": "rolled-back", "at": 95.0, "analysis": analysis}
    ev.remote = {"config": b64("model: x\n"), "journal": json.dumps(journal), "cordon": ""}
    row = host_outcome("n1", OLD, NEW, ev, since=90.0)
    assert row.outcome == "rolled back"
    assert row.detail.endswith(
        "; canary analysis rollback: TTFT p95 1.9 s vs 0.41 s, ITL mean 31 ms vs 20.5 ms, requests 31 vs 64 "
        "(TTFT p95 1.9 s vs 0.41 s on the baseline (+363%, over the +50% allowed; p = 1e-06 < 0.01))"
    )
    analysis["decision"], analysis["reasons"] = "promote", ["\x1b]0;owned\x07"]
    ev.remote["journal"] = json.dumps({"phase": "done", "at": 95.0, "analysis": analysis})
    assert host_outcome("n1", OLD, NEW, ev, since=90.0).detail.endswith("requests 31 vs 64")  # reasons only when not
    ev.remote["journal"] = json.dumps({"phase": "done", "at": 95.0, "analysis": {"decision": "x\x1b[2J", "figures": 5}})
    assert host_outcome("n1", OLD, NEW, ev, since=90.0).detail.endswith("; canary analysis x\\x1b[2J")
    ev.remote["journal"] = json.dumps({"phase": "done", "at": 95.0, "analysis": {}})  # no canary: nothing said
    assert "canary" not in host_outcome("n1", OLD, NEW, ev, since=90.0).detail
