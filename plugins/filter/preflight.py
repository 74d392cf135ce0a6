"""Ansible filters over vllm_fleet.fleet.role_vars: the preflight role's check of a host's final variables, in one
language. The stack-config validator (``pulumi preview``, ``vllm-fleet validate``) calls the same Python, so the
preflight play refuses what the validator refuses, in the same words.

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
from vllm_fleet.fleet.role_vars import preflight_reads


def preflight_variable_names(defined: Iterable[str]) -> list[str]:
    """``query('ansible.builtin.varnames', '.+') | preflight_variable_names``: the defined variables the check
    reads (so only those are templated and passed on)."""
    reads = preflight_reads()
    return sorted(str(name) for name in defined if str(name) in reads)


def preflight_problems(host_vars: Mapping[str, Any]) -> list[str]:
    """``{name: value, ...} | preflight_problems``: one line per problem, "variable: what is wrong; the fix"."""
    return _preflight_problems(dict(host_vars))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"preflight_variable_names": preflight_variable_names, "preflight_problems": preflight_problems}
