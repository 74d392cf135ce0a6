"""Model manifests and the one files-vs-manifest rule: made from a real directory, listed by the real
model-files.sh (GNU find, sha256sum), judged by the same Python the vllm role's filter and the audit run; hostile
manifests and listings refused or shown as data."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.audit_samples import evidence, sample_desired
from vllm_fleet.audit.collect import MODEL_FILES, parse_sections, script
from vllm_fleet.audit.reconcile import judge
from vllm_fleet.cli.commands import app
from vllm_fleet.models.manifest import (
    MAX_FILES,
    ListingError,
    ManifestError,
    load_manifest,
    make_manifest,
    model_file_problems,
    parse_listing,
)
from vllm_fleet.models.staging import entry_problems, served_entry, unverified, verified
from vllm_fleet.project.paths import project_root

ROLE_TASKS = project_root() / "roles" / "vllm" / "tasks"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    d = tmp_path / "tiny"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (d / "model.safetensors").write_bytes(os.urandom(300_000))
    (d / "sub" / "tokenizer.json").write_text("{}")
    (d / ".vllm-fleet-staged").write_text("marker\n")  # vllm-fleet's own: never listed
    return d


def listing_of(directory: Path) -> str:
    """What a node sends: the role's own script, run for real."""
    proc = subprocess.run(["sh", str(MODEL_FILES), str(directory)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def host_copy(directory: Path) -> tuple[str, str]:
    """Stage the manifest as the role does (beside the files); its base64 (as slurped) and its digest."""
    data = make_manifest(directory).to_bytes()
    (directory / ".vllm-fleet-manifest.json").write_bytes(data)
    return base64.b64encode(data).decode(), hashlib.sha256(data).hexdigest()


def flip_byte(path: Path, offset: int = 1000) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_manifest_lists_every_file_and_its_digest_is_its_bytes(model: Path) -> None:
    m = make_manifest(model)
    assert [f.path for f in m.files] == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    assert m.files[1].size == 300_000
    assert m.files[1].sha256 == hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()
    data = m.to_bytes()
    assert m.digest == hashlib.sha256(data).hexdigest()
    assert load_manifest(data, m.digest) == m
    assert make_manifest(model).to_bytes() == data  # stable: the same directory, the same digest


def test_an_untouched_copy_passes_and_each_change_is_named(model: Path) -> None:
    copy, digest = host_copy(model)
    assert model_file_problems(copy, digest, listing_of(model)) == []
    flip_byte(model / "model.safetensors")
    assert model_file_problems(copy, digest, listing_of(model)) == [
        f"model.safetensors: sha256 {hashlib.sha256((model / 'model.safetensors').read_bytes()).hexdigest()[:16]}…,"
        f" the manifest says {make_manifest_sha(copy, 'model.safetensors')[:16]}…"
    ]
    (model / "sub" / "tokenizer.json").unlink()
    (model / "extra.py").write_text("import os\n")  # e.g. remote code slipped in beside the weights
    (model / "config.json").write_text("{}")
    problems = model_file_problems(copy, digest, listing_of(model))
    assert problems == [
        "config.json: 2 bytes, the manifest says 39",
        problems[1],
        "sub/tokenizer.json: missing",
        "extra.py: not in the manifest",
    ]
    assert problems[1].startswith("model.safetensors: sha256")


def make_manifest_sha(copy_b64: str, path: str) -> str:
    doc = json.loads(base64.b64decode(copy_b64))
    return next(f["sha256"] for f in doc["files"] if f["path"] == path)


def test_a_symlink_or_a_strange_name_on_the_node_is_data(model: Path) -> None:
    copy, digest = host_copy(model)
    (model / "config.json").unlink()
    (model / "config.json").symlink_to("/etc/hostname")
    (model / "evil\nname\x1b[2J").write_text("x")
    problems = model_file_problems(copy, digest, listing_of(model))
    assert problems == ["config.json: not a regular file (type 'l')", "evil\\x0aname\\x1b[2J: not in the manifest"]


def test_the_host_copy_must_be_the_manifest_the_stack_names(model: Path) -> None:
    copy, digest = host_copy(model)
    other = "0" * 64
    (problem,) = model_file_problems(copy, other, listing_of(model))
    assert f"its sha256 is {digest}, the stack names {other}" in problem
    empty = hashlib.sha256(b"").hexdigest()  # a host without the copy: its slurp gave nothing
    assert model_file_problems("", digest, listing_of(model))[0].startswith(
        f"the host's copy of the manifest: its sha256 is {empty}"
    )
    assert model_file_problems("%%%", digest, listing_of(model)) == ["the host's copy of the manifest is not base64"]


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../etc/shadow", "not a plain relative path"),
        ("/etc/shadow", "not a plain relative path"),
        ("a//b", "not a plain relative path"),
        ("a/./b", "not a plain relative path"),
        (".vllm-fleet-manifest.json", "vllm-fleet's own"),
        ("a\x1b]0;x\x07", "control character"),
        ("a\\b", "backslash"),
        ("", "empty"),
    ],
)
def test_a_hostile_manifest_entry_is_refused(path: str, why: str) -> None:
    doc = {"format": "vllm-fleet/model-manifest/1", "files": [{"path": path, "size": 1, "sha256": "a" * 64}]}
    with pytest.raises(ManifestError, match=why):
        load_manifest(json.dumps(doc).encode())


