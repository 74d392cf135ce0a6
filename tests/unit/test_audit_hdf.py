"""The audit as HDF (vllm_fleet/audit/hdf.py): structure and losslessness here, and read back by MITRE's own
tools (inspecjs' parser, `saf view summary`) when tools/mitre_tools.sh can install them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.audit_samples import sample_audit, sample_items
from vllm_fleet.audit.evidence import write_bundle
from vllm_fleet.audit.hdf import IMPACT, base_check, findings_from_hdf, to_hdf, write_hdf
from vllm_fleet.audit.reconcile import Finding, judge
from vllm_fleet.audit.report import HostInfo, check_catalogue

ROOT = Path(__file__).resolve().parents[2]
INSTALLER = ROOT / "tools" / "mitre_tools.sh"
GENERATED = 1_795_944_700.0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Finding], list[HostInfo]]:
    """sample_audit()'s fleet, judged against a written bundle so that findings carry evidence digests."""
    items = sample_items()
    manifest = write_bundle(tmp_path_factory.mktemp("bundle"), items)
    findings = [f for d, e in items for f in judge(d, e, manifest)]
    plain, hosts = sample_audit()
    assert [replace(f, evidence={}) for f in findings] == plain  # the same fleet, plus evidence references
    assert all(f.evidence for f in findings if f.layer != "profile")  # a profile-only verdict rests on no file
    return findings, hosts


@pytest.fixture(scope="module")
def docs(fleet: tuple[list[Finding], list[HostInfo]]) -> list[dict[str, Any]]:
    return to_hdf(*fleet, generated_at=GENERATED)


def _control(doc: dict[str, Any], cid: str) -> dict[str, Any]:
    return next(c for c in doc["profiles"][0]["controls"] if c["id"] == cid)


def _by_id(findings: list[Finding]) -> dict[str, Finding]:
    out = {f.id: f for f in findings}
    assert len(out) == len(findings), "finding ids are unique"
    return out


def test_one_document_per_host_with_a_control_per_check(
    fleet: tuple[list[Finding], list[HostInfo]], docs: list[dict[str, Any]]
) -> None:
    catalogue = check_catalogue()
    assert [d["platform"]["target_id"] for d in docs] == ["node1", "node2", "node3"]
    for doc, host in zip(docs, fleet[1], strict=True):
        assert doc["version"] == "0.1.0" and doc["platform"]["name"] == "vllm-fleet"
        assert host.finished_at > host.started_at  # the samples' hosts took time: the duration below is theirs
        assert doc["statistics"]["duration"] == pytest.approx(host.finished_at - host.started_at)
        (profile,) = doc["profiles"]
        assert (profile["name"], profile["version"], profile["status"]) == ("vllm-fleet", "0.1.0", "loaded")
        assert profile["sha256"] == docs[0]["profiles"][0]["sha256"]  # one profile, whatever the host
        assert [c["id"] for c in profile["controls"]] == list(catalogue) == profile["groups"][0]["controls"]
        assert {a["name"]: a["options"]["value"] for a in profile["attributes"]}["host"] == doc["target"]["host"]
        for control in profile["controls"]:
            check = catalogue[control["id"]]
            assert control["title"] == check.title and control["refs"] == []
            assert control["tags"]["vf_check"] == check.id and control["tags"]["severity"] == check.severity
            assert control["impact"] in (IMPACT[check.severity], 0.0)
            assert control["source_location"]["ref"] == "vllm_fleet/audit/reconcile.py"
            assert isinstance(control["source_location"]["line"], int)
            assert {"label": "fix", "data": check.remediation} in control["descriptions"]
            assert control["results"], "every control has a result (HDF: none would be a Profile Error)"
            for r in control["results"]:
                assert r["status"] in ("passed", "failed", "skipped", "error")
                assert r["start_time"].endswith("+00:00") and r["run_time"] >= 0


