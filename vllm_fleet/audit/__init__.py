"""`vllm-fleet audit`: what every node really runs, against what its profile says it should.

collect (edge: SSH, HTTP; read-only) → evidence bundle (files + sha256 manifest) → reconcile (pure: findings
from the bundle alone) → reports (table, JSON, JUnit). Re-judging a saved bundle gives the same findings.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from vllm_fleet.audit.collect import Target, collect
from vllm_fleet.audit.evidence import read_bundle, write_bundle
from vllm_fleet.audit.reconcile import Finding, judge
from vllm_fleet.audit.report import HostInfo, exit_code, to_json, to_junit
from vllm_fleet.audit.waivers import load_waivers, waiver_for


@dataclass(frozen=True)
class AuditResult:
    findings: list[Finding]
    out: Path
    wall_s: float

    @property
    def exit_code(self) -> int:
        return exit_code(self.findings)


WAIVERS = "waivers.yaml"


def judge_bundle(bundle: Path) -> list[Finding]:
    """Every finding of a saved evidence bundle (checked against its manifest first), with its waivers applied
    as of the collection day."""
    hosts = read_bundle(bundle)
    findings = [f for desired, ev, manifest in hosts for f in judge(desired, ev, manifest)]
    if not (bundle / WAIVERS).is_file():
        return findings
    waivers = load_waivers(bundle / WAIVERS)
    day = dt.datetime.fromtimestamp(min(ev.started_at for _, ev, _ in hosts), dt.UTC).date() if hosts else None
    if day is None:
        return findings
    return [
        replace(f, waiver=waiver_for(waivers, f.check, f.host, day)) if f.status == "failed" else f for f in findings
    ]


def write_reports(findings: list[Finding], out: Path, bundle: Path, controls: Path | None = None) -> None:
    """Every report of one audit under ``out``: JSON, JUnit, HDF (``hdf/<host>.hdf.json``), OSCAL, HTML.

    ``bundle``: its evidence, for what the reports say of each host and where they point to it; ``controls``: a
    user's check → control mapping."""
    from vllm_fleet.audit.hdf import write_hdf
    from vllm_fleet.audit.html import to_html
    from vllm_fleet.audit.oscal import load_controls, to_oscal

    hosts = [HostInfo.of(desired, ev) for desired, ev, _ in read_bundle(bundle)]
    generated_at = max((h.finished_at for h in hosts), default=None) or None
    evidence = os.path.relpath(bundle, out) + "/"
    (out / "audit.json").write_text(to_json(findings, generated_at), encoding="utf-8")
    (out / "audit.junit.xml").write_text(to_junit(findings), encoding="utf-8")
    (out / "audit.html").write_text(
        to_html(findings, hosts, generated_at=generated_at, evidence=evidence), encoding="utf-8"
    )
    oscal = to_oscal(
        findings, hosts, generated_at=generated_at, controls=load_controls(controls), evidence_href=evidence
    )
    (out / "audit.oscal.json").write_text(oscal, encoding="utf-8")
    write_hdf(out / "hdf", findings, hosts, generated_at=generated_at)  # one HDF document per host


def audit(
    targets: list[Target],
    out: Path,
    *,
    private_key: str | None = None,
    api_key: str | None = None,
    waivers: Path | None = None,
    controls: Path | None = None,
) -> AuditResult:
    """Collect every host in parallel into ``out/evidence``, judge the bundle, write the reports under ``out``."""
    start = time.monotonic()
    extra = {}
    if waivers is not None:
        load_waivers(waivers)  # refuse a bad file before any host is read
        extra[WAIVERS] = waivers.read_text(encoding="utf-8")
    evidence = collect(targets, private_key=private_key, api_key=api_key)
    bundle = out / "evidence"
    write_bundle(bundle, [(t.desired, ev) for t, ev in zip(targets, evidence, strict=True)], extra)
    findings = judge_bundle(bundle)
    write_reports(findings, out, bundle, controls)
    return AuditResult(findings, out, time.monotonic() - start)


__all__ = ["AuditResult", "Finding", "Target", "audit", "judge_bundle", "write_reports"]
