"""Everything that makes a profile unusable, before any host is touched: schema, arithmetic, vLLM version."""

from __future__ import annotations

from pathlib import Path

from vllm_fleet.planner import Finding, plan
from vllm_fleet.profile import DecodeProfile
from vllm_fleet.profile_loader import Problem, ProfileError, read_profile_file
from vllm_fleet.vllm.render import render


def check_profile(profile: DecodeProfile) -> tuple[list[Problem], list[Finding]]:
    """(errors, non-error findings) of a schema-valid profile."""
    errors: list[Problem] = []
    try:
        render(profile)
    except ProfileError as err:
        errors.extend(err.problems)
    try:
        findings = plan(profile).findings
    except KeyError as err:
        field = "hardware" if "hardware" in str(err) else "model"
        return [*errors, Problem(field, str(err.args[0]))], []
    errors.extend(Problem(f.field, f.message) for f in findings if f.severity == "error")
    return errors, [f for f in findings if f.severity != "error"]


def check_file(path: Path) -> tuple[list[Problem], list[Finding]]:
    try:
        profile = read_profile_file(path)
    except ProfileError as err:
        return err.problems, []
    return check_profile(profile)
