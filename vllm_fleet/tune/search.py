"""Two searches over a ``Space``, each driving an ``evaluate(point, incumbent) -> Trial`` it is given (the session's:
the journal first, else the planner's pruning, the converge and the client).

* ``coordinate_descent`` (the tuner's): from the start, one lever at a time, step to the next value in the
  planner's monotone direction (more sequences, more tokens per step) while the noise rule says *better*; when the
  first step that way is not better, try the other way; another pass over every lever while any moved. A pruned
  value is stepped over. It needs the trials along the path of improvement plus one refused step per lever and
  direction, where the grid needs every point.
* ``grid``: every point, measured fully (no early stop); the best is the highest throughput at the SLO (the
  nearest to the SLOs when none meets them). What `bench/tune.py` compares the tuner with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from vllm_fleet.tune.noise import NoiseRule, better
from vllm_fleet.tune.space import Point, Space, point_key
from vllm_fleet.tune.trials import Trial
from vllm_fleet.tune.workload import SLO

Evaluate = Callable[[Point, Trial | None], Trial]


@dataclass
class Outcome:
    best: Trial | None
    trials: list[Trial] = field(default_factory=list)
    """Every trial the search asked for, in order (pruned ones included; a point asked twice once)."""
    steps: list[str] = field(default_factory=list)
    """What the search decided at each step, in words."""
    stopped_at_budget: bool = False

    @property
    def started(self) -> int:
        return sum(1 for t in self.trials if t.started)


def _recorder(evaluate: Evaluate, out: Outcome) -> Evaluate:
    seen: dict[str, Trial] = {}

    def run(point: Point, incumbent: Trial | None) -> Trial:
        key = point_key(point)
        if key not in seen:
            seen[key] = evaluate(point, incumbent)
            out.trials.append(seen[key])
        return seen[key]

    return run


def rank(trials: list[Trial], slo: SLO) -> Trial | None:
    """The grid's best: the highest throughput at the SLO; when none meets the SLOs, the nearest to them."""
    measured = [t for t in trials if t.measured]
    feasible = [t for t in measured if t.score(slo) is not None]
    if feasible:
        return max(feasible, key=lambda t: t.score(slo) or 0.0)
    return min(measured, key=lambda t: t.violation(slo)) if measured else None


def grid(space: Space, evaluate: Evaluate, slo: SLO) -> Outcome:
    out = Outcome(None)
    run = _recorder(evaluate, out)
    for point in space.points():
        run(point, None)
    out.best = rank(out.trials, slo)
    return out


def coordinate_descent(
    space: Space,
    evaluate: Evaluate,
    slo: SLO,
    rule: NoiseRule = NoiseRule(),  # noqa: B008 - frozen
    max_trials: int = 24,
    max_passes: int = 3,
) -> Outcome:
    out = Outcome(None)
    run = _recorder(evaluate, out)
    point = dict(space.start)
    incumbent = run(point, None)
    if not incumbent.measured:
        out.steps.append(f"the start could not be measured ({incumbent.status}: {incumbent.reason[:200]})")
    for n in range(max_passes):
        moved_any = False
        for lever in space.levers:
            values = list(lever.values)
            here = values.index(point[lever.name])
            directions = (1, -1) if lever.up_first else (-1, 1)
            for step in directions:
                moved, j = False, here + step
                while 0 <= j < len(values):
                    if out.started >= max_trials:
                        out.stopped_at_budget = True
                        out.best = incumbent if incumbent.measured else rank(out.trials, slo)
                        out.steps.append(f"stopped: the budget of {max_trials} trials is spent")
                        return out
                    candidate = {**point, lever.name: values[j]}
                    trial = run(candidate, incumbent if incumbent.measured else None)
                    if trial.status == "pruned":
                        out.steps.append(f"{lever.name}={values[j]}: pruned, stepped over")
                        j += step
                        continue
                    ok, why = better(trial, incumbent if incumbent.measured else None, slo, rule)
                    out.steps.append(f"{lever.name}={values[j]}: {'better' if ok else 'not better'} ({why})")
                    if not ok:
                        break
                    point, incumbent, moved, moved_any = candidate, trial, True, True
                    here = j
                    j += step
                if moved:
                    break
        out.steps.append(f"pass {n + 1}: {'moved' if moved_any else 'no lever moved: done'}")
        if not moved_any:
            break
    out.best = incumbent if incumbent.measured else rank(out.trials, slo)
    return out
