"""The evidence bundle read back: the same hosts, sections and HTTP answers that were written, every file checked
against the manifest (a changed or missing file is refused), each host with its own part of the manifest."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.audit_samples import sample_items
from vllm_fleet.audit.evidence import MANIFEST, BundleError, read_bundle, write_bundle


def _items(n: int) -> list[tuple[object, object]]:
    samples = sample_items()
    out = []
    for i in range(n):
        desired, ev = samples[i % len(samples)]
        name = f"gpu-{i:02d}"
        out.append((replace(desired, host=name), replace(ev, host=name, remote=dict(ev.remote))))
    return out


def test_a_bundle_reads_back_as_written(tmp_path: Path) -> None:
    items = _items(5)
    manifest = write_bundle(tmp_path, items, extra={"waivers.yaml": "waivers: []\n"})  # type: ignore[arg-type]
    read = read_bundle(tmp_path)
    assert [d for d, _, _ in read] == [d for d, _ in items]
    assert [e for _, e, _ in read] == [e for _, e in items]
    for desired, _, own in read:
        assert own and all(rel.startswith(f"{desired.host}/") for rel in own)
        assert own == {rel: d for rel, d in manifest.items() if rel.startswith(f"{desired.host}/")}
    assert any(e.remote for _, e, _ in read) and any(e.http for _, e, _ in read)  # the samples have both


def test_a_changed_or_missing_file_is_refused(tmp_path: Path) -> None:
    write_bundle(tmp_path, _items(3))  # type: ignore[arg-type]
    section = next((tmp_path / "gpu-01" / "remote").iterdir())
    section.write_text(section.read_text() + "tampered\n")
    with pytest.raises(BundleError, match=r"gpu-01/remote/.*changed since the audit"):
        read_bundle(tmp_path)
    write_bundle(tmp_path, _items(3))  # type: ignore[arg-type]
    (tmp_path / "gpu-02" / "meta.json").unlink()
    with pytest.raises(BundleError, match=r"gpu-02/meta.json: missing"):
        read_bundle(tmp_path)
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(BundleError, match=r"manifest\.json: not JSON"):
        read_bundle(tmp_path)