def test_statuses_follow_inspec_conventions(docs: list[dict[str, Any]]) -> None:
    node1, node2, node3 = docs
    spec = _control(node1, "VF-SLO-SPEC")  # not-applicable: InSpec's only_if, impact 0 and a skipped result
    assert spec["impact"] == 0.0 and spec["tags"]["severity"] == "low"
    assert [(r["status"], r["skip_message"]) for r in spec["results"]] == [
        ("skipped", "not-applicable: speculation off")
    ]
    (seqs,) = _control(node2, "VF-RUN-CONFIG")["results"]  # a sub-check is a result of its base control
    assert (seqs["status"], seqs["resource_id"], seqs["resource"]) == (
        "failed",
        "VF-RUN-CONFIG:max-num-seqs@node2",
        "config file",
    )
    assert seqs["code_desc"] == "node2: VF-RUN-CONFIG:max-num-seqs expected 8, actual 64 [config file]"
    assert "expected 8, actual 64" in seqs["message"] and "fix: converge the host" in seqs["message"]
    (reach,) = _control(node3, "VF-REACH")["results"]
    assert reach["status"] == "error" and "ssh: connect timed out" in reach["message"]
    unjudged = [c for c in node3["profiles"][0]["controls"] if c["id"] != "VF-REACH"]
    assert unjudged and all(c["tags"]["vf_findings"] == [] for c in unjudged)
    assert {r["skip_message"] for c in unjudged for r in c["results"]} == {
        "not-reviewed: host not audited: ssh: connect timed out"
    }


def test_every_finding_is_recoverable(fleet: tuple[list[Finding], list[HostInfo]], docs: list[dict[str, Any]]) -> None:
    findings, _ = fleet
    text = json.dumps(docs)
    back = _by_id(findings_from_hdf(json.loads(text)))
    assert back == _by_id(findings)  # id, expected, actual, layer, evidence {path: sha256}, ... as judged
    results = {r.get("resource_id"): r for d in docs for c in d["profiles"][0]["controls"] for r in c["results"]}
    for f in findings:
        r = results[f.id]
        assert f.host in r["code_desc"] and f.expected in r["code_desc"] and f.actual in r["code_desc"]
        if f.status in ("failed", "error"):  # what Heimdall shows: the digests in the message
            assert all(f"{path} sha256:{digest}" in r["message"] for path, digest in f.evidence.items())


def test_write_hdf_and_refusals(fleet: tuple[list[Finding], list[HostInfo]], tmp_path: Path) -> None:
    findings, hosts = fleet
    paths = write_hdf(tmp_path, findings, hosts, generated_at=GENERATED)
    assert [p.name for p in paths] == ["node1.hdf.json", "node2.hdf.json", "node3.hdf.json"]
    assert [json.loads(p.read_text()) for p in paths] == to_hdf(findings, hosts, generated_at=GENERATED)
    with pytest.raises(ValueError, match="node3"):
        to_hdf(findings, hosts[:2])
    with pytest.raises(ValueError, match="VF-NOPE"):
        to_hdf([replace(findings[0], check="VF-NOPE:x")], hosts)


# --- read back by MITRE's tools ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mitre_dir() -> Path:
    """tools/mitre_tools.sh's install (it installs on first use; CI runs it from scripts/setup)."""
    required = os.environ.get("VLLM_FLEET_REQUIRE_MITRE") == "1"
    missing = [t for t in ("node", "npm") if shutil.which(t) is None]
    reason = f"MITRE HDF tools unavailable: {' and '.join(missing)} not on PATH" if missing else ""
    if not missing:
        proc = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True, timeout=900, check=False)
        if proc.returncode == 0:
            return Path(proc.stdout.strip().splitlines()[-1]).parents[1]
        reason = f"MITRE HDF tools not installed: tools/mitre_tools.sh failed: {proc.stderr.strip()[-400:]}"
    if required:
        pytest.fail(reason)
    pytest.skip(reason)


# inspecjs' convertFile tries exec JSON, then exec-JSON-min, then profile JSON: only the first counts. Statuses
# are what Heimdall and saf compute from it (convertFileContextual); `parsed` is the document as inspecjs keeps it.
_NODE_CHECK = r"""
const fs = require('fs'), path = require('path');
const inspecjs = require(path.join(process.argv[2], 'node_modules', 'inspecjs'));
const out = {};
for (const file of process.argv.slice(3)) {
  const text = fs.readFileSync(file, 'utf8');
  const conv = inspecjs.convertFile(text, true);
  const entry = {errors: Object.fromEntries(Object.entries(conv.errors || {}).map(([k, e]) => [k, String(e)]))};
  if (conv['1_0_ExecJson']) {
    entry.parsed = conv['1_0_ExecJson'];
    const profile = inspecjs.convertFileContextual(text).contains[0];
    entry.statuses = Object.fromEntries(profile.contains.map(c => [c.data.id, c.root.hdf.status]));
  }
  out[path.basename(file)] = entry;
}
process.stdout.write(JSON.stringify(out));
"""


