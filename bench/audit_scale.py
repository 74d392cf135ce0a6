#!/usr/bin/env python3
"""Audit wall time of 1 host against N hosts in one run, on the main job's lab (`./scripts/up` first).

    sudo .venv/bin/python bench/audit_scale.py [--hosts 4] [--repeat 5]

N audit targets cycle over the lab's serving hosts (with 2 lab hosts and N=4, each host is audited twice in
the same run: what is measured is that collection runs in parallel, a host's audit being a few reads). Prints the
median seconds of each and the ratio N-hosts / 1-host (goal <= 1.5).

It also prints the machine's busy CPU time during each run (/proc/stat: the controller and the lab hosts share
this machine's cores): an SSH login alone costs ~0.17 s of CPU (client + sshd + PAM session), so on a 2-core
machine N audits have a floor of N x (one audit's CPU) / cores however parallel the collection is; "wall /
floor" says how close the N-host run comes to it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from vllm_fleet.audit import audit
from vllm_fleet.audit.desired import targets
from vllm_fleet.cli.commands import _lab_audit_source
from vllm_fleet.fleet.spec import plan_fleet


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    fleet, key, api_key = _lab_audit_source()
    lab = targets(plan_fleet(fleet))
    many = [
        replace(t, desired=replace(t.desired, host=f"{t.desired.host}-{i}"))
        for i, t in enumerate(lab[i % len(lab)] for i in range(args.hosts))
    ]

    def timed(todo: list) -> tuple[float, float]:  # type: ignore[type-arg]
        runs, busy = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                cpu0, start = busy_cpu_s(), time.monotonic()
                result = audit(todo, Path(tmp), private_key=key, api_key=api_key)
                runs.append(time.monotonic() - start)
                busy.append(busy_cpu_s() - cpu0)
                if result.exit_code != 0:
                    bad = [f.id for f in result.findings if f.status in ("failed", "error")]
                    raise SystemExit(f"the lab does not audit clean: {bad}")
        return statistics.median(runs), statistics.median(busy)

    (one, one_cpu), (n, n_cpu) = timed(lab[:1]), timed(many)
    cores = os.cpu_count() or 1
    floor = n_cpu / cores
    print(f"audit, 1 host: {one:.2f} s (median of {args.repeat}), busy CPU {one_cpu:.2f} s")
    print(f"audit, {args.hosts} hosts in one run: {n:.2f} s, busy CPU {n_cpu:.2f} s")
    print(f"ratio {args.hosts} hosts / 1 host: {n / one:.2f} (goal <= 1.5)")
    print(f"the {args.hosts}-host run's CPU floor on {cores} cores: {floor:.2f} s; wall / floor: {n / floor:.2f}")
    return 0


def busy_cpu_s() -> float:
    """Seconds of CPU the whole machine spent busy (not idle, not iowait) since boot."""
    with Path("/proc/stat").open(encoding="ascii") as fh:
        ticks = [int(v) for v in fh.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    raise SystemExit(main())
