"""A profile rollout across the main job's lab fleet, behind its router, under a bounded load (`./scripts/up`
first; root).

    sudo .venv/bin/python bench/rollout.py [--profile examples/cpu-lab-rollout.yaml] [--no-load]

Rolls the profile out with `pulumi up` (the lab stack, batch size 1) while a load client sends requests through
the lab's HAProxy (`--no-load`: without it, the rollout's own cost apart from the CPUs the load takes), then reads
each host's rollout journal. Prints the requests that failed (goal: none), the rollout's wall time (`pulumi up`),
the sum over hosts of each one's drain + restart + health + smoke (the journal's drained → done), and their ratio
(goal <= 1.2). Run it again with `--profile cpu-lab` to go back.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import subprocess
from pathlib import Path

from vllm_fleet.deploy.ansible import ssh_args
from vllm_fleet.lab import config
from vllm_fleet.lab.fleet import lab_api_key, lab_fleet_up
from vllm_fleet.lab.state import load_state
from vllm_fleet.rollout.load import LoadClient


def journal(ip: str, key: Path, known_hosts: Path) -> dict:  # type: ignore[type-arg]
    argv = [
        "ssh",
        "-i",
        str(key),
        *shlex.split(ssh_args(known_hosts)),
        f"root@{ip}",
        "cat /var/lib/vllm-fleet/main.rollout.json",
    ]
    found: dict = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout or "{}")  # type: ignore[type-arg]
    return found


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="examples/cpu-lab-rollout.yaml")
    ap.add_argument(
        "--no-load", action="store_true", help="no load client: what the rollout costs when the CPUs are its own"
    )
    args = ap.parse_args()
    router = config.lab_net().router_url
    client = None if args.no_load else LoadClient(router, "tiny-llama-lab", api_key=lab_api_key())
    with client or contextlib.nullcontext():
        run = lab_fleet_up(None, profile=args.profile, log=lambda _line: None)
    if run.error:
        raise SystemExit(f"the rollout failed:\n{run.error}")
    state = load_state(config.state_dir())
    assert state is not None
    spans = {}
    for h in state.hosts:
        times = journal(h.ip, state.ssh_key, state.known_hosts).get("times") or {}
        if "done" in times and times["done"] >= run.started_at:
            spans[h.name] = times["done"] - times.get("drained", times.get("restarting", times["done"]))
    failed = []
    if client is not None:
        report = client.report
        failed = report.failed
        print(f"requests through the router: {report.sent} sent, {len(failed)} failed (goal: 0) {failed[:3]}")
    if not spans:
        print("no host restarted: the fleet already had this profile (try --profile cpu-lab)")
        return 0
    total = sum(spans.values())
    print("per host drain + restart + health + smoke: " + ", ".join(f"{k} {v:.1f} s" for k, v in spans.items()))
    print(f"rollout wall (pulumi up): {run.up_wall_s:.1f} s; sum over hosts: {total:.1f} s")
    print(f"ratio rollout wall / sum: {run.up_wall_s / total:.2f} (goal <= 1.2)")
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
