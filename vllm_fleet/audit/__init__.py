"""`vllm-fleet audit`: what every node really runs, against what its profile says it should.

collect (edge: SSH, HTTP; read-only) → evidence bundle (files + sha256 manifest) → reconcile (pure: findings
from the bundle alone) → reports (table, JSON, JUnit). Re-judging a saved bundle gives the same findings.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from vllm_fleet.audit.collect import Target, collect
from vllm_fleet.audit.evidence import (
    WAIVERS,
    Bundle,
    BundleError,
    load_bundle,
    read_confined,
    write_bundle,
)
from vllm_fleet.audit.reconcile import Finding, judge
from vllm_fleet.audit.report import HostInfo, exit_code, to_json, to_junit
from vllm_fleet.audit.signature import SIGNATURE, SignatureError, Verdict, sign, verify
from vllm_fleet.audit.waivers import load_waivers, parse_waivers, waiver_for
from vllm_fleet.trust.node_reads import DEFAULT_BOUNDS, ReadBounds
from vllm_fleet.trust.user_yaml import parse_user_yaml


@dataclass(frozen=True)
class AuditResult:
    findings: list[Finding]
    out: Path
    wall_s: float

    @property
    def exit_code(self) -> int:
        return exit_code(self.findings)


@dataclass(frozen=True)
class Judged:
    """The findings of a bundle, and what the report says of where they come from."""

    findings: list[Finding]
    waivers: str
    """Where the waivers came from: the auditor's --waivers file, the bundle's (listed in its manifest), or none."""
    bundle: Bundle
    """The bundle as read and checked once: the reports describe its hosts from it, not from a second read."""
    signature: Verdict | None = None

    def provenance(self) -> dict[str, object]:
        return {"waivers": self.waivers, "signature": self.signature.to_dict() if self.signature else None}


def _judge(bundle: Bundle, waivers: Path | None) -> Judged:
    findings = [f for desired, ev, manifest in bundle.hosts for f in judge(desired, ev, manifest)]
    if waivers is not None:
        rules, source = load_waivers(waivers), f"--waivers {waivers}"
    elif bundle.waivers_text is not None:
        rules, source = parse_waivers(parse_user_yaml(bundle.waivers_text, WAIVERS), WAIVERS), f"the bundle's {WAIVERS}"
    else:
        return Judged(findings, "none", bundle)
    day = dt.datetime.fromtimestamp(min(ev.started_at for _, ev, _ in bundle.hosts), dt.UTC).date()
    waived = [
        replace(f, waiver=waiver_for(rules, f.check, f.host, day)) if f.status == "failed" else f for f in findings
    ]
    return Judged(waived, source, bundle)


def judge_bundle(bundle: Path, waivers: Path | None = None) -> list[Finding]:
    """Every finding of a saved evidence bundle (read from the files its manifest lists, each checked), with the
    waivers applied as of the collection day: ``waivers`` when given, else the waivers file the manifest lists."""
    return _judge(load_bundle(bundle), waivers).findings


def rejudge(bundle: Path, *, waivers: Path | None, allowed_signers: Path | None, unsigned: bool = False) -> Judged:
    """An auditor's re-judge of a bundle (``audit --evidence``): its signature verified against ``allowed_signers``
    first; an unsigned or unverified bundle is refused (SignatureError) unless ``unsigned``."""
    loaded = load_bundle(bundle)
    try:
        signature = read_confined(bundle, SIGNATURE, 64 * 1024)
    except BundleError:
        signature = None
    verdict = verify(loaded.manifest_bytes, signature, allowed_signers)
    if not verdict.verified and not unsigned:
        fix = "pass --allowed-signers FILE (the keys you trust)" if verdict.signed else "ask for a signed bundle"
        raise SignatureError(f"{bundle}: {verdict.detail}; {fix}, or --unsigned to judge it anyway")
    return replace(_judge(loaded, waivers), signature=verdict)


def write_reports(
    judged: Judged,
    out: Path,
    bundle: Path,
    controls: Path | None = None,
) -> None:
    """Every report of one audit under ``out``: JSON, JUnit, HDF (``hdf/<host>.hdf.json``), OSCAL, HTML.

    ``judged``: the findings and the bundle they were judged from (what the reports say of each host);
    ``bundle``: where that bundle lies (the reports point to it); ``controls``: a user's check → control mapping."""
    from vllm_fleet.audit.hdf import write_hdf
    from vllm_fleet.audit.html import to_html
    from vllm_fleet.audit.oscal import load_controls, to_oscal

    findings, provenance = judged.findings, judged.provenance() if judged.signature else None
    hosts = [HostInfo.of(desired, ev) for desired, ev, _ in judged.bundle.hosts]
    generated_at = max((h.finished_at for h in hosts), default=None) or None
    evidence = os.path.relpath(bundle, out) + "/"
    (out / "audit.json").write_text(to_json(findings, generated_at, provenance), encoding="utf-8")
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
    sign_key: Path | None = None,
    bounds: ReadBounds = DEFAULT_BOUNDS,
) -> AuditResult:
    """Collect every host in parallel into ``out/evidence`` (each within ``bounds``), sign the bundle with
    ``sign_key`` when given, judge it, write the reports under ``out``."""
    start = time.monotonic()
    extra = {}
    if waivers is not None:
        load_waivers(waivers)  # refuse a bad file before any host is read
        extra[WAIVERS] = waivers.read_text(encoding="utf-8")
    if sign_key is not None and not sign_key.is_file():
        raise SignatureError(f"--sign-key {sign_key}: no such file; give an SSH private key (ssh-keygen -t ed25519)")
    evidence = collect(targets, private_key=private_key, api_key=api_key, bounds=bounds)
    bundle = out / "evidence"
    if bundle.is_dir():  # an earlier run's files would sit beside this run's manifest, unlisted
        shutil.rmtree(bundle)
    write_bundle(bundle, [(t.desired, ev) for t, ev in zip(targets, evidence, strict=True)], extra)
    if sign_key is not None:
        sign(bundle, sign_key)
    judged = _judge(load_bundle(bundle), None)
    write_reports(judged, out, bundle, controls)
    return AuditResult(judged.findings, out, time.monotonic() - start)


__all__ = [
    "AuditResult",
    "BundleError",
    "Finding",
    "Judged",
    "SignatureError",
    "Target",
    "audit",
    "judge_bundle",
    "rejudge",
    "write_reports",
]