@pytest.mark.parametrize(
    "doc",
    [
        {"format": "vllm-fleet/model-manifest/1", "files": []},
        {"format": "other", "files": [{"path": "a", "size": 1, "sha256": "a" * 64}]},
        {"format": "vllm-fleet/model-manifest/1", "files": [{"path": "b", "size": 1, "sha256": "a" * 64}] * 2},
        {"format": "vllm-fleet/model-manifest/1", "files": [{"path": "a", "size": -1, "sha256": "a" * 64}]},
        {"format": "vllm-fleet/model-manifest/1", "files": [{"path": "a", "size": 1, "sha256": "A" * 64}]},
        {"format": "vllm-fleet/model-manifest/1", "files": [{"path": "a", "size": "1", "sha256": "a" * 64}]},
        {"format": "vllm-fleet/model-manifest/1", "files": [{"path": "a", "size": 1, "sha256": "a" * 64, "x": 1}]},
        [1, 2],
    ],
)
def test_a_malformed_manifest_is_refused(doc: Any) -> None:
    with pytest.raises(ManifestError):
        load_manifest(json.dumps(doc).encode())
    with pytest.raises(ManifestError, match="larger than"):
        load_manifest(b" " * (33 * 1024 * 1024))


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"f 1 a\0", "no hash section"),
        (b"f x a\0@@sha256\0", "malformed entry"),
        (b"f 1 a\0@@sha256\0zz  a\0", "malformed hash"),
        (b"@@sha256\0" + b"a" * 64 + b" a\0", "malformed hash"),
        (b"f 1 a\0" * (MAX_FILES + 1) + b"@@sha256\0", "more than"),
    ],
)
def test_a_hostile_listing_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(ListingError, match=why):
        parse_listing(base64.b64encode(raw).decode())
    with pytest.raises(ListingError, match="not base64"):
        parse_listing("\x1b[2J not base64")


def test_make_manifest_refuses_what_a_manifest_cannot_hold(tmp_path: Path, model: Path) -> None:
    (model / "link").symlink_to("config.json")
    with pytest.raises(ManifestError, match="not a regular file"):
        make_manifest(model)
    (model / "link").unlink()
    (model / "bad\nname").write_text("x")
    with pytest.raises(ManifestError, match="rename it"):
        make_manifest(model)
    with pytest.raises(ManifestError, match="not a directory"):
        make_manifest(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError, match="no files"):
        make_manifest(tmp_path / "empty")