def _inspecjs(mitre_dir: Path, tmp_path: Path, paths: list[Path]) -> dict[str, Any]:
    script = tmp_path / "check.js"
    script.write_text(_NODE_CHECK)
    proc = subprocess.run(
        ["node", str(script), str(mitre_dir), *map(str, paths)], capture_output=True, text=True, check=True
    )
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _expected_statuses(findings: list[Finding], hosts: list[HostInfo]) -> dict[str, dict[str, str]]:
    """Heimdall's control status for each host × check, worked out from the findings alone."""
    mine: dict[tuple[str, str], list[str]] = defaultdict(list)
    for f in findings:
        mine[f.host, base_check(f.check)].append(f.status)
    out: dict[str, dict[str, str]] = {}
    for h in hosts:
        out[h.host] = {}
        for cid in check_catalogue():
            s = mine.get((h.host, cid), [])
            out[h.host][cid] = (
                "Not Reviewed" if not s
                else "Profile Error" if "error" in s
                else "Not Applicable" if set(s) == {"not-applicable"}
                else "Failed" if "failed" in s
                else "Passed" if "passed" in s
                else "Not Reviewed"
            )  # fmt: skip
    return out


def test_inspecjs_reads_it_as_exec_json(
    fleet: tuple[list[Finding], list[HostInfo]], mitre_dir: Path, tmp_path: Path
) -> None:
    findings, hosts = fleet
    paths = write_hdf(tmp_path / "hdf", findings, hosts, generated_at=GENERATED)
    got = _inspecjs(mitre_dir, tmp_path, paths)
    expected = _expected_statuses(findings, hosts)
    for h in hosts:
        entry = got[f"{h.host}.hdf.json"]
        assert "parsed" in entry, f"inspecjs rejects {h.host}'s HDF as exec JSON: {entry['errors']}"
        assert entry["statuses"] == expected[h.host]
    assert expected["node2"]["VF-RUN-CONFIG"] == "Failed" and expected["node1"]["VF-SLO-SPEC"] == "Not Applicable"
    # Lossless through MITRE's parser too: what Heimdall loads still holds every finding and digest.
    back = findings_from_hdf(got[f"{h.host}.hdf.json"]["parsed"] for h in hosts)
    assert _by_id(back) == _by_id(findings)


_SAF_KEY = {
    "Passed": "passed",
    "Failed": "failed",
    "Not Reviewed": "skipped",
    "Profile Error": "error",
    "Not Applicable": "no_impact",
}


def test_saf_view_summary_counts_match(
    fleet: tuple[list[Finding], list[HostInfo]], mitre_dir: Path, tmp_path: Path
) -> None:
    findings, hosts = fleet
    paths = write_hdf(tmp_path / "hdf", findings, hosts, generated_at=GENERATED)
    expected = _expected_statuses(findings, hosts)
    catalogue = check_catalogue()
    saf = mitre_dir / "node_modules" / ".bin" / "saf"
    subsets = [paths[1:2], paths]  # the drifted host, then the fleet (saf adds up the files of one profile)
    runs = []
    for i, subset in enumerate(subsets):  # in parallel: saf takes 2-4 s to start
        out = tmp_path / f"summary{i}.json"
        cmd = [str(saf), "view", "summary", "-i", *map(str, subset), "--format", "json", "--no-stdout", "-o", str(out)]
        runs.append(
            (
                subset,
                out,
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path),
            )
        )
    for subset, out, proc in runs:
        log, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, log
        (summary,) = json.loads(out.read_text())
        assert summary["profileName"] == "vllm-fleet"
        assert summary["resultSets"] == [p.name for p in subset]
        want: Counter[tuple[str, str]] = Counter(
            (_SAF_KEY[status], catalogue[cid].severity)
            for p in subset
            for cid, status in expected[p.name.removesuffix(".hdf.json")].items()
        )
        for key in _SAF_KEY.values():
            got = {sev: n for sev, n in summary[key].items() if sev != "total" and n}
            assert got == {sev: n for (k, sev), n in want.items() if k == key}, (key, [p.name for p in subset])
            assert summary[key]["total"] == sum(n for (k, _), n in want.items() if k == key)
    fleet_counts = {key: summary[key]["total"] for key in _SAF_KEY.values()}
    assert fleet_counts == {"passed": 36, "failed": 2, "skipped": 20, "error": 1, "no_impact": 4}
