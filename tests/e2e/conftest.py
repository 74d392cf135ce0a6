"""The Pulumi engine's tests: each leaves no Pulumi garbage behind for a later test's imports."""

import pytest


@pytest.fixture(autouse=True)
def _no_pulumi_garbage_left(pulumi_garbage_collected: None) -> None:
    """Every test here runs Pulumi in this process (inline programs, the automation API)."""