def test_the_command_writes_the_manifest_and_prints_its_digest(model: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["model", "manifest", str(model)])
    assert result.exit_code == 0, result.output
    written = tmp_path / "tiny.manifest.json"
    digest = hashlib.sha256(written.read_bytes()).hexdigest()
    assert result.output.splitlines()[-1] == f"manifest_sha256: {digest}"
    assert load_manifest(written.read_bytes(), digest) == make_manifest(model)
    bad = CliRunner().invoke(app, ["model", "manifest", str(tmp_path / "missing")])
    assert bad.exit_code == 1 and "not a directory" in " ".join(bad.output.split())  # the console wraps long paths


def test_the_roles_check_is_the_rule(model: Path) -> None:
    """verify-model.yml's expression, templated by Ansible with the project's filters, is model_file_problems."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    from tests.unit.test_role_vars import _ansible_plugins

    _ansible_plugins()
    tasks = yaml.safe_load((ROLE_TASKS / "verify-model.yml").read_text())
    check = next(t for t in tasks if "ansible.builtin.assert" in t)
    assert check["ansible.builtin.assert"]["that"] == "_vllm_model_problems | length == 0"
    expression = check["vars"]["_vllm_model_problems"]
    copy, digest = host_copy(model)
    flip_byte(model / "model.safetensors")
    listing = listing_of(model)
    variables = {
        "vllm_model": {"name": "tiny", "manifest_sha256": digest},
        "_vllm_model_manifest": {"content": copy},
        "_vllm_model_listing": {"stdout": listing},
    }
    found = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))
    assert found == model_file_problems(copy, digest, listing) and len(found) == 1
    assert found[0].startswith("model.safetensors: sha256")
    assert Templar(loader=DataLoader(), variables={**variables, "_vllm_model_manifest": {}}).template(
        trust_as_template(expression)
    ) == model_file_problems("", digest, listing)  # a host without the copy fails, it is not skipped


def test_the_audit_script_lists_the_served_model_as_the_role_does(model: Path, tmp_path: Path) -> None:
    """The audit's read-only script, run here for real: its model sections are the role's listing and copy."""
    copy, _digest = host_copy(model)
    args = ["vllm-x.service", str(tmp_path / "no.yaml"), "/nonexistent", "/nonexistent", "", str(model)]
    proc = subprocess.run(["sh", "-s", "--", *args], input=script(), capture_output=True, text=True, timeout=60)
    sections = parse_sections(proc.stdout)
    assert parse_listing(sections["model_files"]) == parse_listing(listing_of(model))  # hashes finish in any order
    assert sections["model_manifest"].strip() == copy


def test_the_audit_judges_the_served_model(model: Path, data_dir: Path) -> None:
    copy, digest = host_copy(model)
    desired = replace(sample_desired(), model_dir=str(model), model_manifest_sha256=digest)

    def verdict(d: Any, **remote: str) -> tuple[str, str]:
        (f,) = [f for f in judge(d, evidence(d, data_dir, **remote)) if f.check == "VF-MODEL-FILES"]
        return f.status, f.actual

    clean = {"model_manifest": copy, "model_files": listing_of(model)}
    assert verdict(desired, **clean) == ("passed", f"{model}: every file matches manifest sha256:{digest}")
    flip_byte(model / "model.safetensors")
    status, actual = verdict(desired, model_manifest=copy, model_files=listing_of(model))
    assert status == "failed" and actual.startswith("model.safetensors: sha256")
    assert verdict(replace(desired, model_manifest_sha256=None), **clean)[0] == "not-reviewed"
    assert verdict(replace(desired, model_dir=None), **clean)[0] == "not-applicable"
    assert verdict(desired, model_manifest=copy)[0] == "failed"  # no listing: the host's hashing did not finish


def test_the_stack_names_the_served_models_entry() -> None:
    entries = [
        {"name": "a", "src": "/m/a", "manifest": "/m/a.json", "manifest_sha256": "a" * 64},
        {"name": "b", "src": "/m/b", "unverified": True},
    ]
    assert served_entry(entries, "/opt/models/", "/opt/models/a/") == entries[0]
    assert served_entry(entries, "/opt/models", "/opt/models/c") is None
    assert served_entry(entries, "/opt/models", "meta-llama/Llama-3.1-8B") is None
    assert unverified(entries) == [(1, "b")]


@pytest.mark.parametrize(
    ("manifest", "refused"),
    [
        ("/srv/m.manifest.json", False),
        ("http://mirror/m.json", False),
        ("file:///srv/m.json", False),
        ("m.manifest.json", True),  # relative: resolved by Ansible against the role's files/, not the stack
        ("../../etc/shadow", True),
        ("ftp://mirror/m.json", True),
    ],
)
def test_a_manifest_is_an_absolute_controller_path_or_a_url(manifest: str, refused: bool) -> None:
    entry = {"name": "m", "src": "/srv/m", "manifest": manifest, "manifest_sha256": "a" * 64}
    found = [f for f, _ in entry_problems(0, entry) if f == "[0].manifest"]
    assert bool(found) is refused, found


def _role_template(expression: str, variables: dict[str, Any]) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    from tests.unit.test_role_vars import _ansible_plugins

    _ansible_plugins()
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def test_the_models_checked_before_a_start_are_the_verified_entries() -> None:
    """verify.yml's loop is staging.verified (the verified_models filter): no second predicate in Jinja."""
    (task,) = yaml.safe_load((ROLE_TASKS / "verify.yml").read_text())
    entries = [
        {"name": "a", "src": "/m/a", "manifest": "/m/a.json", "manifest_sha256": "a" * 64},
        {"name": "b", "src": "/m/b", "unverified": True},
        {"name": "c", "src": "/m/c", "unverified": False, "manifest": "/m/c.json", "manifest_sha256": "c" * 64},
    ]
    looped = _role_template(task["loop"], {"vllm_models": entries})
    assert [e["name"] for e in looped] == ["a", "c"] == [e["name"] for e in verified(entries)]


