"""An evidence bundle is untrusted input: whoever can write to it must not be able to change the verdict unseen.

The re-judge reads only the files the manifest lists (each hash checked, each path confined), checks every file
against its schema, refuses an empty bundle, takes waivers only from the auditor or the manifest, and verifies the
bundle's OpenSSH signature against the auditor's allowed signers (real ``ssh-keygen``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.audit_samples import sample_items
from vllm_fleet.audit import judge_bundle, rejudge
from vllm_fleet.audit.evidence import MANIFEST, BundleError, read_bundle, write_bundle
from vllm_fleet.audit.signature import SIGNATURE, SignatureError, sign, signing_key
from vllm_fleet.cli.commands import app

WAIVE_NODE2 = "- check: VF-CFG-DISK\n  hosts: node2\n  reason: change CHG-1\n  expires: 2099-01-01\n"


def _bundle(root: Path) -> Path:
    write_bundle(root, sample_items())
    return root


def _rehash(root: Path, rel: str) -> None:
    """What an editor of the bundle does after changing a file: rewrite its hash in the manifest."""
    manifest = json.loads((root / MANIFEST).read_text())
    manifest[rel] = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    (root / MANIFEST).write_text(json.dumps(manifest))


def _failed(findings: list) -> set[tuple[str, str]]:  # type: ignore[type-arg]
    return {(f.host, f.check) for f in findings if f.counts and f.status == "failed"}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """(trusted key, its allowed-signers file, an untrusted key, its own allowed-signers file)."""
    trusted, allowed = signing_key(tmp_path_factory.mktemp("trusted"), "auditee")
    other, other_allowed = signing_key(tmp_path_factory.mktemp("other"), "mallory")
    return trusted, allowed, other, other_allowed


def test_a_waivers_file_dropped_into_the_bundle_waives_nothing(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    before = judge_bundle(bundle)
    assert ("node2", "VF-CFG-DISK") in _failed(before)
    (bundle / "waivers.yaml").write_text(WAIVE_NODE2)
    assert _failed(judge_bundle(bundle)) == _failed(before)


def test_waivers_listed_in_the_manifest_or_given_by_the_auditor_are_used_and_named(tmp_path: Path) -> None:
    write_bundle(tmp_path / "b", sample_items(), extra={"waivers.yaml": WAIVE_NODE2})
    judged = rejudge(tmp_path / "b", waivers=None, allowed_signers=None, unsigned=True)
    assert ("node2", "VF-CFG-DISK") not in _failed(judged.findings)
    assert judged.waivers == "the bundle's waivers.yaml"
    own = tmp_path / "mine.yaml"
    own.write_text("[]\n")
    judged = rejudge(tmp_path / "b", waivers=own, allowed_signers=None, unsigned=True)
    assert ("node2", "VF-CFG-DISK") in _failed(judged.findings)  # the auditor's (empty) waivers, not the bundle's
    assert judged.waivers == f"--waivers {own}"


def test_files_outside_the_manifest_are_not_read(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    manifest = json.loads((bundle / MANIFEST).read_text())
    body = "node1/http/metrics"
    assert body in manifest
    expected = [f.to_dict() for f in judge_bundle(bundle)]
    del manifest[body]  # the body is no longer listed; the file that stays on disk is then edited
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    (bundle / body).write_text("garbage that would change the verdict\n")
    judged = [f.to_dict() for f in judge_bundle(bundle)]
    assert judged != expected  # without its listed body, node1's /metrics checks are not judged as before
    assert not any("garbage" in json.dumps(f) for f in judged)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: {}, "lists no host"),
        (lambda m: [], "object expected, got list"),
        (lambda m: {**m, "../outside": "0" * 64}, "outside the bundle"),
        (lambda m: {**m, "/etc/passwd": "0" * 64}, "outside the bundle"),
        (lambda m: {**m, "node1/remote/x": "nothex"}, "not a sha256"),
        (lambda m: {k: v for k, v in m.items() if k != "node1/desired.json"}, "has no desired.json"),
        (lambda m: {**m, "Node1/meta.json": m["node1/meta.json"]}, "differ in case only"),
    ],
)
def test_a_manifest_out_of_shape_is_refused(tmp_path: Path, edit: object, message: str) -> None:
    bundle = _bundle(tmp_path)
    manifest = json.loads((bundle / MANIFEST).read_text())
    (bundle / MANIFEST).write_text(json.dumps(edit(manifest)))  # type: ignore[operator]
    with pytest.raises(BundleError, match=message):
        read_bundle(bundle)


def test_a_key_listed_twice_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    text = (bundle / MANIFEST).read_text()
    first = text.index('"node1/desired.json"')
    line = text[first : text.index("\n", first)]
    (bundle / MANIFEST).write_text(text.replace(line, line + "\n  " + line, 1))
    with pytest.raises(BundleError, match="listed twice"):
        read_bundle(bundle)


def test_a_symlink_out_of_the_bundle_is_refused_without_reading_it(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    target = bundle / "node1" / "remote" / "cmdline"
    secret = "PASSPHRASE=hunter2"
    os.environ["VLLM_FLEET_TEST_SECRET"] = secret
    try:
        target.unlink()
        target.symlink_to("/proc/self/environ")
        with pytest.raises(BundleError) as caught:
            read_bundle(bundle)
        assert "symlink" in str(caught.value) and "hunter2" not in str(caught.value)
        target.unlink()
        (bundle / "node1" / "remote").rename(bundle / "node1" / "remote.real")
        (bundle / "node1" / "remote").symlink_to(bundle / "node1" / "remote.real")  # a symlinked directory
        with pytest.raises(BundleError, match="symlink"):
            read_bundle(bundle)
    finally:
        del os.environ["VLLM_FLEET_TEST_SECRET"]


@pytest.mark.parametrize(
    ("rel", "change", "message"),
    [
        ("node1/desired.json", lambda d: {**d, "extra": 1}, r"node1/desired.json: extra: Unexpected"),
        ("node1/desired.json", lambda d: {k: v for k, v in d.items() if k != "address"}, r"desired.json: address"),
        ("node1/desired.json", lambda d: {**d, "vllm_version": "9.9.9"}, r"desired.json: vllm_version: .*outside"),
        ("node1/desired.json", lambda d: {**d, "profile_data": {"name": 3}}, r"node1/desired.json: "),
        ("node1/desired.json", lambda d: {**d, "host": "node2"}, r"host: 'node2', but the file is under 'node1'"),
        ("node1/meta.json", lambda d: {**d, "started_at": "yesterday"}, r"node1/meta.json: started_at"),
        ("node1/meta.json", lambda d: [d], r"node1/meta.json: \(file\)"),
    ],
)
def test_every_file_is_checked_against_its_schema(tmp_path: Path, rel: str, change: object, message: str) -> None:
    bundle = _bundle(tmp_path)
    data = json.loads((bundle / rel).read_text())
    (bundle / rel).write_text(json.dumps(change(data)))  # type: ignore[operator]
    _rehash(bundle, rel)
    with pytest.raises(BundleError, match=message) as caught:
        read_bundle(bundle)
    assert "\n" not in str(caught.value)


def test_a_signed_bundle_verifies_and_any_edit_is_refused(tmp_path: Path, keys: tuple[Path, ...]) -> None:
    trusted, allowed, other, other_allowed = keys
    bundle = _bundle(tmp_path / "b")
    sign(bundle, trusted)
    judged = rejudge(bundle, waivers=None, allowed_signers=allowed)
    assert judged.signature is not None and judged.signature.verified and judged.signature.signer == "auditee"
    assert judged.provenance()["signature"]["verified"] is True  # type: ignore[index]
    # An editor changes a file and rewrites its hash: the manifest no longer is what was signed.
    rel = "node2/remote/config"
    (bundle / rel).write_text((bundle / rel).read_text().replace("a", "b"))
    _rehash(bundle, rel)
    with pytest.raises(SignatureError, match="does not hold"):
        rejudge(bundle, waivers=None, allowed_signers=allowed)
    # ... and re-signs it with a key of their own: not one the auditor trusts.
    sign(bundle, other)
    with pytest.raises(SignatureError, match="not in --allowed-signers"):
        rejudge(bundle, waivers=None, allowed_signers=allowed)
    assert rejudge(bundle, waivers=None, allowed_signers=other_allowed).signature.verified  # type: ignore[union-attr]


def test_an_unsigned_bundle_is_refused_unless_the_auditor_says_unsigned(tmp_path: Path, keys: tuple[Path, ...]) -> None:
    bundle = _bundle(tmp_path)
    with pytest.raises(SignatureError, match=r"unsigned.*--unsigned"):
        rejudge(bundle, waivers=None, allowed_signers=keys[1])
    judged = rejudge(bundle, waivers=None, allowed_signers=keys[1], unsigned=True)
    assert judged.signature is not None and not judged.signature.signed and not judged.signature.verified


def test_a_signature_for_another_namespace_does_not_verify(tmp_path: Path, keys: tuple[Path, ...]) -> None:
    bundle = _bundle(tmp_path)
    sig = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-q", "-f", str(keys[0]), "-n", "git"],
        input=(bundle / MANIFEST).read_bytes(),
        capture_output=True,
        check=True,
    ).stdout
    (bundle / SIGNATURE).write_bytes(sig)
    with pytest.raises(SignatureError):
        rejudge(bundle, waivers=None, allowed_signers=keys[1])


def test_the_command_refuses_what_the_library_refuses_in_one_line(tmp_path: Path, keys: tuple[Path, ...]) -> None:
    bundle = _bundle(tmp_path / "b")
    runner = CliRunner()
    unsigned = runner.invoke(app, ["audit", "--evidence", str(bundle), "--out", str(tmp_path / "o")])
    assert unsigned.exit_code == 2 and "Traceback" not in unsigned.output
    assert "--unsigned" in unsigned.output
    sign(bundle, keys[0])
    ok = runner.invoke(
        app,
        ["audit", "--evidence", str(bundle), "--allowed-signers", str(keys[1]), "--out", str(tmp_path / "o")],
    )
    assert ok.exit_code == 2, ok.output  # node3 could not be read: incomplete, judged
    assert "signature verified: auditee" in ok.output
    report = json.loads((tmp_path / "o" / "audit.json").read_text())
    assert report["evidence"]["signature"]["verified"] is True and report["evidence"]["waivers"] == "none"
    (bundle / MANIFEST).write_text("{}")
    empty = runner.invoke(app, ["audit", "--evidence", str(bundle), "--unsigned", "--out", str(tmp_path / "o")])
    assert empty.exit_code == 2 and "lists no host" in empty.output
