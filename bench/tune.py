"""The tuner against the exhaustive grid, on the main job's lab (`./scripts/up` first; root):

    sudo .venv/bin/python bench/tune.py [--host vfleet-node2] [--lever max_num_seqs=1,2,4,8 ...] [--live]

1. The grid: every point of the space (the `--lever`s; default max_num_seqs 1,2,4,8 × max_num_batched_tokens
   32,128,2048 × chunked prefill on/off, from cpu-lab) applied to the host and measured, as `vllm-fleet tune
   --search grid` does (out/bench-tune/grid/: its journal, table and plot).
2. The tuner (coordinate descent with the noise rule) replayed on the grid's measurements: each point it asks for is
   the grid's trial of that point, so both searches judge the same figures and the count is the trials it would
   have started. With `--live` it also runs for real on the host (out/bench-tune/descent/), with its own
   measurements.

Prints both winners, the tuner's throughput at the SLO as a share of the grid's best (goal >= 0.95: ratio), the
trials each needed (goal: the tuner <= 1/3 of the grid's: ratio) and the winner's gain over the starting profile.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys

from vllm_fleet.cli.tune import target_for
from vllm_fleet.profiles.loader import load_profile
from vllm_fleet.project.paths import project_root
from vllm_fleet.tune.noise import NoiseRule, better
from vllm_fleet.tune.search import coordinate_descent, rank
from vllm_fleet.tune.session import JOURNAL, Options, tune
from vllm_fleet.tune.space import Point, derive_space, parse_levers, point_key
from vllm_fleet.tune.trials import Trial
from vllm_fleet.tune.workload import parse_slo, parse_workload

DEFAULT_LEVERS = ["max_num_seqs=1,2,4,8", "max_num_batched_tokens=32,128,2048", "enable_chunked_prefill=true,false"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="vfleet-node2")
    ap.add_argument("--lever", action="append", help="as vllm-fleet tune --lever (repeatable)")
    ap.add_argument("--slo", default="ttft_p95=3,itl_p95=0.5")
    ap.add_argument("--workload", default="input=128,output=32")
    ap.add_argument("--concurrency", default="4")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--live", action="store_true", help="also run the tuner for real on the host")
    ap.add_argument("--fresh", action="store_true", help="forget the grid's journal (else it is resumed)")
    ap.add_argument("--offline", action="store_true", help="judge a finished grid's journal again (no lab)")
    args = ap.parse_args()
    base = load_profile("cpu-lab")
    levers = parse_levers(args.lever or DEFAULT_LEVERS)
    workload = parse_workload(args.workload, [int(c) for c in args.concurrency.split(",")], 0, args.repeats)
    slo = parse_slo(args.slo, None, None)
    root = project_root() / "out" / "bench-tune"
    if args.fresh:
        shutil.rmtree(root, ignore_errors=True)

    def say(line: str) -> None:
        print(line, flush=True)

    if args.offline:
        journal = json.loads((root / "grid" / JOURNAL).read_text())
        trials = [Trial.from_json(t) for t in journal["trials"]]
        grid_winner = rank(trials, slo)  # as the grid search picks it
    else:
        target = target_for(args.host, "lab", None, None, None)
        g = tune(target, base, lambda _: slo, workload, levers, root / "grid", Options("grid", 10_000), say)
        trials, grid_winner = g.outcome.trials, g.winner
    by_key: dict[str, Trial] = {t.key: t for t in trials}
    space = derive_space(base, max(workload.concurrency), levers)
    asked: list[str] = []

    def replay(point: Point, incumbent: Trial | None) -> Trial:
        key = point_key(point)
        asked.append(key)
        return by_key[key]

    d = coordinate_descent(space, replay, slo, NoiseRule())
    grid_best, tuned = grid_winner, d.best
    if grid_best is None or tuned is None or grid_best.score(slo) is None:
        print("no grid point met the SLOs: loosen --slo", file=sys.stderr)
        return 1
    start = by_key[point_key(space.start)]
    g_score, t_score = grid_best.score(slo) or 0.0, tuned.score(slo) or 0.0
    grid_trials = sum(1 for t in trials if t.started)
    tuner_trials = d.started
    print("\n".join(d.steps))
    print(
        f"grid: {grid_trials} trials started of {space.size} points; "
        f"best {grid_best.key}: {g_score:.1f} tok/s at the SLO"
    )
    print(
        f"tuner (replayed on the grid's measurements): {tuner_trials} trials; winner {tuned.key}: {t_score:.1f} tok/s"
    )
    print(
        f"tuner / grid best throughput at the SLO: {t_score / g_score:.3f} "
        f"(goal >= 0.95: ratio {t_score / g_score / 0.95:.2f})"
    )
    share = tuner_trials / grid_trials
    print(f"tuner / grid trials: {share:.3f} (goal <= 0.333: ratio {share / (1 / 3):.2f})")
    # The grid's best is the highest of many noisy measurements (each point measured once, minutes apart): judged
    # by the tuner's own noise rule, is it better than the tuner's winner, or within the lab's noise of it?
    if grid_best.key != tuned.key:
        beats, why = better(grid_best, tuned, slo, NoiseRule())
        verdict = "better" if beats else "not distinguishable from it at the noise rule"
        print(f"the grid's best against the tuner's winner, by the tuner's noise rule: {verdict} ({why})")
    if start.score(slo):
        print(
            f"winner over the starting profile ({start.key}): "
            f"{t_score / (start.score(slo) or 1):.3f}x throughput at the SLO"
        )
    if args.live and not args.offline:
        target = target_for(args.host, "lab", None, None, None)
        live = tune(target, base, lambda _: slo, workload, levers, root / "descent", Options("descent"), say)
        lw = live.winner
        print(
            f"tuner, live: {live.outcome.started} trials; winner {lw.key if lw else '-'}: "
            f"{(lw.score(slo) or 0) if lw else 0:.1f} tok/s at the SLO (the grid measured that point at "
            f"{(by_key[lw.key].score(slo) or 0) if lw and lw.key in by_key else 0:.1f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