def test_the_controllers_manifest_is_checked_before_it_is_sent(model: Path, tmp_path: Path) -> None:
    """model.yml refuses a controller manifest whose bytes are not the pinned digest before its copy task runs: a
    wrong path (another file of the controller, a missing one) sends nothing to the host."""
    tasks = yaml.safe_load((ROLE_TASKS / "model.yml").read_text())
    names = [t.get("name", "") for t in tasks]
    check = next(i for i, n in enumerate(names) if n.startswith("The manifest on the controller must be"))
    assert check < next(i for i, n in enumerate(names) if n.startswith("Put the manifest beside the files, from the"))
    expression = tasks[check]["vars"]["_vllm_manifest_digest"]
    written = tmp_path / "tiny.manifest.json"
    written.write_bytes(make_manifest(model).to_bytes())
    digest = hashlib.sha256(written.read_bytes()).hexdigest()
    other = tmp_path / "secret.txt"
    other.write_text("not a manifest\n")
    for path, same in ((written, True), (other, False), (tmp_path / "missing.json", False)):
        found = _role_template(expression, {"vllm_model": {"name": "tiny", "manifest": str(path)}})
        assert (found == digest) is same, (path, found)
    assert tasks[check]["ansible.builtin.assert"]["that"] == "_vllm_manifest_digest == vllm_model.manifest_sha256"


@pytest.mark.parametrize(
    ("entry", "source"),
    [
        ({"name": "m", "src": "/d", "manifest": "/srv/m.manifest.json", "manifest_sha256": "0" * 64}, "controller"),
        ({"name": "m", "url": "http://mirror/m.tar", "manifest": "https://mirror/m.json"}, "mirror"),
        ({"name": "m", "src": "/d", "manifest": "file:///srv/m.json"}, "mirror"),
        ({"name": "m", "src": "/d", "unverified": True}, "none"),
        ({"name": "m", "src": "/d", "unverified": "yes", "manifest": "/m.json"}, "controller"),  # only true skips
        ("not a mapping", "none"),
    ],
)
def test_the_role_takes_the_manifest_from_where_the_entry_says(entry: object, source: str) -> None:
    """The role's three manifest paths (model.yml) are this one rule, exposed as the model_manifest_source filter."""
    from plugins.filter.model_files import FilterModule

    assert FilterModule().filters()["model_manifest_source"](entry) == source
