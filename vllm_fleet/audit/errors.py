"""The audit's own input files (waivers, control mappings) refused: every problem, each naming the file."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AuditFileError(ValueError):
    source: str
    problems: list[str]

    def __str__(self) -> str:
        return "\n".join(f"{self.source}: {p}" for p in self.problems)
