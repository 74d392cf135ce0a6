"""The edge of the monitoring: one output directory Prometheus and Grafana read as it is.

```
DIR/prometheus.yml            scrape job + rule_files (paths relative to DIR); no credentials
DIR/targets/vllm.json         file_sd: one target per node (none with --profile alone)
DIR/targets/vllm-sentinel.json  file_sd: each node's sentinel, same labels (job vllm-sentinel)
DIR/rules/vllm-<V>.rules.yml  recording rules, thresholds and alerts of the nodes on vLLM V
DIR/rules/vllm-fleet.rules.yml  node down and the alerts on recorded series
DIR/dashboards/*.json         Grafana dashboards
DIR/NOTES.md                  what the rules could not do exactly as a profile asks (SLO buckets, …)
```
Files another run would not write again are removed (a release no longer in the fleet leaves no stale rules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vllm_fleet.monitoring.alerts import RUNBOOK, Note
from vllm_fleet.monitoring.dashboards import dashboards
from vllm_fleet.monitoring.rules import rule_set
from vllm_fleet.monitoring.scopes import MonitoredNode, Scope
from vllm_fleet.monitoring.targets import (
    SENTINEL_TARGETS_FILE,
    TARGETS_FILE,
    file_sd_json,
    scrape_config,
    sentinel_file_sd_json,
)


@dataclass
class Written:
    out: Path
    files: list[Path] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


def _notes_md(notes: list[Note]) -> str:
    lines = ["# Notes on the generated monitoring", ""]
    if not notes:
        lines.append("Every threshold is exact: each SLO sits on a bucket boundary, every label is comparable.")
    lines += [f"- {n.scope}: {n.message}" for n in notes]
    return "\n".join(lines) + "\n"


def write_monitoring(
    out: Path, scopes: list[Scope], nodes: list[MonitoredNode] | None, runbook_base: str = RUNBOOK
) -> Written:
    """Write the directory for ``scopes`` (targets only when ``nodes`` is given)."""
    rules = rule_set(scopes, runbook_base)
    content: dict[Path, str] = {Path("prometheus.yml"): scrape_config(nodes is not None)}
    if nodes is not None:
        content[Path("targets") / TARGETS_FILE] = file_sd_json(nodes)
        content[Path("targets") / SENTINEL_TARGETS_FILE] = sentinel_file_sd_json(nodes)
    for f in rules.files:
        content[Path("rules") / f.name] = f.to_yaml()
    for board in dashboards(scopes):
        content[Path("dashboards") / f"{board.uid}.json"] = board.json
    content[Path("NOTES.md")] = _notes_md(rules.notes)

    result = Written(out, notes=rules.notes)
    for sub in ("targets", "rules", "dashboards"):
        folder = out / sub
        if folder.is_dir():
            for old in folder.iterdir():
                if old.is_file() and old.relative_to(out) not in content:
                    old.unlink()
    for rel, text in content.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        result.files.append(path)
    return result
