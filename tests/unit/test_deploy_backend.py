"""The stack's backend is a setting: file:// by default, postgres:// for a team, never Pulumi Cloud."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fleet.deploy.engine import BACKEND_ENV, Engine, backend_url, clear_stale_locks


def test_backend_url_default_team_and_refused() -> None:
    assert backend_url({}) is None
    team = "postgres://fleet:pw@db.site.internal:5432/vllm_fleet?sslmode=verify-full"
    assert backend_url({BACKEND_ENV: team}) == team
    assert backend_url({BACKEND_ENV: "file:///srv/fleet-state"}) == "file:///srv/fleet-state"
    for cloud in ("https://api.pulumi.com", "s3://bucket", "db.site.internal"):
        with pytest.raises(ValueError, match="file:// or postgres://") as err:
            backend_url({BACKEND_ENV: cloud})
        assert "pw" not in str(err.value)


def test_engine_env_carries_the_backend(tmp_path: Path) -> None:
    engine = Engine(bin_dir=tmp_path, home=tmp_path, backend=tmp_path / "state", passphrase_file=tmp_path / "p")
    assert engine.env()["PULUMI_BACKEND_URL"] == f"file://{tmp_path}/state"
    team = Engine(tmp_path, tmp_path, tmp_path / "state", tmp_path / "p", "postgres://db/fleet")
    assert team.env()["PULUMI_BACKEND_URL"] == "postgres://db/fleet"
    # A PostgreSQL lock is shared by every controller: never removed behind their back.
    assert clear_stale_locks(team, "prod", lambda _m: None) == []
