"""The audit as an OSCAL assessment-results document, built and serialised with compliance-trestle's models.

One ``result`` per audit: every host is an inventory item (address, profile, pinned vLLM as an implemented
component), every audit finding an observation (its host as subject, its evidence files as back-matter
resources with their sha256), and every failed or unaudited check a finding on the control it evidences
(``controls.yaml``, or an organisation's own mapping through ``load_controls``). There is no OSCAL assessment
plan file: ``import-ap`` points (``#uuid``, a fragment the spec allows for a back-matter resource) at a resource
that names the plan the audit did follow, its check catalogue.

UUIDs are uuid5 over ``NAMESPACE``: hosts, components and evidence files keep theirs across audits (OSCAL's
per-subject identity); observations and findings are keyed by the finding id and the host's collection time;
the document and the result by a digest of everything judged. The same evidence gives the same document, byte
for byte, once ``generated_at`` is given.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import ipaddress
import json
import re
import time
import uuid
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from trestle.oscal import OSCAL_VERSION, common
from trestle.oscal import assessment_results as ar

from vllm_fleet import __version__
from vllm_fleet.audit.errors import AuditFileError
from vllm_fleet.audit.reconcile import CHECKS, Finding
from vllm_fleet.audit.report import HostInfo, summary
from vllm_fleet.catalog._data import parse_yaml
from vllm_fleet.trust.user_yaml import read_user_yaml
from vllm_fleet.trust.values import plain_text

NAMESPACE = uuid.UUID("6f0c3e52-9a41-5d7e-8c1b-2a7d4e9f0b13")
"""uuid5 namespace of every UUID the audit writes (fixed: changing it changes every document)."""
NS = "urn:vllm-fleet:audit"
"""Namespace of the project's own OSCAL props (check, status, severity, layer, …)."""
TESTED = frozenset(
    {
        "VF-REACH",
        "VF-SVC-ACTIVE",
        "VF-VER-LIVE",
        "VF-LIVE-CACHE",
        "VF-PLAN-KV",
        "VF-UNIT-EXPOSURE",
        "VF-SLO-PREEMPT",
        "VF-SLO-SPEC",
    }
)
"""Checks that exercise the running node (connect, query the live server, run an analyser): OSCAL ``TEST``;
the others read files and package databases: ``EXAMINE``."""
_NIST = re.compile(r"^[A-Z]{2}-\d{1,2}(\(\d{1,2}\))?$")


# --- the control mapping --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckControls:
    controls: tuple[str, ...]
    """Control ids of the mapping's catalogue (empty: the check evidences none of them)."""
    nist_800_53: tuple[str, ...] = ()


@dataclass(frozen=True)
class Controls:
    catalogue: str
    titles: dict[str, str]
    """Control id → title (only for the ids the file defines)."""
    checks: dict[str, CheckControls]
    source: str

    def of(self, check: str) -> CheckControls:
        """The controls of a check; a per-flag id (``VF-RUN-CONFIG:max-num-seqs``) has its base check's."""
        return self.checks.get(check.split(":", 1)[0], CheckControls(()))

    def unmapped(self) -> list[str]:
        return [c for c in CHECKS if not self.of(c).controls]


