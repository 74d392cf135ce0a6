"""The canary analysis's false-rollback rate: windows in which every host runs the same config, judged as a rollout
would judge its canary, through the main job's lab router (`./scripts/up` first; root).

    sudo .venv/bin/python bench/canary_noise.py [--windows 12] [--window 30] [--workers 4] [--restart]

A load client sends completions through the lab's HAProxy; for each window, `vllm_fleet.rollout.canary.analyse`
compares the first lab host (the "canary") with the others (the "baseline") under the default thresholds of the
stack's `rollout.analysis` (only the window is changed). Every host runs the same config, so every rollback is a
false one. With `--restart` the canary's vLLM is restarted before each window (what a canary has just done: cold
caches, an empty prefix cache), waiting until the router has it back. Prints the decisions, the false-rollback rate
against the goal (at most 1 in 20 windows: ratio), and each window's figures.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import time

from vllm_fleet.deploy.ansible import ssh_args
from vllm_fleet.fleet.spec import AnalysisSpec
from vllm_fleet.lab import config
from vllm_fleet.lab.fleet import lab_api_key
from vllm_fleet.lab.state import load_state
from vllm_fleet.rollout.canary import Thresholds, analyse
from vllm_fleet.rollout.load import LoadClient
from vllm_fleet.rollout.router import HAProxyRouter

GOAL_RATE = 1 / 20
PROMPT = " Summarise the history of the printing press in three sentences, then list five inventions it enabled."


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=12)
    ap.add_argument("--window", type=float, default=30.0, help="seconds per window")
    ap.add_argument("--workers", type=int, default=4, help="concurrent client streams through the router")
    ap.add_argument("--restart", action="store_true", help="restart the canary's vLLM before each window")
    args = ap.parse_args()
    state = load_state(config.state_dir())
    if state is None or len(state.hosts) < 2:
        raise SystemExit("no lab of two hosts or more: run ./scripts/up first")
    canary, *baseline = state.hosts
    router = HAProxyRouter(config.router_dir(state.state_dir) / "haproxy.sock")
    url = {h.name: f"http://{h.ip}:{config.VLLM_PORT}" for h in state.hosts}
    spec = AnalysisSpec()
    t = Thresholds(window_s=args.window)

    def restart_canary() -> None:
        argv = ["ssh", "-i", str(state.ssh_key), *shlex.split(ssh_args(state.known_hosts)), f"root@{canary.ip}"]
        subprocess.run([*argv, "systemctl restart vllm-main"], check=True, timeout=120, capture_output=True)
        router.wait_serving(canary.name, 600)

    decisions: list[str] = []
    rows = []
    with LoadClient(
        config.lab_net().router_url,
        "tiny-llama-lab",
        api_key=lab_api_key(),
        workers=args.workers,
        max_tokens=24,
        pause=0.2,
        prompt=PROMPT,
    ) as load:
        time.sleep(10)  # every host warm and in rotation before the first window
        for k in range(args.windows):
            if args.restart:
                restart_canary()
            v = analyse(url[canary.name], [url[h.name] for h in baseline], "0.32.0", t)
            decisions.append(v.decision)
            rows.append({"window": k + 1, "decision": v.decision, "reasons": v.reasons, "figures": v.figures})
            print(f"window {k + 1}/{args.windows}: {v.decision}", flush=True)
    false = decisions.count("rollback")
    judged = false + decisions.count("promote")
    rate = false / judged if judged else float("nan")
    print(json.dumps(rows, indent=1))
    print(
        f"thresholds: window {args.window:g} s, TTFT p95 +{spec.max_ttft_increase:.0%}, ITL mean "
        f"+{spec.max_itl_increase:.0%}, errors +{spec.max_error_rate_increase:.0%}, min {spec.min_requests} "
        f"requests, alpha {spec.alpha:g}; canary restarted before each window: {args.restart}"
    )
    print(f"load: {load.report.ok} ok, {len(load.report.failed)} failed over {load.report.wall_s:.0f} s")
    print(
        f"same config on every host: {false} rollback(s), {decisions.count('promote')} promote, "
        f"{decisions.count('inconclusive')} inconclusive of {len(decisions)} windows; false-rollback rate "
        f"{rate:.3f} (goal <= {GOAL_RATE:.2f}: ratio {rate / GOAL_RATE:.2f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
