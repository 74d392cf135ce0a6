"""`vllm-fleet audit`: what every node really runs, against what its profile says it should.

collect (edge: SSH, HTTP; read-only) → evidence bundle (files + sha256 manifest) → reconcile (pure: findings
from the bundle alone) → reports (table, JSON, JUnit). Re-judging a saved bundle gives the same findings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from vllm_fleet.audit.collect import Target, collect
from vllm_fleet.audit.evidence import read_bundle, write_bundle
from vllm_fleet.audit.reconcile import Finding, judge
from vllm_fleet.audit.report import exit_code, to_json, to_junit


@dataclass(frozen=True)
class AuditResult:
    findings: list[Finding]
    out: Path
    wall_s: float

    @property
    def exit_code(self) -> int:
        return exit_code(self.findings)


def judge_bundle(bundle: Path) -> list[Finding]:
    """Every finding of a saved evidence bundle (checked against its manifest first)."""
    return [f for desired, ev, manifest in read_bundle(bundle) for f in judge(desired, ev, manifest)]


def write_reports(findings: list[Finding], out: Path) -> None:
    (out / "audit.json").write_text(to_json(findings), encoding="utf-8")
    (out / "audit.junit.xml").write_text(to_junit(findings), encoding="utf-8")


def audit(
    targets: list[Target], out: Path, *, private_key: str | None = None, api_key: str | None = None
) -> AuditResult:
    """Collect every host in parallel into ``out/evidence``, judge the bundle, write the reports under ``out``."""
    start = time.monotonic()
    evidence = collect(targets, private_key=private_key, api_key=api_key)
    bundle = out / "evidence"
    write_bundle(bundle, [(t.desired, ev) for t, ev in zip(targets, evidence, strict=True)])
    findings = judge_bundle(bundle)
    write_reports(findings, out)
    return AuditResult(findings, out, time.monotonic() - start)


__all__ = ["AuditResult", "Finding", "Target", "audit", "judge_bundle", "write_reports"]
