"""`vllm-fleet tune` end to end on the tests' lab: the real command, the real router, rollout.yml, the lab's vLLM and
the streamed-completion client. A small search (two levers, two values each, at most two candidates started) on
the last lab host: out of the router while it runs, a candidate the planner rejects never started, the host back
on its config and in the router at the end, the other hosts untouched, the evidence written."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.converge.rollout_helpers import _ssh, all_serving, config_of, journal, router, snapshot
from vllm_fleet.deploy.ansible import PlaybookResult
from vllm_fleet.lab.stack import lab_fleet
from vllm_fleet.profiles.loader import load_profile
from vllm_fleet.profiles.validate import check_file

pytestmark = pytest.mark.lab


def test_tune_searches_a_drained_host_and_puts_it_back(
    first_converge: PlaybookResult, site: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert first_converge.ok
    all_serving(site)
    *others, target = site.state.hosts
    before = snapshot(site)
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps(lab_fleet(site.state, site.model_dir)))
    out = tmp_path / "tune"
    argv = [
        sys.executable, "-m", "vllm_fleet.cli", "tune", target.name,
        "--fleet", str(fleet_file), "--ssh-key-file", str(site.state.ssh_key),
        "--slo", "ttft_p95=30,itl_p95=10", "--workload", "input=64,output=16", "--concurrency", "2",
        "--repeats", "2", "--lever", "max_num_batched_tokens=4,2048", "--lever", "max_num_seqs=1,8",
        "--max-trials", "2", "--out", str(out),
    ]  # fmt: skip
    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:  # the host's state in the real HAProxy while the run goes on
        while not done.wait(0.5):
            try:
                seen.add(router(site).state(target.name).admin)
            except (OSError, ValueError, KeyError):
                continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    finally:
        done.set()
        watcher.join(5)
    with capsys.disabled():
        print(f"\nvllm-fleet tune:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "drain" in seen, seen  # out of the router while it was tuned

    trials = {t["key"]: t for t in json.loads((out / "journal.json").read_text())["trials"]}
    start = trials["max_num_batched_tokens=2048,max_num_seqs=8"]
    assert start["status"] == "measured" and start["number"] == 1 and start["repeats"] == 2
    pruned = trials["max_num_batched_tokens=4,max_num_seqs=8"]
    assert pruned["status"] == "pruned" and pruned["number"] == 0 and pruned["reason"].startswith("planner: ")
    assert "max_num_seqs" in pruned["reason"]
    one = trials["max_num_batched_tokens=2048,max_num_seqs=1"]
    assert one["status"] in ("measured", "stopped") and one["number"] == 2
    for t in (start, one):
        assert t["levels"][0]["requests"] >= 8 and t["levels"][0]["errors"] == 0, t["levels"][0]
        assert t["planner"]["kv_capacity_tokens"] > 0
    assert sorted(p.name for p in (out / "candidates").glob("trial-*.yaml")) == ["trial-1.yaml", "trial-2.yaml"]

    winner = out / "winner.yaml"
    assert check_file(winner)[0] == []
    assert load_profile(str(winner)).name == "cpu-lab-tuned"
    assert (out / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    assert "pruned" in (out / "trials.md").read_text()

    # Back on its config and in the router; the others untouched.
    h = _ssh(site, target)
    assert config_of(h) == before[target.name]["config"]
    assert journal(h)["phase"] == "done"
    router(site).wait_serving(target.name, 60)
    assert snapshot(site, others) == {o.name: before[o.name] for o in others}
