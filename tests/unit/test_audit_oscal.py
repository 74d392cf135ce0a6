"""The audit as OSCAL assessment results: trestle reads the document back and validates it, one observation per
finding and one OSCAL finding per failed or unaudited check, stable UUIDs, and the control mappings (the
built-in one covers every check; a user's file works, a misspelt check id is refused with the closest name)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from trestle.core.validator_factory import validator_factory
from trestle.oscal.assessment_results import AssessmentResults

from tests.audit_samples import START, sample_audit
from vllm_fleet.audit.oscal import NS, ControlsError, load_controls, to_oscal
from vllm_fleet.audit.reconcile import CHECKS, Finding
from vllm_fleet.audit.report import HostInfo
from vllm_fleet.trust.user_yaml import InputFileError

GENERATED = START + 700


@pytest.fixture(scope="module")
def sample() -> tuple[list[Finding], list[HostInfo]]:
    findings, hosts = sample_audit()
    # the sample is judged without a manifest: give the drifted config its evidence file
    sha = "ab" * 32
    findings = [
        replace(f, evidence={f"{f.host}/remote/config": sha}) if f.check.startswith("VF-CFG-DISK") else f
        for f in findings
    ]
    return findings, hosts


def result(text: str) -> dict[str, Any]:
    return dict(json.loads(text)["assessment-results"]["results"][0])


def inventory(text: str) -> list[str]:
    return [i["uuid"] for i in result(text)["local-definitions"]["inventory-items"]]


def test_trestle_reads_it_back_and_it_validates(sample: tuple[list[Finding], list[HostInfo]], tmp_path: Path) -> None:
    text = to_oscal(*sample, generated_at=GENERATED)
    path = tmp_path / "audit.oscal.json"
    path.write_text(text, encoding="utf-8")
    model = AssessmentResults.oscal_read(path)
    assert isinstance(model, AssessmentResults)
    for validator in validator_factory.get_all():  # trestle's own checks (duplicate uuids, links, refs, …)
        assert validator.model_is_valid(model, quiet=True), type(validator).__name__
    assert model.metadata.title == "vllm-fleet audit"
    assert model.oscal_serialize_json(pretty=True) + "\n" == text  # what trestle writes, byte for byte
    href = model.import_ap.href
    assert href.startswith("#")
    assert model.back_matter is not None and model.back_matter.resources
    assert href[1:] in {r.uuid for r in model.back_matter.resources}


def test_one_observation_per_finding_one_finding_per_failure(sample: tuple[list[Finding], list[HostInfo]]) -> None:
    findings, hosts = sample
    r = result(to_oscal(findings, hosts, generated_at=GENERATED))
    assert len(r["observations"]) == len(findings)
    bad = [f for f in findings if f.status in ("failed", "error")]
    assert len(r["findings"]) == len(bad) == 3
    items = {i["uuid"]: i for i in r["local-definitions"]["inventory-items"]}
    assert len(items) == len(hosts)
    observed = {o["uuid"]: o for o in r["observations"]}
    for f in r["findings"]:
        assert f["target"]["type"] == "objective-id"
        assert f["target"]["target-id"].startswith("vf-")
        assert f["target"]["status"]["state"] == "not-satisfied"
        (related,) = f["related-observations"]
        assert related["observation-uuid"] in observed
    reach = next(f for f in r["findings"] if "VF-REACH" in f["title"])
    assert reach["target"] == {
        "type": "objective-id",
        "target-id": "vf-au-1",
        "title": load_controls().titles["vf-au-1"],
        "status": {"state": "not-satisfied", "reason": "other"},
    }
    for o in r["observations"]:
        assert o["methods"] in (["TEST"], ["EXAMINE"])
        (subject,) = o["subjects"]
        assert subject["type"] == "inventory-item" and subject["subject-uuid"] in items
    drift = next(o for o in r["observations"] if o["title"] == "VF-CFG-DISK on node2: failed")
    (ev,) = drift["relevant-evidence"]
    assert "node2/remote/config" in ev["description"] and "ab" * 32 in ev["description"]
    resources = json.loads(to_oscal(findings, hosts, generated_at=GENERATED))["assessment-results"]["back-matter"]
    (res,) = [x for x in resources["resources"] if f"#{x['uuid']}" == ev["href"]]
    assert res["rlinks"] == [
        {"href": "evidence/node2/remote/config", "hashes": [{"algorithm": "SHA-256", "value": "ab" * 32}]}
    ]
    props = {(p["name"], p["value"]) for p in drift["props"] if p.get("ns") == NS}
    assert {("check", "VF-CFG-DISK"), ("status", "failed"), ("control-id", "vf-cm-2"), ("nist-800-53", "CM-3")} <= props
    selected = r["reviewed-controls"]["control-selections"][0]["include-controls"]
    assert {c["control-id"] for c in selected} == {c for m in load_controls().checks.values() for c in m.controls}


def test_uuids_are_stable_and_follow_the_evidence(sample: tuple[list[Finding], list[HostInfo]]) -> None:
    findings, hosts = sample
    first = to_oscal(findings, hosts, generated_at=GENERATED)
    assert to_oscal(list(findings), list(hosts), generated_at=GENERATED) == first
    later = to_oscal(findings, hosts, generated_at=GENERATED + 3600)
    assert (
        later != first
        and json.loads(later)["assessment-results"]["uuid"] == json.loads(first)["assessment-results"]["uuid"]
    )
    other = [replace(f, actual="65") if f.check == "VF-RUN-CONFIG:max-num-seqs" else f for f in findings]
    changed = to_oscal(other, hosts, generated_at=GENERATED)
    assert json.loads(changed)["assessment-results"]["uuid"] != json.loads(first)["assessment-results"]["uuid"]
    # hosts keep their inventory uuid across audits (OSCAL's per-subject identity)
    assert inventory(changed) == inventory(first)
    uuids = [o["uuid"] for o in result(first)["observations"]] + [f["uuid"] for f in result(first)["findings"]]
    assert len(set(uuids)) == len(uuids)


def test_every_check_maps_to_a_control() -> None:
    controls = load_controls()
    assert set(controls.checks) == set(CHECKS)
    for check in CHECKS:
        mapped = controls.of(check)
        assert mapped.controls, check
        assert all(c in controls.titles for c in mapped.controls), check
    assert controls.unmapped() == []
    assert controls.of("VF-RUN-CONFIG:max-num-seqs") == controls.of("VF-RUN-CONFIG")
    assert set(controls.titles) == {c for m in controls.checks.values() for c in m.controls}  # no unused control


def test_a_user_mapping_file(sample: tuple[list[Finding], list[HostInfo]], tmp_path: Path) -> None:
    path = tmp_path / "baseline.yaml"
    path.write_text(
        "catalogue: BSI IT-Grundschutz\n"
        "checks:\n"
        "  VF-CFG-DISK: [SYS.1.1.A6, OPS.1.1.3.A15]\n"
        "  VF-RUN-CONFIG: {controls: [SYS.1.1.A6], nist_800_53: [CM-6]}\n"
        "  VF-REACH: [OPS.1.1.2.A3]\n",
        encoding="utf-8",
    )
    controls = load_controls(path)
    assert controls.catalogue == "BSI IT-Grundschutz"
    assert controls.of("VF-CFG-DISK").controls == ("SYS.1.1.A6", "OPS.1.1.3.A15")
    assert controls.of("VF-CFG-DISK").nist_800_53 == load_controls().of("VF-CFG-DISK").nist_800_53
    assert controls.of("VF-RUN-CONFIG").nist_800_53 == ("CM-6",)
    assert "VF-SLO-SPEC" in controls.unmapped()
    r = result(to_oscal(*sample, generated_at=GENERATED, controls=controls))
    targets = sorted(f["target"]["target-id"] for f in r["findings"])
    # node2's config drift on two controls, its flag on one, node3's reach on one
    assert targets == ["OPS.1.1.2.A3", "OPS.1.1.3.A15", "SYS.1.1.A6", "SYS.1.1.A6"]
    assert {c["control-id"] for c in r["reviewed-controls"]["control-selections"][0]["include-controls"]} == {
        "SYS.1.1.A6",
        "OPS.1.1.3.A15",
        "OPS.1.1.2.A3",
    }
    assert "VF-SLO-SPEC" in r["remarks"]


def test_an_empty_audit_is_still_a_document() -> None:
    r = result(to_oscal([], [], generated_at=GENERATED))
    assert "observations" not in r and "findings" not in r
    assert r["reviewed-controls"]["control-selections"][0]["include-controls"]


def test_a_misspelt_check_is_refused_with_the_closest_name(tmp_path: Path) -> None:
    path = tmp_path / "baseline.yaml"
    path.write_text("catalogue: mine\nchecks:\n  VF-CFG-DISC: [ctl-1]\n", encoding="utf-8")
    with pytest.raises(ControlsError) as err:
        load_controls(path)
    assert "no check 'VF-CFG-DISC'; did you mean VF-CFG-DISK?" in str(err.value)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("catalogue: mine\nchecks:\n  VF-RUN-CONFIG:max-num-seqs: [c1]\n", "map VF-RUN-CONFIG"),
        ("catalogue: mine\nchecks:\n  VF-REACH: [1.2.3]\n", "not an OSCAL token"),
        ("catalogue: mine\ncontrols: {c1: one}\nchecks:\n  VF-REACH: [c2]\n", "control 'c2' is not under controls"),
        ("catalogue: mine\nchecks:\n  VF-REACH: {controls: [c1], nist_800_53: [CM6]}\n", "not a NIST SP 800-53"),
        ("catalogue: mine\nchecks:\n  VF-REACH: {controls: [c1], extra: 1}\n", "checks.VF-REACH.extra"),
        ("checks: {}\n", "catalogue"),
        ("catalogue: mine\nchecks:\n  VF-REACH: []\n", "no check is mapped to a control"),
        ("- VF-REACH\n", "(file)"),
    ],
)
def test_bad_user_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "baseline.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ControlsError) as err:
        load_controls(path)
    assert message in str(err.value)


def test_an_unreadable_user_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputFileError):
        load_controls(tmp_path / "missing.yaml")
