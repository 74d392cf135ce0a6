#!/usr/bin/env python3
"""Planner vs real GPUs: each public vLLM start-up report of tests/data/kv_reports/, planned with its settings.

Prints, per report, vLLM's figures beside the planner's (weights, activation peak, KV budget, KV tokens) and the
error of the KV budget; then the distribution (median, 90th percentile, worst) and what is not covered and why.

    .venv/bin/python bench/kv_real.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from vllm_fleet.profiles.planner import GIB
from vllm_fleet.profiles.planner_reports import MEDIAN_TOLERANCE, compare, load_reports, not_covered
from vllm_fleet.vllm import memory_model

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "kv_reports"


def main() -> int:
    reports, models = load_reports(CORPUS)
    rows, skipped = [], []
    for report in reports:
        why = not_covered(report, models)
        if why:
            skipped.append((report.id, why))
            continue
        rows.append(compare(report, models))
    print(
        f"{'report':<44} {'vLLM':>7} {'gpu':<9} tp {'W vLLM/plan':>13} {'KV vLLM/plan GiB':>17} {'error':>7} "
        f"{'tokens vLLM/plan':>19}"
    )
    for c in rows:
        r, p = c.report, c.plan
        print(
            f"{r.id[:44]:<44} {r.vllm_version or '?':>7} {r.gpu:<9} {r.tensor_parallel_size:>2} "
            f"{r.reported.model_loading_gib or 0:6.2f}/{p.weights_bytes / GIB:6.2f} "
            f"{c.reported_kv_bytes / GIB:8.2f}/{p.kv_budget_bytes / GIB:8.2f} {c.error:+7.2%} "
            f"{r.reported.kv_cache_tokens or 0:>9}/{p.kv_capacity_tokens:<9}"
        )
    errors = sorted(abs(c.error) for c in rows)
    if not errors:
        print("no report covered")
        return 1
    p90 = errors[min(len(errors) - 1, int(0.9 * len(errors)))]
    median = statistics.median(errors)
    outside = [c.report.id for c in rows if not c.within]
    print(
        f"\n{len(rows)} covered of {len(reports)}: |error| median {median:.2%} (goal ≤ {MEDIAN_TOLERANCE:.0%}), "
        f"p90 {p90:.2%}, worst {errors[-1]:.2%}; outside the stated uncertainty "
        f"({memory_model.UNCERTAINTY:.0%} or {memory_model.UNCERTAINTY_BYTES / GIB:.2f} GiB): {len(outside)}"
    )
    for rid, why in skipped:
        print(f"not covered: {rid}: {why}")
    return 0 if median <= MEDIAN_TOLERANCE and not outside else 1


if __name__ == "__main__":
    sys.exit(main())
