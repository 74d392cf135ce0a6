"""Everything that makes a profile unusable, before any host is touched: schema, arithmetic, vLLM version."""

from __future__ import annotations

import warnings
from pathlib import Path

from vllm_fleet.profiles.loader import Problem, ProfileError, read_profile_file
from vllm_fleet.profiles.model import SECTIONS, DecodeProfile, ProfileLayoutWarning
from vllm_fleet.profiles.planner import Finding, plan
from vllm_fleet.profiles.render import render

LAYOUT = (
    "profiles are sectioned like vLLM's config (ModelConfig, CacheConfig, ...), a section's fields named as "
    "vLLM's argument dests -- "
    + "; ".join(f"{name}: {', '.join(model.model_fields)}" for name, model in SECTIONS.items())
    + " -- and name, description, hardware, gpus, vllm_version, extra_args and slo at the top (docs/profiles.md)"
)
"""How a profile is laid out, told with the notes on an old flat file."""


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
        field = "hardware" if "hardware" in str(err) else "model.model"
        return [*errors, Problem(field, str(err.args[0]))], []
    except ValueError as err:  # a release outside the tables: render has said so, naming vllm_version
        return errors or [Problem("vllm_version", str(err))], []
    errors.extend(Problem(f.field, f.message) for f in findings if f.severity == "error")
    return errors, [f for f in findings if f.severity != "error"]


def layout_notes(moved: list[tuple[str, str]]) -> list[Finding]:
    """Info findings for an old flat profile: where each key moved, and the layout."""
    if not moved:
        return []
    notes = [
        Finding("info", old, f"moved to {new}: the old flat layout still loads; write {new}") for old, new in moved
    ]
    return [*notes, Finding("info", "(layout)", LAYOUT)]


def check_file(path: Path) -> tuple[list[Problem], list[Finding]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ProfileLayoutWarning)
        try:
            profile = read_profile_file(path)
        except ProfileError as err:
            return err.problems, []
    moved = [pair for w in caught if isinstance(w.message, ProfileLayoutWarning) for pair in w.message.moved]
    errors, findings = check_profile(profile)
    return errors, [*layout_notes(moved), *findings]
