"""The canary analysis's false-rollback rate: windows in which every host runs the same config, judged as a rollout
would judge its canary, through the main job's lab router (`./scripts/up` first; root).

    sudo .venv/bin/python bench/canary_noise.py [--windows 12] [--window 30] [--workers 4] [--restart]
    sudo .venv/bin/python bench/canary_noise.py --rollouts 4 [--window 30] [--workers 4]

A load client sends completions through the lab's HAProxy (`--workers` streams, each pausing `--pause` s); for each
decision, `vllm_fleet.rollout.canary.analyse` compares the first lab host (the "canary") with the others (the
"baseline") under the default thresholds of the stack's `rollout.analysis` (only the window is changed; a rollback
needs the regression in `--confirm` windows in a row, the spec's `windows`). Every host runs the same config, so
every rollback is a false one. With `--restart` the canary's vLLM is restarted before each decision (what a canary
has just done: cold caches, an empty prefix cache), waiting until the router has it back, then the stack's warm-up.
Prints the decisions, the false-rollback rate against the goal (at most 1 in 20: ratio), and each one's figures.

With `--rollouts N` it rolls neutral profile changes instead, for real: `rollout.yml` with the canary analysis on
(`vllm_fleet_canary_command`, as a stack's `rollout.analysis` sets it), the lab profile's `max_num_seqs` 8 and 7 in
turn (the load's streams never reach 7), N times across the lab's hosts under the load. Each rollout drains the
canary, restarts it, smoke-tests it, puts it back for the window and compares it with the hosts still on the old
profile; a promoted canary lets the rollout go on to the others. Prints each rollout's decision and figures from the
canary's journal, and the share promoted (every one should be: the change is neutral). The lab is left on the lab
profile.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from vllm_fleet.audit.evidence import Desired
from vllm_fleet.deploy.ansible import InventoryHost, run_playbook
from vllm_fleet.fleet.spec import AnalysisSpec
from vllm_fleet.lab import config
from vllm_fleet.lab.fleet import lab_api_key
from vllm_fleet.lab.local_vllm import tiny_model_dir
from vllm_fleet.lab.ssh import ssh_run
from vllm_fleet.lab.stack import lab_role_vars
from vllm_fleet.lab.state import LabState, load_state
from vllm_fleet.profiles.loader import load_profile
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.render import render
from vllm_fleet.rollout.canary import Thresholds, analyse
from vllm_fleet.rollout.load import LoadClient
from vllm_fleet.rollout.router import HAProxyRouter

GOAL_RATE = 1 / 20
JOURNAL_PATH = str(Desired.__dataclass_fields__["journal_path"].default)  # the audit reads it there too
JOURNAL_MAX_BYTES = 1 << 20
PROMPT = " Summarise the history of the printing press in three sentences, then list five inventions it enabled."


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=12, help="decisions (each of up to --confirm windows)")
    ap.add_argument("--window", type=float, default=30.0, help="seconds per window")
    ap.add_argument("--workers", type=int, default=4, help="concurrent client streams through the router")
    ap.add_argument("--pause", type=float, default=0.2, help="each stream's pause between requests (s)")
    ap.add_argument("--confirm", type=int, default=AnalysisSpec().windows, help="windows a rollback needs in a row")
    ap.add_argument("--restart", action="store_true", help="restart the canary's vLLM before each window")
    ap.add_argument("--rollouts", type=int, default=0, help="roll N neutral profile changes instead (rollout.yml)")
    args = ap.parse_args()
    state = load_state(config.state_dir())
    if state is None or len(state.hosts) < 2:
        raise SystemExit("no lab of two hosts or more: run ./scripts/up first")
    if args.rollouts:
        return neutral_rollouts(state, args.rollouts, args.window, args.workers, args.pause)
    canary, *baseline = state.hosts
    router = HAProxyRouter(config.router_dir(state.state_dir) / "haproxy.sock")
    url = {h.name: f"http://{h.ip}:{config.VLLM_PORT}" for h in state.hosts}
    spec = AnalysisSpec()
    # A restarted canary gets the stack's warm-up, as a rollout gives it; one serving all along needs none.
    t = Thresholds(window_s=args.window, windows=args.confirm, warmup_s=spec.warmup_s if args.restart else 0)

    def restart_canary() -> None:
        # reset-failed: restarts a minute apart would otherwise meet the unit's start limit (its crash-loop guard).
        restart = "systemctl reset-failed vllm-main; systemctl restart vllm-main"
        done = ssh_run(canary.ip, Path(state.ssh_key), Path(state.known_hosts), restart, timeout=120)
        if done.returncode != 0:
            raise SystemExit(f"restarting {canary.name}'s vLLM failed: {done.stderr.strip()[:500]}")
        router.wait_serving(canary.name, 600)

    decisions: list[str] = []
    rows = []
    with LoadClient(
        config.lab_net().router_url,
        "tiny-llama-lab",
        api_key=lab_api_key(),
        workers=args.workers,
        max_tokens=24,
        pause=args.pause,
        prompt=PROMPT,
    ) as load:
        time.sleep(10)  # every host warm and in rotation before the first window
        for k in range(args.windows):
            if args.restart:
                restart_canary()
            v = analyse(url[canary.name], [url[h.name] for h in baseline], "0.32.0", t)
            decisions.append(v.decision)
            rows.append({"decision_number": k + 1, **v.as_dict()})
            print(f"decision {k + 1}/{args.windows}: {v.decision} ({len(v.earlier) + 1} window(s))", flush=True)
    false = decisions.count("rollback")
    judged = false + decisions.count("promote")
    rate = false / judged if judged else float("nan")
    print(json.dumps(rows, indent=1))
    print(
        f"thresholds: window {args.window:g} s, TTFT p95 +{spec.max_ttft_increase:.0%}, ITL mean "
        f"+{spec.max_itl_increase:.0%}, errors +{spec.max_error_rate_increase:.0%}, min {spec.min_requests} "
        f"requests, alpha {spec.alpha:g}, a rollback needs {args.confirm} window(s) in a row; load: {args.workers} "
        f"streams pausing {args.pause:g} s; canary restarted before each decision: {args.restart}"
    )
    print(f"load: {load.report.ok} ok, {len(load.report.failed)} failed over {load.report.wall_s:.0f} s")
    print(
        f"same config on every host: {false} rollback(s), {decisions.count('promote')} promote, "
        f"{decisions.count('inconclusive')} inconclusive of {len(decisions)} decisions; false-rollback rate "
        f"{rate:.3f} (goal <= {GOAL_RATE:.2f}: ratio {rate / GOAL_RATE:.2f})"
    )
    return 0


def neutral_rollouts(state: LabState, n: int, window_s: float, workers: int, pause: float) -> int:
    """``n`` real rollouts of a neutral profile change with the canary analysis on; the lab left on its profile."""
    lab = load_profile("cpu-lab")
    neutral = lab.model_copy(update={"scheduler": lab.scheduler.model_copy(update={"max_num_seqs": 7})})
    hosts = [InventoryHost(h.name, h.ip, host_key=h.host_key) for h in state.hosts]
    canary = state.hosts[0]
    vllm_fleet = str(Path(sys.executable).parent / "vllm-fleet")
    spec = AnalysisSpec()
    # The stack's defaults but the window: the warm-up and the windows a rollback needs as a stack gets them.
    command = [vllm_fleet, "canary", "--window", f"{window_s:g}"]

    def roll(profile: DecodeProfile, analysis: bool) -> tuple[bool, dict[str, Any]]:
        extravars = {
            **lab_role_vars(state, tiny_model_dir()),
            "vllm_fleet_profile": "cpu-lab",
            "vllm_config": render(profile).config,
            "vllm_fleet_profile_data": profile.model_dump(mode="json", exclude_none=True),
            **({"vllm_fleet_canary_command": command} if analysis else {}),
        }
        result = run_playbook(
            "rollout.yml", hosts, extravars, private_key=Path(state.ssh_key).read_text(), api_key=lab_api_key()
        )
        return result.ok, _journal(state, canary.ip).get("analysis") or {}

    rows, decisions = [], []
    with LoadClient(
        config.lab_net().router_url, "tiny-llama-lab", api_key=lab_api_key(), workers=workers, max_tokens=24,
        pause=pause, prompt=PROMPT,
    ) as load:  # fmt: skip
        roll(lab, analysis=False)  # every host on the lab profile first: each rollout below is a change
        for k in range(n):
            profile = neutral if k % 2 == 0 else lab
            ok, analysis = roll(profile, analysis=True)
            decision = str(analysis.get("decision", "none"))
            decisions.append(decision)
            rows.append({"rollout": k + 1, "max_num_seqs": profile.scheduler.max_num_seqs, "ok": ok, **analysis})
            print(
                f"rollout {k + 1}/{n} (max_num_seqs {profile.scheduler.max_num_seqs}): {decision}, ok={ok}", flush=True
            )
        if n % 2:  # the lab back on its profile (no analysis: nothing to judge)
            roll(lab, analysis=False)
    print(json.dumps(rows, indent=1))
    print(f"load: {load.report.ok} ok, {len(load.report.failed)} failed over {load.report.wall_s:.0f} s")
    promoted = decisions.count("promote")
    print(
        f"neutral profile changes: {promoted} promoted, {decisions.count('rollback')} rolled back, "
        f"{decisions.count('inconclusive')} inconclusive of {n} rollouts (warm-up {spec.warmup_s:g} s, window "
        f"{window_s:g} s, a rollback needs {spec.windows} in a row, TTFT p95 +{spec.max_ttft_increase:.0%}, ITL mean "
        f"+{spec.max_itl_increase:.0%}, alpha {spec.alpha:g}; {workers} streams pausing {pause:g} s); promoted share "
        f"{promoted / n:.2f} (goal 1.00: ratio {promoted / n:.2f})"
    )
    return 0


def _journal(state: LabState, ip: str) -> dict[str, Any]:
    """The canary's rollout journal (the audit's path for it), read bounded."""
    read = f"head -c {JOURNAL_MAX_BYTES} {shlex.quote(JOURNAL_PATH)}"
    out = ssh_run(ip, Path(state.ssh_key), Path(state.known_hosts), read, timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}


if __name__ == "__main__":
    raise SystemExit(main())