class ControlsError(AuditFileError):
    """A control mapping that cannot be used."""


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    controls: list[str] = Field(default_factory=list, max_length=100)
    nist_800_53: list[str] | None = Field(default=None, max_length=100)
    """None: the built-in mapping's (the NIST controls describe the check, not the baseline)."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"controls": data} if isinstance(data, list) else data


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    catalogue: str = Field(min_length=1, max_length=200)
    controls: dict[str, str] = Field(default_factory=dict, max_length=10_000)
    checks: dict[str, _Entry] = Field(min_length=1)


def _is_token(control: str) -> bool:
    try:
        common.SelectControlById(control_id=control)
    except ValidationError:
        return False
    return True


def _problems(f: _File) -> list[str]:
    out = []
    try:
        plain_text(f.catalogue)
    except ValueError as e:
        out.append(f"catalogue: {e}")
    for cid, title in f.controls.items():
        if not _is_token(cid):
            out.append(f"controls.{cid}: not an OSCAL token (a letter or _ first, then letters, digits, . - _)")
        if "\n" in title or not title.strip():
            out.append(f"controls.{cid}: its title is one non-empty line")
    for check, entry in f.checks.items():
        if check not in CHECKS:
            base = check.split(":", 1)[0]
            close = difflib.get_close_matches(base, list(CHECKS), n=1, cutoff=0.5)
            hint = f"did you mean {close[0]}?" if close else f"checks: {', '.join(CHECKS)}"
            if ":" in check and base in CHECKS:
                hint = f"map {base}: its per-flag findings share its controls"
            out.append(f"checks.{check}: no check {check!r}; {hint}")
        for cid in entry.controls:
            if not _is_token(cid):
                out.append(f"checks.{check}: control {cid!r} is not an OSCAL token (a letter or _ first)")
            elif f.controls and cid not in f.controls:
                close = difflib.get_close_matches(cid, list(f.controls), n=1)
                out.append(
                    f"checks.{check}: control {cid!r} is not under controls"
                    + (f"; did you mean {close[0]}?" if close else "")
                )
        for nist in entry.nist_800_53 or []:
            if not _NIST.match(nist):
                out.append(f"checks.{check}: {nist!r} is not a NIST SP 800-53 control id (CM-6, AC-6(1))")
    if not any(e.controls for e in f.checks.values()):
        out.append("checks: no check is mapped to a control; map at least one")
    return out


def parse_controls(data: Any, source: str, base: Controls | None = None) -> Controls:
    """A control mapping from parsed YAML; NIST lists a file leaves out come from ``base``."""
    if not isinstance(data, dict):
        raise ControlsError(source, ["(file): a mapping with catalogue, controls (optional) and checks"])
    try:
        f = _File.model_validate(data)
    except ValidationError as err:
        raise ControlsError(
            source,
            [
                f"{'.'.join(str(p) for p in e['loc'])}: {str(e['msg']).removeprefix('Value error, ')}"
                for e in err.errors()
            ],
        ) from None
    problems = _problems(f)
    if problems:
        raise ControlsError(source, problems)
    checks = {
        check: CheckControls(
            tuple(dict.fromkeys(e.controls)),
            tuple(e.nist_800_53) if e.nist_800_53 is not None else (base.of(check).nist_800_53 if base else ()),
        )
        for check, e in f.checks.items()
    }
    return Controls(f.catalogue, dict(f.controls), checks, source)


@cache
def _builtin() -> Controls:
    text = resources.files("vllm_fleet.audit").joinpath("controls.yaml").read_text(encoding="utf-8")
    return parse_controls(parse_yaml(text), "vllm_fleet/audit/controls.yaml")


def load_controls(path: Path | None = None) -> Controls:
    """The built-in mapping (``controls.yaml``), or a user's file of the same shape mapping check ids to their
    own control ids (a check left out evidences none of them; ``VF-REACH: [OPS.1.1.A1]`` is short for
    ``{controls: [...]}``). Raises ControlsError (or InputFileError for an unreadable file)."""
    if path is None:
        return _builtin()
    return parse_controls(read_user_yaml(path), str(path), _builtin())


# --- the document ---------------------------------------------------------------------------------------------


def _uuid(*parts: object) -> str:
    return str(uuid.uuid5(NAMESPACE, "\x1f".join(str(p) for p in parts)))


def _when(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.UTC)


def _line(text: str) -> str:
    return " ".join(text.split())


def _props(*pairs: tuple[str, str], ns: str | None = NS) -> list[common.Property] | None:
    """Props for the non-empty values (OSCAL: one line, no edge spaces); None when none (lists are min 1)."""
    out = [common.Property(name=n, value=_line(v), ns=ns) for n, v in pairs if _line(v)]
    return out or None


def _address_prop(address: str) -> tuple[str, str]:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return ("fqdn", address)
    return ("ipv4-address" if ip.version == 4 else "ipv6-address", address)


@dataclass
class _Doc:
    """The pieces of one document being built (uuids shared between sections)."""

    tool: str
    hosts: dict[str, HostInfo]
    evidence_href: str
    resources: dict[str, common.Resource]

    def host_uuid(self, host: str) -> str:
        return _uuid("inventory-item", host)

    def collected(self, host: str, fallback: float) -> dt.datetime:
        h = self.hosts.get(host)
        return _when((h.finished_at or h.started_at) if h else fallback)

    def evidence(self, path: str, sha: str) -> common.RelevantEvidence:
        rid = _uuid("evidence", path, sha)
        if rid not in self.resources:
            self.resources[rid] = common.Resource(
                uuid=rid,
                title=_line(path),
                description=f"evidence file `{path}` of the audit's bundle (sha256 {sha})",
                rlinks=[
                    common.Rlink(href=self.evidence_href + path, hashes=[common.Hash(algorithm="SHA-256", value=sha)])
                ],
            )
        return common.RelevantEvidence(href=f"#{rid}", description=f"{path} (sha256 {sha})")


def _components(doc: _Doc) -> list[common.SystemComponent]:
    operational = common.Status(state="operational")
    tool = common.SystemComponent(
        uuid=doc.tool,
        type="software",
        title="vllm-fleet audit",
        status=operational,
        description="The read-only audit of vllm-fleet: collects evidence over SSH and HTTP, judges it offline.",
        props=_props(("version", __version__), ns=None),
    )
    versions = sorted({h.vllm_version for h in doc.hosts.values() if h.vllm_version})
    return [tool] + [
        common.SystemComponent(
            uuid=_uuid("component", "vllm", v),
            type="software",
            title=f"vLLM {v}",
            status=operational,
            description=f"The vLLM inference server, release {v}: the release the hosts are pinned to.",
            props=_props(("version", v), ns=None),
        )
        for v in versions
    ]


def _inventory(doc: _Doc, host: str) -> common.InventoryItem:
    h = doc.hosts.get(host)
    if h is None:
        return common.InventoryItem(
            uuid=doc.host_uuid(host), description=f"vLLM node {host}", props=_props(("asset-id", host), ns=None)
        )
    return common.InventoryItem(
        uuid=doc.host_uuid(host),
        description=f"vLLM node {host} ({h.address}), profile {h.profile}, pinned vLLM {h.vllm_version}",
        props=(_props(("asset-id", host), _address_prop(h.address), ns=None) or [])
        + (
            _props(
                ("profile", h.profile),
                ("vllm-version", h.vllm_version),
                ("model", h.model or ""),
                ("audit-error", h.error or ""),
            )
            or []
        ),
        implemented_components=[common.ImplementedComponent(component_uuid=_uuid("component", "vllm", h.vllm_version))]
        if h.vllm_version
        else None,
        remarks=f"The audit could not read this host: {h.error}" if h.error else None,
    )


def _waiver(f: Finding) -> str:
    w = f.waiver or {}
    return f"waived until {w.get('expires')} ({w.get('state')}): {w.get('reason')}" if w else ""


def _observation(doc: _Doc, f: Finding, controls: Controls, fallback: float) -> common.Observation:
    base = f.check.split(":", 1)[0]
    mapped = controls.of(f.check)
    return common.Observation(
        uuid=_uuid("observation", f.id, doc.collected(f.host, fallback).isoformat()),
        title=_line(f"{f.check} on {f.host}: {f.status}"),
        description=f"{f.title}: expected {f.expected}; actual {f.actual} (from {f.layer}).",
        props=_props(
            ("finding-id", f.id),
            ("check", f.check),
            ("status", f.status),
            ("severity", f.severity),
            ("layer", f.layer),
            ("waiver", _waiver(f)),
            *(("control-id", c) for c in mapped.controls),
            *(("nist-800-53", c) for c in mapped.nist_800_53),
        ),
        methods=["TEST" if base in TESTED else "EXAMINE"],
        origins=[common.Origin(actors=[common.OriginActor(type="tool", actor_uuid=doc.tool)])],
        subjects=[common.SubjectReference(subject_uuid=doc.host_uuid(f.host), type="inventory-item", title=f.host)],
        relevant_evidence=[doc.evidence(p, sha) for p, sha in sorted(f.evidence.items())] or None,
        collected=doc.collected(f.host, fallback),
        remarks=f.remediation or None,
    )


def _findings(doc: _Doc, f: Finding, obs: str, controls: Controls, fallback: float) -> list[common.Finding]:
    mapped = controls.of(f.check)
    unaudited = f.status == "error"
    why = (
        f"the host could not be audited ({f.actual}): nothing shows the objective is met"
        if unaudited
        else f"expected {f.expected}; actual {f.actual} (from {f.layer})"
    )
    return [
        common.Finding(
            uuid=_uuid("finding", f.id, control, doc.collected(f.host, fallback).isoformat()),
            title=_line(f"{control}: {f.check} {f.status} on {f.host}"),
            description=f"{f.title}: {why}." + (f" Fix: {f.remediation}." if f.remediation else ""),
            props=_props(
                ("finding-id", f.id),
                ("check", f.check),
                ("severity", f.severity),
                ("waiver", _waiver(f)),
                *(("nist-800-53", c) for c in mapped.nist_800_53),
            ),
            origins=[common.Origin(actors=[common.OriginActor(type="tool", actor_uuid=doc.tool)])],
            target=common.FindingTarget(
                type="objective-id",
                target_id=control,
                title=_line(controls.titles.get(control, "")) or None,
                status=common.ObjectiveStatus(state="not-satisfied", reason="other" if unaudited else "fail"),
            ),
            related_observations=[common.RelatedObservation(observation_uuid=obs)],
            remarks=_waiver(f) or None,
        )
        for control in mapped.controls
    ]


def _digest(findings: list[Finding], hosts: list[HostInfo], controls: Controls, href: str) -> str:
    payload = {
        "findings": [f.to_dict() for f in findings],
        "hosts": [asdict(h) for h in hosts],
        "controls": {c: asdict(m) for c, m in sorted(controls.checks.items())},
        "catalogue": controls.catalogue,
        "href": href,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _plan(controls: Controls) -> common.Resource:
    lines = [f"- {c.id} ({c.severity}): {c.title}" for c in CHECKS.values()]
    return common.Resource(
        uuid=_uuid("assessment-plan", controls.catalogue),
        title="vllm-fleet audit: check catalogue (the assessment plan)",
        description="No OSCAL assessment plan file exists: the audit follows its check catalogue, every check on "
        f"every host, mapped to the controls of {controls.catalogue}.\n\n" + "\n".join(lines),
    )


def build(
    findings: list[Finding],
    hosts: list[HostInfo],
    *,
    generated_at: float | None = None,
    controls: Controls | None = None,
    evidence_href: str = "evidence/",
) -> ar.AssessmentResults:
    """The assessment-results model (see ``to_oscal``)."""
    controls = controls or load_controls()
    now = generated_at if generated_at is not None else time.time()
    start = min((h.started_at for h in hosts), default=now)
    end = max((h.finished_at or h.started_at for h in hosts), default=start)
    digest = _digest(findings, hosts, controls, evidence_href)
    doc = _Doc(_uuid("component", "vllm-fleet-audit"), {h.host: h for h in hosts}, evidence_href, {})
    plan = _plan(controls)
    names = list(dict.fromkeys([h.host for h in hosts] + [f.host for f in findings]))
    observations, results = [], []
    for f in findings:
        o = _observation(doc, f, controls, start)
        observations.append(o)
        if f.status in ("failed", "error"):
            results += _findings(doc, f, o.uuid, controls, start)
    judged = {f.check.split(":", 1)[0] for f in findings}
    reviewed = list(dict.fromkeys(c for check in CHECKS if check in judged for c in controls.of(check).controls))
    reviewed = reviewed or list(dict.fromkeys(c for m in controls.checks.values() for c in m.controls))
    unmapped = controls.unmapped()
    s = summary(findings)
    result = ar.Result(
        uuid=_uuid("result", digest),
        title=f"vllm-fleet audit of {len(names)} host(s): {s['result']}",
        description=f"Every check of `vllm-fleet audit` on every host, judged from the evidence bundle alone "
        f"(controls: {controls.catalogue}, from {Path(controls.source).name}).",
        start=_when(start),
        end=_when(max(end, start)),
        props=_props(("result", s["result"]), ("catalogue", controls.catalogue)),
        local_definitions=ar.LocalDefinitions1(
            components=_components(doc), inventory_items=[_inventory(doc, h) for h in names] or None
        ),
        reviewed_controls=common.ReviewedControls(
            description=f"The controls of {controls.catalogue} that the audit's checks give evidence for.",
            control_selections=[
                common.ControlSelections(include_controls=[common.SelectControlById(control_id=c) for c in reviewed])
            ],
        ),
        observations=observations or None,
        findings=results or None,
        remarks=f"Checks that evidence no control of {controls.catalogue} (observations only): " + ", ".join(unmapped)
        if unmapped
        else None,
    )
    return ar.AssessmentResults(
        uuid=_uuid("assessment-results", digest),
        metadata=common.Metadata(
            title="vllm-fleet audit",
            last_modified=_when(now),
            version=__version__,
            oscal_version=OSCAL_VERSION,
            props=_props(("digest", f"sha256:{digest}")),
        ),
        import_ap=ar.ImportAp(
            href=f"#{plan.uuid}",
            remarks="No assessment plan file exists; this points at the back-matter resource that names the plan.",
        ),
        results=[result],
        back_matter=common.BackMatter(resources=[plan, *doc.resources.values()]),
    )


def to_oscal(
    findings: list[Finding],
    hosts: list[HostInfo],
    *,
    generated_at: float | None = None,
    controls: Controls | None = None,
    evidence_href: str = "evidence/",
) -> str:
    """The OSCAL assessment-results JSON of an audit, as trestle writes it (``oscal_write``: wrapped, indented).

    ``evidence_href`` is where the bundle lies relative to the document (``out/evidence`` beside
    ``out/audit.oscal.json``); ``controls`` is the mapping (default: the built-in ``controls.yaml``)."""
    model = build(findings, hosts, generated_at=generated_at, controls=controls, evidence_href=evidence_href)
    return model.oscal_serialize_json(pretty=True) + "\n"
