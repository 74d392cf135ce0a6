"""vllm_service's own modules (roles/vllm_service/library), run by a real Ansible on this machine: the rollout
journal one task per phase, and the one-task read of what the restart decision compares."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.roles.conftest import ROOT, Run

LIBRARY = ROOT / "roles/vllm_service/library"


def module(run: Run, tool: Callable[[str], str], name: str, args: dict[str, Any], *, check: bool = False) -> Any:
    """``ansible localhost -m NAME``: the module's JSON result."""
    argv = [tool("ansible"), "localhost", "-c", "local", "-m", name, "-a", json.dumps(args), "-o"]
    proc = run([*argv, *(["--check"] if check else [])], ANSIBLE_LIBRARY=str(LIBRARY))
    assert " | " in proc.stdout, proc.stdout + proc.stderr
    return proc, json.loads(proc.stdout.split(" => ", 1)[1])


def test_the_journal_records_each_phase_and_this_runs_timeline(
    run: Run, tool: Callable[[str], str], tmp_path: Path
) -> None:
    path = tmp_path / "main.rollout.json"
    args = {"path": str(path), "target": "stamp-1", "profile": "cpu-lab", "vllm_version": "0.32.0"}
    proc, drained = module(run, tool, "vllm_service_journal", {**args, "phase": "drained"})
    assert proc.returncode == 0 and drained["changed"] is True
    proc, restarting = module(
        run, tool, "vllm_service_journal", {**args, "phase": "restarting", "times": drained["times"]}
    )
    assert proc.returncode == 0
    record = json.loads(path.read_text())
    assert record["phase"] == "restarting" and record["target"] == "stamp-1" and record["profile"] == "cpu-lab"
    assert record["at"] == restarting["at"] == record["times"]["restarting"]
    assert list(record["times"]) == ["drained", "restarting"]
    assert record["times"]["drained"] <= record["times"]["restarting"]
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no scratch file left beside it


def test_a_phase_that_is_not_one_is_refused_and_check_mode_writes_nothing(
    run: Run, tool: Callable[[str], str], tmp_path: Path
) -> None:
    path = tmp_path / "j.json"
    proc, out = module(run, tool, "vllm_service_journal", {"path": str(path), "target": "t", "phase": "$(reboot)"})
    assert proc.returncode != 0 and "value of phase must be one of" in out["msg"]
    proc, out = module(
        run, tool, "vllm_service_journal", {"path": str(path), "target": "t", "phase": "done"}, check=True
    )
    assert proc.returncode == 0 and out["changed"] is False and not path.exists()


def test_the_state_read_gives_stamp_journal_and_no_process(
    run: Run, tool: Callable[[str], str], tmp_path: Path
) -> None:
    stamp, journal = tmp_path / "main.deployed", tmp_path / "main.rollout.json"
    args = {"stamp_path": str(stamp), "journal_path": str(journal), "unit": "vllm-fleet-test-absent.service"}
    proc, none = module(run, tool, "vllm_service_state", args)
    assert proc.returncode == 0, proc.stdout
    assert (none["deployed"], none["journal"], none["process_started"], none["changed"]) == ("", {}, 0.0, False)
    stamp.write_text("abc123\n")
    journal.write_text(json.dumps({"phase": "restarting", "target": "abc123", "at": 5.0}))
    proc, found = module(run, tool, "vllm_service_state", args)
    assert found["deployed"] == "abc123" and found["journal"] == {"phase": "restarting", "target": "abc123", "at": 5.0}


def test_a_journal_that_is_not_ours_reads_as_none(run: Run, tool: Callable[[str], str], tmp_path: Path) -> None:
    journal = tmp_path / "j.json"
    args = {"stamp_path": str(tmp_path / "s"), "journal_path": str(journal), "unit": "x.service"}
    for text in ("{not json", '["a list"]', "\x1b]0;owned\x07" + "x" * 200_000):
        journal.write_text(text)
        proc, out = module(run, tool, "vllm_service_state", args)
        assert proc.returncode == 0 and out["journal"] == {}, (text[:20], out)
