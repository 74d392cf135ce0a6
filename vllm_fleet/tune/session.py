"""One tuning run, end to end: refuse what cannot be tuned before touching a host, take the host out of the router,
search (each candidate pruned by the planner or applied and measured), keep every trial in a journal (a run
interrupted is resumed from it with the same ``--out``), put the host back on its previous config (or the
winner's, with ``apply``) and into the router, and write the evidence."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.planner import plan
from vllm_fleet.project.digest import json_digest
from vllm_fleet.project.tables import UNBOUNDED, print_table
from vllm_fleet.tune.evidence import pareto_png, trials_table, winner_yaml
from vllm_fleet.tune.node import Node, Target, TuneError, write_profile
from vllm_fleet.tune.noise import NoiseRule, clearly_worse
from vllm_fleet.tune.search import Outcome, coordinate_descent, grid
from vllm_fleet.tune.space import Point, Space, Value, apply_point, derive_space, point_key, prune
from vllm_fleet.tune.trials import Level, Trial
from vllm_fleet.tune.workload import SLO, Workload

JOURNAL = "journal.json"


@dataclass
class Options:
    search: str = "descent"
    max_trials: int = 24
    apply: bool = False
    force: bool = False
    rule: NoiseRule = field(default_factory=NoiseRule)


@dataclass
class Result:
    outcome: Outcome
    slo: SLO
    space: Space
    start: Trial | None
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    left_on: str = "its previous config"
    problems: list[str] = field(default_factory=list)
    """What went wrong putting the host back (the router, the restore): said, and the exit is not 0."""

    @property
    def winner(self) -> Trial | None:
        return self.outcome.best

    @property
    def feasible(self) -> bool:
        return self.winner is not None and self.winner.score(self.slo) is not None


def _planner_figures(profile: DecodeProfile) -> dict[str, Any]:
    p = plan(profile)
    return {
        "kv_capacity_tokens": p.kv_capacity_tokens,
        "max_concurrent_seqs_at_max_len": p.max_concurrent_seqs_at_max_len,
        "roofline_aggregate_tok_s": round(p.decode_roofline_aggregate_tokens_per_s, 1),
    }


class Journal:
    """The run's trials on disk, rewritten whole (atomically) after each: what ``--out`` resumes from."""

    def __init__(self, path: Path, identity: dict[str, Any]) -> None:
        self.path = path
        self.identity = identity
        self.trials: dict[str, Trial] = {}
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                same = data.get("identity_digest") == json_digest(identity)
            except (OSError, ValueError, AttributeError):
                same, data = False, {}
            if not same:
                raise TuneError(
                    f"--out {path.parent} holds the journal of another tuning run (another host, profile, workload, "
                    "SLO or space): give another --out, or the same options to resume it"
                )
            self.trials = {t["key"]: Trial.from_json(t) for t in data.get("trials", [])}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = {
            "identity": self.identity,
            "identity_digest": json_digest(self.identity),
            "trials": [t.to_json() for t in self.trials.values()],
        }
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(self.path)


def tune(
    target: Target,
    base: DecodeProfile | None,
    slo: Callable[[DecodeProfile], SLO],
    workload: Workload,
    levers: dict[str, tuple[Value, ...]] | None,
    out_dir: Path,
    options: Options,
    log: Callable[[str], None] = print,
) -> Result:
    """Everything checked first (TuneError: the option and the fix); then the host is drained and searched."""
    node = Node.of(target, log)
    current = DecodeProfile.model_validate(node.spec.profile_data)
    base = base or current
    if (base.hardware, base.model.model, base.frontend.port) != (
        current.hardware,
        current.model.model,
        current.frontend.port,
    ):
        raise TuneError(
            f"--profile {base.name}: {node.name} serves {current.model.model} on {current.hardware} (port "
            f"{current.frontend.port}); tune it from a profile of the same model, hardware and port"
        )
    goals = slo(base)
    space = derive_space(base, max(workload.concurrency), levers)
    identity = {
        "host": node.name,
        "profile": base.model_dump(mode="json", exclude_none=True),
        "workload": workload.describe(),
        "slo": goals.as_dict(),
        "space": space.describe(),
        "search": options.search,
    }
    journal = Journal(out_dir / JOURNAL, identity)
    if not options.force and not node.others_serving():
        raise TuneError(
            f"{node.name} is the fleet's last serving host (no other answers ready): tuning it would drain the "
            "service; add --force to tune it anyway"
        )
    if options.search == "grid" and space.size > 4 * options.max_trials:
        log(f"note: the grid has {space.size} points")

    counter = [sum(1 for t in journal.trials.values() if t.started)]

    def evaluate(point: Point, incumbent: Trial | None) -> Trial:
        key = point_key(point)
        if key in journal.trials:
            t = journal.trials[key]
            log(f"trial {t.number or '-'} {key}: from the journal ({t.status})")
            return t
        candidate = apply_point(base, point)
        why = prune(candidate)
        if why:
            trial = Trial(key, dict(point), "pruned", why)
            log(f"pruned {key}: {why[:300]}")
        else:
            counter[0] += 1
            trial = Trial(key, dict(point), "measured", planner=_planner_figures(candidate), number=counter[0])
            _run_trial(node, candidate, trial, workload, goals, incumbent, options.rule, out_dir, log)
        journal.trials[key] = trial
        journal.save()
        return trial

    if node.router_command:
        log(f"{node.name}: out of the router for the tuning run")
        if err := node.router("drain"):
            raise TuneError(f"{node.name} could not be taken out of the router: {err}")
    else:
        log(f"note: the fleet has no router hook (vllm_service_router_command): {node.name} keeps its traffic")
    result = Result(Outcome(None), goals, space, None, out_dir)
    try:
        if options.search == "grid":
            result.outcome = grid(space, evaluate, goals)
        else:
            result.outcome = coordinate_descent(space, evaluate, goals, options.rule, options.max_trials)
    finally:
        result.start = journal.trials.get(point_key(space.start))
        _put_back(node, base, result, options, out_dir, log)
    _write_evidence(result, base, workload, node.name)
    return result


