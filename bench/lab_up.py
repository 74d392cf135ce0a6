#!/usr/bin/env python3
"""How long the nspawn lab takes: ``lab up`` for N hosts (until every sshd answers), a no-op
``up``, and ``lab down``. Needs root. Uses a throw-away state dir and inventory.

    sudo python3 bench/lab_up.py --hosts 2 [--rounds 3] [--cold-rootfs]

``--cold-rootfs`` rebuilds the cached Debian rootfs first and reports that time too.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vllm_fleet.lab import rootfs
from vllm_fleet.lab.hosts import lab_down, lab_up, leftovers, memory_kib


def quiet(_msg: str) -> None:
    pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", "-n", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold-rootfs", action="store_true", help="rebuild the cached rootfs and time it")
    args = ap.parse_args()

    if args.cold_rootfs:
        t = time.monotonic()
        rootfs.build_rootfs(force=True)
        print(f"rootfs cold build: {time.monotonic() - t:.1f}s")
    else:
        info = rootfs.build_rootfs()
        if info.built:
            print(f"rootfs cold build: {info.seconds:.1f}s (it was missing)")

    work = Path(tempfile.mkdtemp(prefix="vfleet-bench-"))
    ups, noops, downs = [], [], []
    try:
        for r in range(1, args.rounds + 1):
            t = time.monotonic()
            state = lab_up(args.hosts, work / "lab", inventory_dir=work / "inventory", log=quiet)
            ups.append(time.monotonic() - t)
            if r == 1:
                time.sleep(2)  # let boot-time services settle before measuring memory
                mem = [memory_kib(state, h) / 1024 for h in state.hosts]
                print(f"memory per host (PSS of its cgroup): {', '.join(f'{m:.0f} MiB' for m in mem)}")
            t = time.monotonic()
            lab_up(args.hosts, work / "lab", inventory_dir=work / "inventory", log=quiet)
            noops.append(time.monotonic() - t)
            t = time.monotonic()
            lab_down(work / "lab", log=quiet)
            downs.append(time.monotonic() - t)
            print(
                f"round {r}: up {args.hosts} hosts {ups[-1]:.2f}s, "
                f"up again (no-op) {noops[-1]:.2f}s, down {downs[-1]:.2f}s"
            )
    finally:
        lab_down(work / "lab", log=quiet)
        left = leftovers(work / "lab")
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"median over {args.rounds}: up {statistics.median(ups):.2f}s for {args.hosts} hosts "
        f"(sshd answering), no-op up {statistics.median(noops):.2f}s, down {statistics.median(downs):.2f}s"
    )
    if any(left.values()):
        print(f"LEFT BEHIND: {left}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
