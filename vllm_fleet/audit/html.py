"""The audit as one self-contained HTML page, for the person who reads it (an operator, an auditor).

Rendered from ``vllm_fleet/audit/report.html.j2`` (package data: not in templates/, whose
files are the converge's inputs) with autoescape on: every value comes from a host (a config
value, an error message) and is text, never markup. The page loads nothing (air-gapped sites): inline CSS, no
fonts or images, and a small optional script (text/status filter) allowed by hash in its Content-Security-Policy;
without JavaScript everything is still shown. Verdict words and exit code are ``report.summary``'s.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jinja2

from vllm_fleet.audit.reconcile import CHECKS, Finding
from vllm_fleet.audit.report import HostInfo, exit_code, summary

TEMPLATE = "report.html.j2"
SEVERITIES = ("critical", "high", "medium", "low", "info")
STATUSES = ("failed", "error", "not-reviewed", "not-applicable", "passed")
MARKS = {"passed": "✓", "failed": "✗", "error": "!", "not-applicable": "–", "not-reviewed": "?"}
"""Status is said in words and a mark, never by colour alone."""
MEANING = {0: "every check passed", 1: "drift found: a check failed", 2: "some host could not be audited"}
_ORDER = ("error", "failed", "not-reviewed", "passed", "not-applicable")
"""The order of a host's findings: what stopped the audit, what failed, what a person must look at; then the rest."""
_QUIET = ("passed", "not-applicable")
"""Shown collapsed under each host, as the terminal table hides them."""


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else "—"


def _waiver(f: Finding) -> dict[str, str] | None:
    waiver: dict[str, str] | None = getattr(f, "waiver", None)
    return waiver


def _waived(f: Finding) -> bool:
    """A failure that no longer counts (an active waiver covers it): shown, but after those that count."""
    return f.status == "failed" and exit_code([f]) == 0


def _rank(f: Finding) -> tuple[int, int, str]:
    status = _ORDER.index(f.status) if f.status in _ORDER else len(_ORDER)
    waived = 1 if _waived(f) else 0
    severity = SEVERITIES.index(f.severity) if f.severity in SEVERITIES else len(SEVERITIES)
    return status * 2 + waived, severity, f.check


@dataclass(frozen=True)
class HostView:
    name: str
    info: HostInfo | None
    state: str
    """compliant, drift or not audited."""
    attention: list[Finding]
    quiet: list[Finding]
    evidence: list[tuple[str, str]]


def _host(name: str, info: HostInfo | None, mine: list[Finding]) -> HostView:
    code = exit_code(mine)
    state = {0: "compliant", 1: "drift", 2: "not audited"}[code]
    ordered = sorted(mine, key=_rank)
    refs = sorted({path: sha for f in mine for path, sha in f.evidence.items()}.items())
    return HostView(
        name,
        info,
        state,
        [f for f in ordered if f.status not in _QUIET],
        [f for f in ordered if f.status in _QUIET],
        refs,
    )


def _csp_hash(code: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(str(code).encode()).digest()).decode()


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("vllm_fleet.audit", "."),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["csp_hash"] = _csp_hash
    env.filters["when"] = _when
    env.globals["waiver_of"] = _waiver
    env.globals["waived"] = _waived
    return env


def context(findings: list[Finding], hosts: list[HostInfo], generated_at: float | None = None) -> dict[str, Any]:
    """What the template shows: the summary, a severity × status matrix, one view per host (in ``hosts`` order,
    then any host that has findings but no info)."""
    infos = {h.host: h for h in hosts}
    names = [h.host for h in hosts] + sorted({f.host for f in findings} - set(infos))
    matrix: Counter[tuple[str, str]] = Counter((f.severity, f.status) for f in findings)
    code = exit_code(findings)
    return {
        "summary": summary(findings),
        "exit_code": code,
        "meaning": MEANING[code],
        "generated_at": _when(generated_at or time.time()),
        "severities": [s for s in SEVERITIES if any(matrix[s, st] for st in STATUSES)] or list(SEVERITIES[:1]),
        "statuses": STATUSES,
        "matrix": matrix,
        "by_status": Counter(f.status for f in findings),
        "by_severity": Counter(f.severity for f in findings),
        "marks": MARKS,
        "hosts": [_host(n, infos.get(n), [f for f in findings if f.host == n]) for n in names],
        "titles": {c.id: c.title for c in CHECKS.values()},
    }


def to_html(
    findings: list[Finding], hosts: list[HostInfo], *, generated_at: float | None = None, evidence: str = "evidence/"
) -> str:
    """The report page; ``evidence`` is the bundle's location relative to the page (``<out>/evidence/``)."""
    return _env().get_template(TEMPLATE).render(**context(findings, hosts, generated_at), evidence=evidence)
