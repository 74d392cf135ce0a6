#!/usr/bin/env python3
"""Audit wall time of 1 host against N hosts in one run, on the main job's lab (`./scripts/up` first).

    sudo .venv/bin/python bench/audit_scale.py [--hosts 4] [--repeat 5]

N audit targets cycle over the lab's serving hosts (with 2 lab hosts and N=4, each host is audited twice in
the same run: what is measured is that collection runs in parallel, a host's audit being a few reads). Prints the
median seconds of each and the ratio N-hosts / 1-host (goal <= 1.5).

It then measures what the model check (VF-MODEL-FILES: every file of the served model re-hashed on the node)
adds: the 1-host audit without it (the same target, no model named) against with it; and the hash rate of the
role's own model-files.sh on this machine over a generated 4-shard model (``--hash-mib`` MiB in all), from which
it states, by arithmetic, what the check adds for a 15 GB model. ``--hash-only`` measures the rate without a lab.

It also prints the machine's busy CPU time during each run (/proc/stat: the controller and the lab hosts share
this machine's cores): an SSH login alone costs ~0.17 s of CPU (client + sshd + PAM session), so on a 2-core
machine N audits have a floor of N x (one audit's CPU) / cores however parallel the collection is; "wall /
floor" says how close the N-host run comes to it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
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
    ap.add_argument(
        "--hash-mib", type=int, default=1024, help="size of the generated model the hash rate is measured on"
    )
    ap.add_argument("--hash-only", action="store_true", help="only the hash rate (no lab needed)")
    args = ap.parse_args()
    if args.hash_only:
        hash_rate(args.hash_mib, args.repeat)
        return 0
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
    if lab[0].desired.model_dir is not None:
        (bare, _) = timed([replace(lab[0], desired=replace(lab[0].desired, model_dir=None))])
        print(f"audit, 1 host without the model check: {bare:.2f} s; with it: {one:.2f} s (ratio {one / bare:.2f})")
    hash_rate(args.hash_mib, args.repeat)
    return 0


def hash_rate(mib: int, repeat: int) -> None:
    """model-files.sh (the role's and the audit's listing) over a generated 4-shard model: its MB/s on this machine,
    and what that makes for a 15 GB model (one sha256sum over every file; the page cache is warm, so this is the
    hashing, not the disk: a cold read is bounded by the disk's own rate)."""
    script = Path(__file__).resolve().parents[1] / "roles" / "vllm" / "files" / "model-files.sh"
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        shard = mib // 4 * 1024 * 1024
        for i in range(4):
            with (model / f"model-{i:05d}-of-00004.safetensors").open("wb") as fh:
                for _ in range(shard // (1 << 20)):
                    fh.write(os.urandom(1 << 20))
        runs = []
        for _ in range(repeat):
            start = time.monotonic()
            subprocess.run(["sh", str(script), str(model)], check=True, capture_output=True)
            runs.append(time.monotonic() - start)
    wall = statistics.median(runs)
    rate = 4 * shard / wall / 1e6
    print(f"model-files.sh over {4 * shard // (1 << 20)} MiB in 4 shards: {wall:.2f} s, {rate:.0f} MB/s")
    print(f"a 15 GB model at that rate: {15e9 / rate / 1e6:.1f} s added to each audit of a node serving it")


def busy_cpu_s() -> float:
    """Seconds of CPU the whole machine spent busy (not idle, not iowait) since boot."""
    with Path("/proc/stat").open(encoding="ascii") as fh:
        ticks = [int(v) for v in fh.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    raise SystemExit(main())
