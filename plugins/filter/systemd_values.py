"""Ansible filters over vllm_fleet.trust.systemd_values: the rules for values written into a systemd unit, in one
language. The stack-config validator (``role_vars``) and the vllm_service role's check call the same Python, so
they refuse the same values with the same words.

ansible.cfg points filter_plugins here. The filters are pure: variables in, a list of problems out.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

try:
    from vllm_fleet.trust import systemd_values  # noqa: F401  (import check: the project venv has the package)
except ImportError:  # ansible-playbook from another interpreter: use this checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vllm_fleet.trust.systemd_values import role_input_problems


def vllm_service_unit_problems(role_vars: Mapping[str, Any]) -> list[str]:
    """``{'vllm_service_environment': ..., ...} | vllm_service_unit_problems``: one sentence per value that would
    change the unit's syntax (a line break, a control character, a path or name the unit cannot hold)."""
    return role_input_problems(dict(role_vars))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"vllm_service_unit_problems": vllm_service_unit_problems}
