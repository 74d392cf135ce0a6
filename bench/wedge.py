"""A wedged engine under vLLM's own `vllm bench serve` load, through the main job's lab router (`./scripts/up`
first; root).

    sudo .venv/bin/python bench/wedge.py [--host 2] [--prompts 900] [--concurrency 4]

While `vllm bench serve` sends its prompts through the lab's HAProxy, the EngineCore of one node is stopped with
SIGSTOP (vLLM's /health stays 200): the node's sentinel answers /ready 503 and HAProxy takes it out; after 20 s
SIGCONT brings it back. Then it is stopped again and held: the sentinel's watchdog (the lab's
vllm_service_watchdog_sec) kills vLLM, systemd restarts it, the node comes back into rotation by itself. Prints the
time to leave rotation against the 15 s goal (ratio), the time back after SIGCONT, the watchdog's time and the
time until the node serves again, and the requests `vllm bench serve` lost against those in flight on the node
when the watchdog killed it (goal: no more).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from vllm_fleet.deploy.ansible import ssh_args
from vllm_fleet.lab import config
from vllm_fleet.lab.fleet import lab_api_key
from vllm_fleet.lab.local_vllm import tiny_model_dir
from vllm_fleet.lab.state import load_state
from vllm_fleet.rollout.router import HAProxyRouter
from vllm_fleet.vllm.bench_serve import ServeBench, vllm_bench_serve
from vllm_fleet.vllm.check import find_vllm_python

GOAL_LEAVE_S = 15.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", type=int, default=2, help="which lab host (1-based) to wedge")
    ap.add_argument("--prompts", type=int, default=900)
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()
    state = load_state(config.state_dir())
    python = find_vllm_python()
    if state is None or python is None:
        raise SystemExit("no lab (./scripts/up) or no vLLM venv (tools/vllm_cpu_env.sh)")
    host = state.hosts[args.host - 1]
    router = HAProxyRouter(config.router_dir(state.state_dir) / "haproxy.sock")

    def ssh(command: str) -> str:
        argv = ["ssh", "-i", str(state.ssh_key), *shlex.split(ssh_args(state.known_hosts)), f"root@{host.ip}", command]
        return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout

    def wait(what: str, until: Any, timeout: float) -> float:
        start = time.monotonic()
        while not until():
            if time.monotonic() - start > timeout:
                raise SystemExit(f"{what}: not within {timeout:g} s")
            time.sleep(0.2)
        return time.monotonic() - start

    result: dict[str, ServeBench] = {}
    with tempfile.TemporaryDirectory() as work:
        bench = threading.Thread(
            target=lambda: result.setdefault(
                "bench",
                vllm_bench_serve(
                    python,
                    config.lab_net().router_url,
                    "tiny-llama-lab",
                    tiny_model_dir(),
                    concurrency=args.concurrency,
                    num_prompts=args.prompts,
                    max_tokens=32,
                    workdir=Path(work),
                    api_key=lab_api_key(),
                    timeout_s=1800,
                ),
            )
        )
        bench.start()
        time.sleep(10)
        engine = ssh("pgrep -u vllm -f EngineCore").split()[0]
        before = ssh("systemctl show -p MainPID --value vllm-main").strip()
        ssh(f"kill -STOP {engine}")
        left = wait("out of rotation", lambda: router.state(host.name).operational == "down", 60)
        time.sleep(20)
        ssh(f"kill -CONT {engine}")
        back = wait("back in rotation", lambda: router.state(host.name).operational == "up", 60)
        time.sleep(10)
        engine = ssh("pgrep -u vllm -f EngineCore").split()[0]
        ssh(f"kill -STOP {engine}")
        stopped = time.monotonic()
        wait(
            "the watchdog's record", lambda: ssh("cat /var/lib/vllm-sentinel/main/watchdog.jsonl || true").strip(), 600
        )
        watchdog = time.monotonic() - stopped
        record = json.loads(ssh("tail -n 1 /var/lib/vllm-sentinel/main/watchdog.jsonl"))
        wait("restarted", lambda: ssh("systemctl show -p MainPID --value vllm-main").strip() not in (before, "0"), 120)
        wait("serving again", lambda: router.state(host.name).operational == "up", 600)
        serving = time.monotonic() - stopped
        bench.join()
    done = result["bench"]
    failed = args.prompts - done.completed
    print(f"left rotation after SIGSTOP: {left:.1f} s (goal {GOAL_LEAVE_S:g} s: ratio {left / GOAL_LEAVE_S:.2f})")
    print(f"back in rotation after SIGCONT: {back:.1f} s")
    print(f"watchdog killed vLLM after {watchdog:.1f} s wedged; serving again after {serving:.1f} s")
    print(f"vllm bench serve: {done.completed}/{args.prompts} completed, {failed} failed; in flight on the node at "
          f"the kill: {record['in_flight']} (ratio {failed / max(1, record['in_flight']):.2f}, goal <= 1)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
