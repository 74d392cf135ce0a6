#!/usr/bin/env python3
"""No-op `pulumi up` on the converged lab stack vs an empty program's `pulumi up` on the same engine.

    sudo .venv/bin/python bench/pulumi_noop.py [--rounds 5]     (after ./scripts/up: the `lab` stack exists)

The empty program is a Python project like ours (Pulumi.yaml, `__main__.py` that imports pulumi, the same
venv), run by the same CLI, language host and backend: the ratio is what our program and its resources add.
An inline (Automation API, in-process) empty program is printed too, for reference: it starts no Python.
Prints the median seconds of each and the ratio (goal: ≤ 1.3×).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from vllm_fleet.deploy.engine import ensure_engine, stack


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
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stack", default="lab")
    args = ap.parse_args()
    engine = ensure_engine(lambda _m: None)
    lab = stack(engine, args.stack)
    opts = auto.LocalWorkspaceOptions(
        pulumi_home=str(engine.home),
        env_vars=engine.env(),
        secrets_provider="passphrase",
        pulumi_command=auto.PulumiCommand(root=str(engine.bin_dir.parent), skip_version_check=True),
    )
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-bench-") as tmp:
        venv = Path(sys.executable).parent.parent
        (Path(tmp) / "Pulumi.yaml").write_text(
            "name: vllm-fleet-bench-empty\nruntime:\n  name: python\n"
            f"  options:\n    toolchain: pip\n    virtualenv: {venv}\n"
        )
        (Path(tmp) / "__main__.py").write_text("import pulumi  # noqa: F401\n")
        empty = auto.create_or_select_stack(stack_name="bench-empty", work_dir=tmp, opts=opts)
        inline = auto.create_or_select_stack(
            stack_name="bench-inline", project_name="vllm-fleet-bench-inline", program=lambda: None, opts=opts
        )
        for st in (empty, inline, lab):
            st.up(color="never")  # warm-up; also creates the empty stacks' Stack resource
        lab_times = [timed_up(lab) for _ in range(args.rounds)]
        empty_times = [timed_up(empty) for _ in range(args.rounds)]
        inline_times = [timed_up(inline) for _ in range(args.rounds)]
        empty.workspace.remove_stack("bench-empty", force=True)
        inline.workspace.remove_stack("bench-inline", force=True)
    lab_s, empty_s = statistics.median(lab_times), statistics.median(empty_times)
    inline_s = statistics.median(inline_times)
    resources = len(lab.export_stack().deployment.get("resources", []))
    n = args.rounds
    print(f"no-op `pulumi up`, lab stack ({resources} resources): {lab_s:6.2f} s  (median of {n})")
    print(f"`pulumi up`, empty Python program:           {empty_s:6.2f} s  (median of {n})")
    print(f"`pulumi up`, empty inline program:           {inline_s:6.2f} s  (median of {n}; no Python started)")
    print(f"ratio: {lab_s / empty_s:.2f}×  (goal ≤ 1.3×); vs inline: {lab_s / inline_s:.2f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
