"""Audit reports: the terminal table, JSON and JUnit XML (a testcase per host × check), and the exit code.

Exit codes (as `vllm-fleet audit --help` says): 0 every check passed (waived, not-applicable and not-reviewed
do not count against it); 1 drift found (a check failed); 2 some host could not be audited (the others are
still reported). InSpec uses 100/101 for failed/skipped and oscap 2 for "some rule failed"; CI gates need only
"zero or not".
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree as ET

from rich.console import Console

from vllm_fleet.audit.evidence import Desired, HostEvidence
from vllm_fleet.audit.reconcile import CHECKS, Check, Finding
from vllm_fleet.project import tables
from vllm_fleet.trust.node_text import printable, xml_safe_tree

COMPLIANT, DRIFT, INCOMPLETE = 0, 1, 2


@dataclass(frozen=True)
class HostInfo:
    """What every report says of a host besides its findings."""

    host: str
    address: str
    profile: str
    vllm_version: str
    started_at: float
    finished_at: float
    error: str | None = None
    model: str | None = None
    """The weights the stack names for the host: its model directory and manifest digest (VF-MODEL-FILES says
    whether the node holds them)."""

    @classmethod
    def of(cls, desired: Desired, ev: HostEvidence) -> HostInfo:
        return cls(desired.host, desired.address, desired.profile, desired.vllm_version, ev.started_at,
                   ev.finished_at, ev.error, model_named(desired))  # fmt: skip


def model_named(desired: Desired) -> str | None:
    if desired.model_dir is None:
        return None
    if desired.model_manifest_sha256 is None:
        return f"{desired.model_dir} (staged unverified: no manifest)"
    return f"{desired.model_dir} (manifest sha256:{desired.model_manifest_sha256})"


def check_catalogue() -> dict[str, Check]:
    """Every check the audit makes (id, title, severity, remediation): what HDF controls and OSCAL list."""
    return dict(CHECKS)


def exit_code(findings: list[Finding]) -> int:
    if any(f.status == "error" for f in findings):
        return INCOMPLETE
    return DRIFT if any(f.counts for f in findings) else COMPLIANT


def summary(findings: list[Finding]) -> dict[str, Any]:
    by_status = Counter(f.status for f in findings)
    hosts = sorted({f.host for f in findings})
    return {
        "result": {COMPLIANT: "compliant", DRIFT: "drift", INCOMPLETE: "incomplete"}[exit_code(findings)],
        "hosts": hosts,
        "counts": dict(sorted(by_status.items())),
        "drifted_hosts": sorted({f.host for f in findings if f.counts}),
        "waived": sorted(f.id for f in findings if f.status == "failed" and not f.counts),
        "unaudited_hosts": sorted({f.host for f in findings if f.status == "error"}),
    }


def to_json(
    findings: list[Finding], generated_at: float | None = None, provenance: dict[str, object] | None = None
) -> str:
    """``provenance``: where the waivers came from and whether the bundle's signature held (a re-judge)."""
    doc = {
        "tool": "vllm-fleet audit",
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(generated_at or time.time())),
        "summary": summary(findings),
        **({"evidence": provenance} if provenance is not None else {}),
        "findings": [f.to_dict() for f in findings],
    }
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def to_junit(findings: list[Finding]) -> str:
    suites = ET.Element("testsuites", name="vllm-fleet audit")
    for host in sorted({f.host for f in findings}):
        mine = [f for f in findings if f.host == host]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=host,
            tests=str(len(mine)),
            failures=str(sum(f.counts for f in mine)),
            errors=str(sum(f.status == "error" for f in mine)),
            skipped=str(
                sum(
                    f.status in ("not-applicable", "not-reviewed") or (f.status == "failed" and not f.counts)
                    for f in mine
                )
            ),
        )
        for f in mine:
            case = ET.SubElement(suite, "testcase", classname=host, name=f.check)
            detail = f"{f.title}: expected {f.expected}, actual {f.actual} ({f.layer})"
            if f.status == "failed" and not f.counts:
                waiver = f.waiver or {}
                ET.SubElement(case, "skipped", message=f"waived until {waiver.get('expires')}: {waiver.get('reason')}")
            elif f.status == "failed":
                ET.SubElement(case, "failure", message=detail, type=f.severity).text = f.remediation
            elif f.status == "error":
                ET.SubElement(case, "error", message=detail)
            elif f.status in ("not-applicable", "not-reviewed"):
                ET.SubElement(case, "skipped", message=f"{f.status}: {detail}")
    # Host names, versions and details come from nodes: any character they send stays well-formed XML.
    return ET.tostring(xml_safe_tree(suites), encoding="unicode", xml_declaration=True) + "\n"


_STYLE = {"passed": "green", "failed": "red", "error": "magenta", "not-applicable": "dim", "not-reviewed": "yellow"}


def print_table(console: Console, findings: list[Finding], all_checks: bool = False) -> None:
    shown = [f for f in findings if all_checks or f.status not in ("passed", "not-applicable")]
    table = tables.table("host", "check", "severity", "status", "expected", "actual", "layer", title="vllm-fleet audit")
    for f in shown:
        style = _STYLE.get(f.status, "")
        status = f.status if f.counts or f.status != "failed" else "failed (waived)"
        table.add_row(f.host, f.check, f.severity, tables.styled(status, style), f.expected, f.actual, f.layer)
    if shown:
        tables.print_table(console, table)
    s = summary(findings)
    console.print(
        printable(
            f"{s['result']}: {len(s['hosts'])} host(s), "
            + ", ".join(f"{n} {status}" for status, n in s["counts"].items())
            + (f"; drift on {', '.join(s['drifted_hosts'])}" if s["drifted_hosts"] else "")
            + (f"; not audited: {', '.join(s['unaudited_hosts'])}" if s["unaudited_hosts"] else "")
        ),
        markup=False,
        highlight=False,
    )
