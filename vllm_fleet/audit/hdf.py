"""The audit as MITRE's Heimdall Data Format (HDF, InSpec's exec JSON): what Heimdall and the `saf` CLI read.

One HDF document per host, as InSpec writes one per target and MITRE's own converters split multi-host scans
(hdf-converters' Nessus mapper: one HDF per report host, ``platform.target_id`` the host). ``saf view summary``
summarises a document's first profile, Heimdall's status of a control is one verdict (a control with one failed
result is Failed), and "Not Applicable" is a control's ``impact`` of 0: all of this is per target, so one
document for the fleet would fold node2's drift into node1's verdicts. ``saf view summary -i *.hdf.json`` and
Heimdall (load every file; its comparison view lines the hosts up) still give the fleet view.

Each document has the one profile ``vllm-fleet`` with a control for every check of ``check_catalogue()``
(the base id: ``VF-RUN-CONFIG:max-num-seqs`` is a result of control ``VF-RUN-CONFIG``), and a result per
finding. Statuses, as inspecjs (Heimdall, saf) computes a control's status from its results:

* passed → ``passed``; failed → ``failed``; error → ``error`` (control: Profile Error);
* not-applicable → ``skipped`` with a ``skip_message``, and the control's ``impact`` 0 when every finding of
  it on the host is not applicable: InSpec's own ``only_if`` (control: Not Applicable);
* not-reviewed → ``skipped`` (control: Not Reviewed); a check with no finding on a host (the host could not be
  read) gets one skipped result saying so, as HDF has no verdict for a control without results but Profile Error.

Impact from severity as MITRE's converters map it (critical 0.9, high 0.7, medium 0.5, low 0.3, info 0.0; an
info check therefore shows as Not Applicable, as InSpec's impact-0 controls do); ``tags.severity`` keeps ours.

Lossless record: ``tags.vf_findings`` of each control holds every finding of it on the host, as
``Finding.to_dict()`` (id, check, status, expected, actual, layer, evidence {path: sha256}, ...), and
``findings_from_hdf`` reads them back. Tags are the exec-JSON field InSpec itself fills with arbitrary JSON
(hashes, lists); they are part of the schema, so inspecjs' parser, Heimdall and saf keep them, where result
fields are strings only and extra keys are not promised to survive. Each result also names its finding
(``resource_id``) and says host, expected, actual and layer in ``code_desc``; failures and errors carry the
evidence digests in ``message``, so Heimdall shows them as well. The host itself is ``target`` (read by
``saf supplement target read``) and ``passthrough`` holds when the report was made.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from vllm_fleet import __version__
from vllm_fleet.audit import reconcile
from vllm_fleet.audit.reconcile import Check, Finding
from vllm_fleet.audit.report import HostInfo, check_catalogue

PROFILE = "vllm-fleet"
IMPACT = {"critical": 0.9, "high": 0.7, "medium": 0.5, "low": 0.3, "info": 0.0}
_RESULT_STATUS = {
    "passed": "passed",
    "failed": "failed",
    "error": "error",
    "not-applicable": "skipped",
    "not-reviewed": "skipped",
}
_SOURCE = "vllm_fleet/audit/reconcile.py"


def base_check(check: str) -> str:
    """``VF-RUN-CONFIG:max-num-seqs`` → ``VF-RUN-CONFIG`` (the HDF control a sub-check's finding belongs to)."""
    return check.split(":", 1)[0]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


@cache
def _lines() -> dict[str, int]:
    """Line of each check's definition in reconcile.py (the control's ``source_location``)."""
    text = Path(reconcile.__file__).read_text(encoding="utf-8")
    found: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = re.fullmatch(r'\s*"(VF-[A-Z0-9-]+)",\s*', line)
        if m:
            found.setdefault(m.group(1), n)
    return found


def profile_sha256(catalogue: dict[str, Check]) -> str:
    """The profile's digest: of the version and every check's definition (the same for every host)."""
    body = {"version": __version__, "checks": {cid: c.__dict__ for cid, c in sorted(catalogue.items())}}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _evidence(f: Finding) -> str:
    return "; ".join(f"{path} sha256:{digest}" for path, digest in sorted(f.evidence.items())) or "none"


def _result(f: Finding, info: HostInfo) -> dict[str, Any]:
    result: dict[str, Any] = {
        "status": _RESULT_STATUS[f.status],
        "code_desc": f"{f.host}: {f.check} expected {f.expected}, actual {f.actual} [{f.layer}]",
        "resource": f.layer,
        "resource_id": f.id,
        "start_time": _iso(info.started_at),
        "run_time": max(info.finished_at - info.started_at, 0.0),
    }
    if f.status in ("failed", "error"):
        result["message"] = (
            f"expected {f.expected}, actual {f.actual} (from {f.layer}); fix: {f.remediation or 'none given'};"
            f" evidence: {_evidence(f)}"
        )
    elif result["status"] == "skipped":
        result["skip_message"] = f"{f.status}: {f.actual}"
    return result


def _unjudged(check: Check, info: HostInfo) -> dict[str, Any]:
    why = f"host not audited: {info.error}" if info.error else "no finding for this check on this host"
    return {
        "status": "skipped",
        "code_desc": f"{info.host}: {check.id} not judged",
        "skip_message": f"not-reviewed: {why}",
        "start_time": _iso(info.started_at),
        "run_time": 0.0,
    }


def _control(check: Check, mine: list[Finding], info: HostInfo) -> dict[str, Any]:
    not_applicable = bool(mine) and all(f.status == "not-applicable" for f in mine)
    desc = check.title
    if not_applicable:
        desc += f". Not applicable on {info.host}: " + "; ".join(sorted({f.actual for f in mine}))
    return {
        "id": check.id,
        "title": check.title,
        "desc": desc,
        "descriptions": [
            {"label": "default", "data": desc},
            {"label": "check", "data": f"vllm-fleet audit check {check.id}: {check.title}"},
            {"label": "fix", "data": check.remediation},
        ],
        "impact": 0.0 if not_applicable else IMPACT[check.severity],
        "refs": [],
        "tags": {
            "vf_check": check.id,
            "severity": "none" if check.severity == "info" else check.severity,
            "vf_findings": [f.to_dict() for f in mine],
        },
        "source_location": {"ref": _SOURCE, "line": _lines().get(check.id)},
        "results": [_result(f, info) for f in mine] or [_unjudged(check, info)],
    }


def host_hdf(findings: list[Finding], info: HostInfo, *, generated_at: float | None = None) -> dict[str, Any]:
    """The HDF (exec JSON) document of one host: its findings judged against every check of the catalogue."""
    catalogue = check_catalogue()
    mine = [f for f in findings if f.host == info.host]
    unknown = sorted({base_check(f.check) for f in mine} - catalogue.keys())
    if unknown:
        raise ValueError(f"{info.host}: findings of checks not in the catalogue: {', '.join(unknown)}")
    by_check: dict[str, list[Finding]] = {cid: [] for cid in catalogue}
    for f in mine:
        by_check[base_check(f.check)].append(f)
    controls = [_control(check, by_check[cid], info) for cid, check in catalogue.items()]
    return {
        "platform": {"name": PROFILE, "release": __version__, "target_id": info.host},
        "version": __version__,
        "statistics": {"duration": max(info.finished_at - info.started_at, 0.0)},
        "profiles": [
            {
                "name": PROFILE,
                "title": "vllm-fleet audit: what a vLLM node runs against its decode profile",
                "version": __version__,
                "maintainer": "vllm-fleet",
                "license": "Apache-2.0",
                "summary": f"vllm-fleet audit of {info.host} ({info.address}), profile {info.profile}",
                "sha256": profile_sha256(catalogue),
                "supports": [{"platform-family": "debian"}],
                "attributes": [
                    {"name": name, "options": {"value": value}}
                    for name, value in (
                        ("host", info.host),
                        ("address", info.address),
                        ("profile", info.profile),
                        ("vllm_version", info.vllm_version),
                        ("model", info.model or ""),
                    )
                ],
                "groups": [{"id": _SOURCE, "title": "vllm-fleet audit checks", "controls": list(catalogue)}],
                "status": "loaded",
                "controls": controls,
            }
        ],
        "target": {
            "host": info.host,
            "address": info.address,
            "profile": info.profile,
            "vllm_version": info.vllm_version,
            "model": info.model,
            "started_at": _iso(info.started_at),
            "finished_at": _iso(info.finished_at),
            "error": info.error,
        },
        "passthrough": {
            "auxiliary_data": [
                {"name": "vllm-fleet", "data": {"generated_at": _iso(generated_at or time.time())}},
            ]
        },
    }


def to_hdf(
    findings: list[Finding], hosts: list[HostInfo], *, generated_at: float | None = None
) -> list[dict[str, Any]]:
    """One HDF document per host, in the order of ``hosts`` (every finding's host must be among them)."""
    missing = sorted({f.host for f in findings} - {h.host for h in hosts})
    if missing:
        raise ValueError(f"findings of hosts without HostInfo: {', '.join(missing)}")
    stamp = generated_at or time.time()
    return [host_hdf(findings, info, generated_at=stamp) for info in hosts]


def hdf_filename(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) + ".hdf.json"


def write_hdf(
    out: Path, findings: list[Finding], hosts: list[HostInfo], *, generated_at: float | None = None
) -> list[Path]:
    """Write ``out/<host>.hdf.json`` for every host; return the paths (``saf view summary -i`` takes them all)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for info, doc in zip(hosts, to_hdf(findings, hosts, generated_at=generated_at), strict=True):
        path = out / hdf_filename(info.host)
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def findings_from_hdf(docs: Iterable[dict[str, Any]]) -> list[Finding]:
    """Every finding recorded in HDF documents (``tags.vf_findings``), as the audit made them."""
    return [
        Finding(**record)
        for doc in docs
        for profile in doc["profiles"]
        if profile["name"] == PROFILE
        for control in profile["controls"]
        for record in control["tags"].get("vf_findings", [])
    ]
