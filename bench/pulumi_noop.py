#!/usr/bin/env python3
"""No-op `pulumi up` on the converged lab stack vs an empty program's `pulumi up` on the same engine.

    sudo .venv/bin/python bench/pulumi_noop.py [--rounds 3]     (after ./scripts/up: the `lab` stack exists)

Prints the median seconds of each and the ratio (goal: ≤ 1.3×).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from pulumi import automation as auto

from vllm_fleet.deploy import ensure_engine, stack


def timed_up(st: Any) -> float:
    start = time.monotonic()
    result = st.up(color="never")
    elapsed = time.monotonic() - start
    changes = dict(result.summary.resource_changes or {})
    if set(changes) - {"same"}:
        raise SystemExit(f"not a no-op: {changes}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stack", default="lab")
    args = ap.parse_args()
    engine = ensure_engine(lambda _m: None)
    lab = stack(engine, args.stack)
    empty = auto.create_or_select_stack(
        stack_name="bench-empty",
        project_name="vllm-fleet-bench-empty",
        program=lambda: None,
        opts=auto.LocalWorkspaceOptions(
            pulumi_home=str(engine.home),
            env_vars=engine.env(),
            secrets_provider="passphrase",
            pulumi_command=auto.PulumiCommand(root=str(engine.bin_dir.parent), skip_version_check=True),
        ),
    )
    empty.up(color="never")  # first run creates the stack resource
    lab_times = [timed_up(lab) for _ in range(args.rounds)]
    empty_times = [timed_up(empty) for _ in range(args.rounds)]
    lab_s, empty_s = statistics.median(lab_times), statistics.median(empty_times)
    resources = len(lab.export_stack().deployment.get("resources", []))
    print(f"no-op `pulumi up`, lab stack ({resources} resources): {lab_s:6.2f} s  (median of {args.rounds})")
    print(f"`pulumi up`, empty program:                  {empty_s:6.2f} s  (median of {args.rounds})")
    print(f"ratio: {lab_s / empty_s:.2f}×  (goal ≤ 1.3×)")
    empty.workspace.remove_stack("bench-empty", force=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
