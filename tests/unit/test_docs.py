"""The field reference in docs/profiles.md is generated from the classes and must be current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_profile_field_reference_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_profile_docs.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
