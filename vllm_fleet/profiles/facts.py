"""The facts the roles read from a host's decode profile, rendered on the controller: ``vllm_config`` (dashed flag →
value), ``vllm_profile_name``, ``vllm_version`` and ``vllm_fleet_profile_data``.

``python -m vllm_fleet.profiles.facts PROFILE [VERSION]`` (playbooks/tasks/render-profile.yml, for plain-Ansible
users) prints them as JSON, or exits non-zero with one line per problem: the same loader, planner and renderer as
``vllm-fleet render`` and ``validate``, so a profile that cannot fit never reaches a host.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from vllm_fleet.profiles.loader import ProfileError, load_profile
from vllm_fleet.profiles.render import render
from vllm_fleet.profiles.validate import check_profile


def profile_facts(profile_ref: str, vllm_version: str | None = None) -> dict[str, Any]:
    """The facts of ``profile_ref`` (a built-in name or a profile file) for ``vllm_version`` (default: its pin).
    ProfileError naming every problem, the planner's errors included."""
    profile = load_profile(profile_ref)
    rendered = render(profile, vllm_version or None)
    errors, _ = check_profile(profile)
    if errors:
        raise ProfileError(profile_ref, errors)
    return {
        "config": rendered.config,
        "profile": profile.name,
        "version": rendered.vllm_version,
        "data": profile.model_dump(mode="json", exclude_none=True),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        sys.stderr.write("usage: python -m vllm_fleet.profiles.facts PROFILE [VLLM_VERSION]\n")
        return 2
    try:
        facts = profile_facts(args[0], args[1] if len(args) > 1 else None)
    except ProfileError as err:
        sys.stderr.write("".join(f"{err.source}: {p}\n" for p in err.problems))
        return 1
    sys.stdout.write(json.dumps(facts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
