"""Waivers as data: an accepted, dated exception to a check on some hosts.

    # waivers.yaml
    - check: VF-UNIT-EXPOSURE        # a check id (VF-RUN-CONFIG covers its per-flag findings too)
      hosts: "gpu-l40-*"             # fnmatch pattern over host names
      reason: "MIG tooling needs /dev/nvidia-caps; ticket SEC-1234"
      expires: 2027-03-31            # the waiver stops counting after this day

A failed finding that an unexpired waiver covers keeps its status (the evidence is what it is) but is marked
``waived`` and no longer makes the audit fail. An expired waiver is reported on the finding and counts for
nothing. Expiry is judged at the audit's collection time, so re-judging a saved bundle later gives the same
verdict. The waiver file is copied into the evidence bundle (and its manifest).
"""

from __future__ import annotations

import datetime as dt
import difflib
import fnmatch
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vllm_fleet.audit.errors import AuditFileError
from vllm_fleet.audit.reconcile import CHECKS
from vllm_fleet.trust.user_yaml import read_user_yaml
from vllm_fleet.trust.values import plain_text


class Waiver(BaseModel):
    model_config = ConfigDict(extra="forbid")

    check: str
    """A check id (``VF-UNIT-EXPOSURE``); a per-flag id (``VF-RUN-CONFIG:max-num-seqs``) narrows it."""
    hosts: str = Field(default="*", min_length=1)
    """fnmatch pattern over host names."""
    reason: str = Field(min_length=3, max_length=500)
    """Why the exception is accepted (a ticket, a decision)."""
    expires: dt.date
    """The last day the waiver counts."""

    @field_validator("check")
    @classmethod
    def _known(cls, value: str) -> str:
        base = value.split(":", 1)[0]
        if base not in CHECKS:
            close = difflib.get_close_matches(base, list(CHECKS), n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; checks: {', '.join(CHECKS)}"
            raise ValueError(f"no check {base!r}{hint}")
        return value

    @field_validator("reason")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return plain_text(value)

    def covers(self, check: str, host: str) -> bool:
        same = check == self.check or (":" not in self.check and check.split(":", 1)[0] == self.check)
        return same and fnmatch.fnmatchcase(host, self.hosts)


class WaiverError(AuditFileError):
    """A waiver file that cannot be used."""


def parse_waivers(data: Any, source: str) -> list[Waiver]:
    if data is None:
        return []
    if not isinstance(data, list):
        raise WaiverError(source, ["(file): a list of waivers (check, hosts, reason, expires)"])
    out, problems = [], []
    for i, item in enumerate(data):
        try:
            out.append(Waiver.model_validate(item))
        except ValidationError as err:
            problems += [
                f"[{i}].{'.'.join(str(p) for p in e['loc'])}: {str(e['msg']).removeprefix('Value error, ')}"
                for e in err.errors()
            ]
    if problems:
        raise WaiverError(source, problems)
    return out


def load_waivers(path: Path) -> list[Waiver]:
    return parse_waivers(read_user_yaml(path), str(path))


def waiver_for(waivers: list[Waiver], check: str, host: str, on: dt.date) -> dict[str, str] | None:
    """The waiver record of a finding: the first covering waiver, unexpired ones first; None if none covers it."""
    covering = [w for w in waivers if w.covers(check, host)]
    if not covering:
        return None
    live = [w for w in covering if w.expires >= on]
    w = (live or covering)[0]
    return {
        "reason": w.reason,
        "expires": w.expires.isoformat(),
        "state": "active" if live else f"expired on {w.expires.isoformat()}: counts for nothing",
    }
