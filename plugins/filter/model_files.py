"""Ansible filters over vllm_fleet.models.manifest: the vllm role's check of a staged model's files against its
manifest, the same Python the audit's VF-MODEL-FILES check runs (one rule, one language).

ansible.cfg points filter_plugins here. The filters are pure: what the host sent in, problems out.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

try:
    from vllm_fleet.models import manifest  # noqa: F401  (import check: the project venv has the package)
except ImportError:  # ansible-playbook from another interpreter: use this checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vllm_fleet.models.manifest import model_file_problems as _model_file_problems
from vllm_fleet.models.manifest import summary
from vllm_fleet.models.staging import manifest_source, verified


def model_file_problems(manifest_b64: str, manifest_sha256: str, listing_b64: str) -> list[str]:
    """``slurped.content | model_file_problems(sha256, listing.stdout)``: one line per file that differs from the
    manifest (and the manifest's own problems: not the one the stack names, unreadable); empty when all match."""
    return _model_file_problems(str(manifest_b64 or ""), str(manifest_sha256 or ""), str(listing_b64 or ""))


def model_problems_summary(problems: Iterable[str]) -> str:
    """The first problems one by one, then how many more."""
    return summary(str(p) for p in problems)


def verified_models(entries: Any) -> list[Any]:
    """``vllm_models | verified_models``: the entries with a manifest (all but ``unverified: true``)."""
    return [dict(e) for e in verified(entries)]


def model_manifest_source(entry: Any) -> str:
    """``vllm_model | model_manifest_source``: ``none``, ``mirror`` or ``controller`` (vllm_fleet.models.staging)."""
    return manifest_source(entry)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "model_file_problems": model_file_problems,
            "model_problems_summary": model_problems_summary,
            "verified_models": verified_models,
            "model_manifest_source": model_manifest_source,
        }
