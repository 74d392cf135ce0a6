"""The rollout's final report: what became of each host (pure, from what the hosts really have).

Per host: the config it had before the run (the stack's last outputs), the config it should have now (the
plan), the config on its disk and its rollout journal (both read by the audit's collection right after the
run), and whether it could be reached. The journal counts only when it was written during this run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from vllm_fleet.audit.evidence import HostEvidence, b64_file, sha256_text
from vllm_fleet.audit.reconcile import cordon_reason
from vllm_fleet.trust.node_text import printable

Outcome = Literal["moved", "unchanged", "rolled back", "failed", "interrupted", "cordoned", "untouched", "unreachable"]
OUTCOMES: tuple[Outcome, ...] = (
    "moved",
    "unchanged",
    "rolled back",
    "failed",
    "interrupted",
    "cordoned",
    "untouched",
    "unreachable",
)


@dataclass(frozen=True)
class HostOutcome:
    host: str
    outcome: Outcome
    before: str | None
    """Config hash (12 hex digits) the stack recorded for the host before the run; None: a new host."""
    target: str
    now: str | None
    """Hash of the config on the host's disk after the run; None: not read."""
    phase: str | None
    """The host's journal phase, if written during this run."""
    detail: str = ""


def outcome(
    before: str | None,
    target: str,
    now: str | None,
    phase: str | None,
    error: str | None,
    cordon: str | None = None,
) -> tuple[Outcome, str]:
    """``(outcome, detail)`` of one host; hashes compared on their first 12 hex digits. ``cordon``: the reason a
    person cordoned the host (None: not cordoned)."""
    if error is not None:
        return "unreachable", error
    if phase == "failed":
        return "failed", "the new config failed and so did its last-known-good: the server is down"
    if phase in ("drained", "restarting"):
        return "interrupted", f"the run stopped while the host was {phase}: run again to finish it"
    if phase == "rolled-back":
        return "rolled back", "the new config failed its start or smoke test: back on its last-known-good"
    if now is not None and now[:12] == target[:12]:
        if before is not None and before[:12] == target[:12]:
            return "unchanged", "already on this config"
        return "moved", "on the new config, passed health and smoke"
    if cordon is not None:
        return "cordoned", f"skipped: cordoned ({cordon or 'no reason given'}); uncordon it to roll it"
    return "untouched", "still on its earlier config (the rollout stopped before its batch)"


def host_outcome(host: str, before: str | None, target: str, ev: HostEvidence | None, since: float) -> HostOutcome:
    if ev is None:
        return HostOutcome(host, "unreachable", before, target[:12], None, None, "not read")
    config = b64_file(ev.remote.get("config", ""))
    now = sha256_text(config)[:12] if config is not None else None
    phase = None
    try:
        journal = json.loads(ev.remote.get("journal", "").strip() or "{}")
    except ValueError:
        journal = {}
    if isinstance(journal, dict) and float(journal.get("at") or 0) >= since:
        phase = str(journal.get("phase") or "") or None
    kind, detail = outcome(before, target, now, phase, ev.error, cordon_reason(ev))
    if phase is not None and isinstance(journal, dict) and (said := analysis_line(journal.get("analysis"))):
        detail = f"{detail}; {said}"
    return HostOutcome(host, kind, before[:12] if before else None, target[:12], now, phase, detail)


def analysis_line(analysis: Any) -> str:
    """The canary analysis a host's journal records (the role's, from `vllm-fleet canary --json`), in one line of
    printable text: ``canary analysis promote: TTFT p95 0.41 s vs 0.4 s, ITL mean 21 ms vs 20 ms, requests 140 vs
    205``, and why when it did not promote; "" when there was none."""
    if not isinstance(analysis, dict) or not analysis.get("decision"):
        return ""
    figures: dict[str, Any] = f if isinstance(f := analysis.get("figures"), dict) else {}
    sides = [v for k, v in figures.items() if k not in ("p", "baseline") and isinstance(v, dict)][:1]
    sides += [figures["baseline"]] if isinstance(figures.get("baseline"), dict) else []
    parts = []
    if len(sides) == 2:
        canary, base = sides
        for label, key, scale, unit in (
            ("TTFT p95", "ttft_p95_s", 1, " s"),
            ("ITL mean", "itl_mean_s", 1000, " ms"),
            ("requests", "requests", 1, ""),
        ):
            a, b = canary.get(key), base.get(key)
            if isinstance(a, int | float) and isinstance(b, int | float):
                parts.append(f"{label} {a * scale:.3g}{unit} vs {b * scale:.3g}{unit}")
    reasons = analysis.get("reasons") if isinstance(analysis.get("reasons"), list) else []
    text = f"canary analysis {analysis['decision']}" + (f": {', '.join(parts)}" if parts else "")
    if reasons and analysis["decision"] != "promote":
        text += f" ({'; '.join(str(r) for r in reasons)})"
    return printable(text)[:600]


def summary(rows: list[HostOutcome]) -> dict[str, int]:
    return {o: n for o in OUTCOMES if (n := sum(r.outcome == o for r in rows))}


def to_json(rows: list[HostOutcome], *, error: str | None = None) -> str:
    doc: dict[str, Any] = {
        "ok": error is None and all(r.outcome in ("moved", "unchanged") for r in rows),
        "error": error,
        "summary": summary(rows),
        "hosts": [asdict(r) for r in rows],
    }
    return json.dumps(doc, indent=2) + "\n"
