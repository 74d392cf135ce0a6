#!/usr/bin/env python3
"""The rest of the pipeline at fleet scale, host-free: validation, the rollout plan, the audit's reconcile.

    .venv/bin/python bench/pipeline_scale.py [--hosts 1000]

- validation: `vllm-fleet validate Pulumi.<stack>.yaml` of a generated N-host stack (bench/fleet_scale.py's
  fleets: 4 profiles, overrides, role_vars), in a fresh process as a user runs it; then `plan_fleet` in-process,
  and the plan cache's hit (what `pulumi preview`/`up` pay on an unchanged fleet);
- rollout plan: the canary, batches and provision waves of the N nodes;
- audit: N recorded evidence bundles (tests/audit_samples.py's clean, drifted and unreachable hosts, in turn)
  written, read back against their manifest, and reconciled with the renderer's desired state.
Prints seconds for each (goal: each in seconds).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet_scale import fleet

from vllm_fleet.audit.evidence import read_bundle, write_bundle
from vllm_fleet.audit.reconcile import judge
from vllm_fleet.fleet.spec import plan_fleet
from vllm_fleet.pulumi.plan_cache import cached_plan


def timed(what: str, fn: object, *args: object) -> object:
    start = time.perf_counter()
    result = fn(*args)  # type: ignore[operator]
    print(f"{what:<58} {time.perf_counter() - start:7.2f} s", flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=1000)
    n = ap.parse_args().hosts
    spec = fleet(n)
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-pipeline-") as tmp:
        stack = Path(tmp) / "Pulumi.scale.yaml"
        stack.write_text(yaml.safe_dump({"config": {"vllm-fleet:fleet": spec}}, sort_keys=False))
        validate = [sys.executable, "-m", "vllm_fleet.cli", "validate", str(stack)]
        done = timed(f"`vllm-fleet validate` of a {n}-host stack (new process)", subprocess.run, validate)
        assert getattr(done, "returncode", 1) == 0, "the generated fleet must be valid"
        plan = timed(f"plan_fleet of {n} hosts (in-process)", plan_fleet, spec)
        cache = Path(tmp) / "plans"
        timed("plan cache: miss (computes and stores)", cached_plan, spec, cache)
        timed("plan cache: hit (an unchanged fleet)", cached_plan, spec, cache)

        def rollout() -> int:
            batches = plan.batches()  # type: ignore[attr-defined]
            waves = plan.provision_waves(plan.nodes)  # type: ignore[attr-defined]
            return len(batches) + len(waves)

        timed(f"rollout plan: canary, batches, provision waves of {n}", rollout)

        from tests.audit_samples import sample_items

        samples = sample_items()
        items = []
        for i in range(n):
            desired, ev = samples[i % len(samples)]
            name = f"gpu-{i:04d}"
            items.append((replace(desired, host=name), replace(ev, host=name, remote=dict(ev.remote))))
        bundle = Path(tmp) / "evidence"
        timed(f"audit: write {n} evidence bundles", write_bundle, bundle, items)
        read = timed(f"audit: read {n} bundles back (manifest checked)", read_bundle, bundle)

        def reconcile() -> int:
            return sum(len(judge(d, e, m)) for d, e, m in read)  # type: ignore[attr-defined]

        findings = timed(f"audit: reconcile {n} hosts (judge)", reconcile)
        print(f"({findings} findings over {n} hosts)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
