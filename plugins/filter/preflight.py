"""Ansible filters over vllm_fleet.fleet.role_vars: the preflight role's check of a host's final variables, and
each role's check of its own pins, in one language. The stack-config validator (``pulumi preview``,
``vllm-fleet validate``) calls the same Python, so the roles refuse what the validator refuses, in the same words.

ansible.cfg points filter_plugins here. The filters are pure: names or variables in, names or problems out.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

try:
    from vllm_fleet.fleet import role_vars  # noqa: F401  (import check: the project venv has the package)
except ImportError:  # ansible-playbook from another interpreter: use this checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vllm_fleet.fleet.role_vars import preflight_problems as _preflight_problems
from vllm_fleet.fleet.role_vars import preflight_reads, value_problems


def preflight_variable_names(defined: Iterable[str]) -> list[str]:
    """``query('ansible.builtin.varnames', '.+') | preflight_variable_names``: the defined variables the check
    reads (so only those are templated and passed on)."""
    reads = preflight_reads()
    return sorted(str(name) for name in defined if str(name) in reads)


def preflight_problems(host_vars: Mapping[str, Any]) -> list[str]:
    """``{name: value, ...} | preflight_problems``: one line per problem, "variable: what is wrong; the fix"."""
    return _preflight_problems(dict(host_vars))


def role_value_problems(variables: Mapping[str, Any]) -> list[str]:
    """``{'cuda_toolkit_version': cuda_toolkit_version} | role_value_problems``: a role's check of its own inputs
    (type, choices, exact-version format, the rules between them), the validator's words."""
    return value_problems(dict(variables))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "preflight_variable_names": preflight_variable_names,
            "preflight_problems": preflight_problems,
            "role_value_problems": role_value_problems,
        }