def _run_trial(
    node: Node,
    candidate: DecodeProfile,
    trial: Trial,
    workload: Workload,
    slo: SLO,
    incumbent: Trial | None,
    rule: NoiseRule,
    out_dir: Path,
    log: Callable[[str], None],
) -> None:
    t0 = time.monotonic()
    log(f"trial {trial.number} {trial.key}: converging")
    path = write_profile(candidate, out_dir / "candidates" / f"trial-{trial.number}.yaml")
    error = node.apply(path)
    if error:
        trial.status, trial.reason = "failed", error
        trial.seconds = round(time.monotonic() - t0, 1)
        log(f"trial {trial.number}: failed to start: {error[:400]}")
        return
    levels = {c: Level(c) for c in workload.concurrency}
    for r in range(workload.repeats):
        log(f"trial {trial.number}: measuring (repeat {r + 1}/{workload.repeats})")
        for c, results, wall in node.measure(candidate, workload, r):
            levels[c].add(results, wall)
        trial.levels, trial.repeats = list(levels.values()), r + 1
        if r + 1 < workload.repeats and (why := clearly_worse(trial, incumbent, slo, rule)):
            trial.status, trial.reason = "stopped", f"stopped early: {why}"
            break
    trial.seconds = round(time.monotonic() - t0, 1)
    score = trial.score(slo)
    said = f"{score:.1f} tok/s at the SLO" if score is not None else f"misses the SLOs ({trial.why_infeasible(slo)})"
    log(f"trial {trial.number}: {said}" + (f"; {trial.reason}" if trial.reason else ""))


def _put_back(
    node: Node, base: DecodeProfile, result: Result, options: Options, out: Path, log: Callable[[str], None]
) -> None:
    winner = result.outcome.best
    try:
        if options.apply and winner is not None and result.feasible:
            path = write_profile(apply_point(base, winner.point), out / "candidates" / "winner.yaml")
            log(f"{node.name}: left on the winner (--apply): {winner.key}")
            error = node.apply(path)
            result.left_on = f"the winner ({winner.key})"
        else:
            log(f"{node.name}: back to its previous config")
            error = node.apply(None)
        if error:
            result.problems.append(f"{node.name} could not be put back on {result.left_on}: {error}")
            result.left_on = "its last good config (the restore failed: see the problems)"
    finally:  # into the router again whatever happened above (it serves its last good config)
        if node.router_command:
            if err := node.router("ready"):
                result.problems.append(f"{node.name} could not be put back into the router: {err}")
            else:
                log(f"{node.name}: back in the router")


def _write_evidence(result: Result, base: DecodeProfile, workload: Workload, host: str) -> None:
    out = result.out_dir
    winner = result.winner
    trials = result.outcome.trials
    title = f"tuning {host} from {base.name}: {result.outcome.started} trials"
    md = out / "trials.md"
    with md.open("w", encoding="utf-8") as fh:
        print_table(Console(file=fh), trials_table(trials, result.slo, winner, title), width=UNBOUNDED)
    result.files["trials"] = md
    result.files["plot"] = pareto_png(trials, result.slo, winner, out / "pareto.png", title)
    if winner is not None:
        profile = apply_point(base, winner.point)
        path = out / "winner.yaml"
        path.write_text(winner_yaml(profile, winner, result.start, result.slo, workload, host), encoding="utf-8")
        result.files["winner"] = path
    result.files["journal"] = out / JOURNAL
