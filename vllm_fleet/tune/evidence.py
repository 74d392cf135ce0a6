"""What a tuning run leaves: the winner as a profile YAML (commented with what was measured), a table of every trial,
a Pareto plot (throughput vs ITL p95, the SLO lines drawn) and the raw client figures (the journal)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.project.tables import table
from vllm_fleet.tune.trials import Trial
from vllm_fleet.tune.workload import SLO, Workload


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def verdict(trial: Trial, slo: SLO) -> str:
    if trial.status == "pruned":
        return "pruned"
    if trial.status == "failed":
        return "failed to start"
    best = trial.best_level(slo)
    if best is None:
        return "misses SLO"
    return f"meets SLO at C={best.concurrency}" + (" (stopped early)" if trial.status == "stopped" else "")


def _levers(point: dict[str, Any]) -> str:
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in point.items())


def trials_table(trials: list[Trial], slo: SLO, winner: Trial | None, title: str) -> Table:
    """One row per trial: its levers, throughput at the SLO, TTFT/ITL p95 of that level (or of the nearest one),
    the SLO verdict, the planner's KV capacity; the reason for a pruned, failed or stopped one."""
    num = ("#", "tok/s at SLO", "C", "TTFT p95 ms", "ITL p95 ms", "errors", "KV tokens")
    t = table("#", "levers", "tok/s at SLO", "C", "TTFT p95 ms", "ITL p95 ms", "errors", "verdict", "KV tokens",
              "note", title=title, right=num)  # fmt: skip
    for trial in trials:
        level = trial.best_level(slo) or trial.nearest_level(slo)
        score = trial.score(slo)
        mark = " *" if winner is not None and trial.key == winner.key else ""
        t.add_row(
            f"{trial.number or '-'}{mark}",
            _levers(trial.point),
            "-" if score is None else f"{score:.1f}",
            "-" if level is None else str(level.concurrency),
            _ms(level.ttft_p95()) if level else "-",
            _ms(level.itl_p95()) if level else "-",
            "-" if level is None else f"{level.errors}/{level.requests}",
            verdict(trial, slo),
            str(trial.planner.get("kv_capacity_tokens", "-")),
            trial.reason[:160] if trial.status != "measured" else "",
        )
    return t


def winner_yaml(
    profile: DecodeProfile, winner: Trial, start: Trial | None, slo: SLO, workload: Workload, host: str
) -> str:
    """The winner as a profile file (name ``<start>-tuned``), its header saying what was measured and against
    what: ready for `vllm-fleet up --profile` (through the canary analysis)."""
    best = winner.best_level(slo) or winner.nearest_level(slo)
    lines = [
        f"# Tuned by `vllm-fleet tune` on {host} from the profile {profile.name}.",
        f"# Levers: {_levers(winner.point)}",
        f"# Workload: {json.dumps(workload.describe())}",
        f"# SLOs: {', '.join(f'{k} {v:g}' for k, v in slo.as_dict().items() if v is not None)}"
        + (f" (from: {', '.join(f'{k} {src}' for k, src in slo.sources.items())})" if slo.sources else ""),
    ]
    if best is not None:
        s = best.summary()
        lines.append(
            f"# Measured (trial {winner.number}, {winner.repeats} repeat(s)): {s['throughput_tok_s']} tok/s at "
            f"concurrency {best.concurrency}, TTFT p95 {_ms(best.ttft_p95())} ms, ITL p95 {_ms(best.itl_p95())} ms, "
            f"errors {best.errors}/{best.requests}"
        )
    base = start.score(slo) if start else None
    if base and winner.score(slo):
        lines.append(
            f"# Gain over the starting profile: {(winner.score(slo) or 0) / base - 1:+.1%} throughput at the SLO"
        )
    data = profile.model_dump(mode="json", exclude_none=True)
    data["name"] = f"{profile.name}-tuned"[:80]
    data["description"] = f"{profile.name}, tuned: {_levers(winner.point)}"[:500]
    return "\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (ITL p95, throughput) points no other point beats on both (lower ITL, higher throughput)."""
    front, best = [], -math.inf
    for itl, thr in sorted(points, key=lambda p: (p[0], -p[1])):
        if thr > best:
            front.append((itl, thr))
            best = thr
    return front


def pareto_png(trials: list[Trial], slo: SLO, winner: Trial | None, path: Path, title: str) -> Path:
    """Every measured level of every trial: throughput vs ITL p95, filled when it meets every SLO, hollow when
    not; the Pareto front; the ITL SLO as a vertical line; the winner ringed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    pts: list[tuple[float, float]] = []
    for trial in trials:
        for lv in trial.levels if trial.measured else []:
            itl = lv.itl_p95()
            if itl is None:
                continue
            x, y = itl * 1000, lv.throughput
            pts.append((x, y))
            ok = not lv.violations(slo)
            ax.scatter([x], [y], s=36, facecolors="C0" if ok else "none", edgecolors="C0")
            ax.annotate(f"#{trial.number} C={lv.concurrency}", (x, y), textcoords="offset points", xytext=(4, 3),
                        fontsize=6)  # fmt: skip
            if winner is not None and trial.key == winner.key and lv is winner.best_level(slo):
                ax.scatter([x], [y], s=160, facecolors="none", edgecolors="C3", linewidths=1.5, label="winner")
    front = pareto(pts)
    if len(front) > 1:
        ax.plot([p[0] for p in front], [p[1] for p in front], "--", color="C2", label="Pareto front")
    if slo.itl_p95_s is not None:
        limit_ms = slo.itl_p95_s * 1000
        widest = max((p[0] for p in pts), default=limit_ms)
        if limit_ms <= 3 * widest:
            ax.axvline(limit_ms, color="C3", linestyle=":", label=f"ITL p95 SLO {limit_ms:g} ms")
        else:  # far right of every point: drawn, it would squash them into one column
            ax.plot([], [], " ", label=f"ITL p95 SLO {limit_ms:g} ms (off the chart, right)")
            ax.set_xlim(0, widest * 1.3)
    if slo.ttft_p95_s is not None:
        ax.plot([], [], " ", label=f"TTFT p95 SLO {slo.ttft_p95_s:g} s (hollow: an SLO missed)")
    ax.set_xlabel("ITL p95 (ms, client)")
    ax.set_ylabel("throughput (output tokens/s)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
