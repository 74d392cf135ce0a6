"""playbooks/monitoring.yml and the prometheus_server role: its documented API, and a run on the controller itself
(local connection, no package install, no service: the configuration directory is a temporary one) with the
directory `vllm-fleet monitoring` writes: files in place, promtool's checks before a file replaces the old one,
stale rules pruned, idempotent, check mode. The syntax check of the playbook is test_lint's (every playbook)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.roles.test_lint import ROLES, _defaults_with_comments
from vllm_fleet.monitoring import MonitoredNode, scopes_of, write_monitoring
from vllm_fleet.profiles.loader import load_profile

Run = Callable[..., Any]
Tool = Callable[[str], str]
ROLE = "prometheus_server"
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian package `prometheus`)"
)


def test_defaults_are_the_documented_api() -> None:
    defaults, undocumented, _ = _defaults_with_comments(ROLE)
    assert undocumented == [], undocumented
    options = yaml.safe_load((ROLES / ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"][
        "options"
    ]
    assert set(defaults) == set(options)
    for name, spec in options.items():
        assert spec.get("description"), name
        assert name.startswith(ROLE + "_"), name
        assert spec.get("default") == defaults[name], name  # the spec documents the real default
    for rel in ("meta/main.yml", "handlers/main.yml", "tasks/main.yml", "templates/environment.j2"):
        assert (ROLES / ROLE / rel).is_file(), rel


def _generated(out: Path) -> Path:
    prof = load_profile("cpu-lab")
    node = MonitoredNode(
        name="node1",
        target="10.0.0.11:8000",
        hardware=prof.hardware,
        profile=prof.name,
        profile_data=prof.model_dump(mode="json", exclude_none=True),
        vllm_version=prof.vllm_version,
        config_hash="0" * 64,
    )
    write_monitoring(out, scopes_of([node]), [node])
    return out


def _inventory(tmp_path: Path, config_dir: Path, source: Path) -> Path:
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,
        "prometheus_server_source_dir": str(source),
        "prometheus_server_config_dir": str(config_dir),
        "prometheus_server_install": False,
        "prometheus_server_manage_service": False,
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"monitoring": {"hosts": {"prom1": host}}}}}))
    return path


def _play(run: Run, tool: Tool, inv: Path, *extra: str) -> Any:
    return run([tool("ansible-playbook"), "-i", str(inv), "playbooks/monitoring.yml", *extra])


def _recap(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("prom1 ") and "ok=" in line)


@needs_promtool
def test_installs_the_generated_directory_checked_pruned_and_idempotent(run: Run, tool: Tool, tmp_path: Path) -> None:
    source = _generated(tmp_path / "generated")
    etc = tmp_path / "etc-prometheus"
    (etc / "rules").mkdir(parents=True)
    (etc / "rules" / "vllm-0.10.0.rules.yml").write_text("groups: []\n")  # a release that left the fleet
    (etc / "rules" / "site-own.yml").write_text("groups: []\n")  # not a generated name: kept
    inv = _inventory(tmp_path, etc, source)

    first = _play(run, tool, inv)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    for rel in ("prometheus.yml", "targets/vllm.json", "rules/vllm-0.32.0.rules.yml", "rules/vllm-fleet.rules.yml"):
        assert (etc / rel).read_text() == (source / rel).read_text(), rel
    assert not (etc / "rules" / "vllm-0.10.0.rules.yml").exists()
    assert (etc / "rules" / "site-own.yml").exists()
    assert not (etc / "dashboards").exists()  # Grafana's, not Prometheus's

    again = _play(run, tool, inv)
    assert again.returncode == 0, again.stdout[-4000:]
    assert "changed=0" in _recap(again.stdout), _recap(again.stdout)


@needs_promtool
def test_a_rule_file_promtool_rejects_does_not_replace_the_old_one(run: Run, tool: Tool, tmp_path: Path) -> None:
    source = _generated(tmp_path / "generated")
    etc = tmp_path / "etc-prometheus"
    inv = _inventory(tmp_path, etc, source)
    assert _play(run, tool, inv).returncode == 0
    good = (etc / "rules" / "vllm-0.32.0.rules.yml").read_text()
    broken = source / "rules" / "vllm-0.32.0.rules.yml"
    broken.write_text(broken.read_text().replace("histogram_quantile(0.5,", "histogram_quantile(0.5,,", 1))

    proc = _play(run, tool, inv)
    assert proc.returncode != 0
    assert "failed to validate" in proc.stdout + proc.stderr, proc.stdout[-3000:]
    assert (etc / "rules" / "vllm-0.32.0.rules.yml").read_text() == good


@needs_promtool
def test_check_mode_writes_nothing(run: Run, tool: Tool, tmp_path: Path) -> None:
    source = _generated(tmp_path / "generated")
    etc = tmp_path / "etc-prometheus"
    proc = _play(run, tool, _inventory(tmp_path, etc, source), "--check")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert not etc.exists()


def test_a_missing_generated_directory_says_how_to_make_it(run: Run, tool: Tool, tmp_path: Path) -> None:
    proc = _play(run, tool, _inventory(tmp_path, tmp_path / "etc", tmp_path / "nowhere"))
    assert proc.returncode != 0
    assert "vllm-fleet monitoring" in proc.stdout and "nowhere/prometheus.yml not found" in proc.stdout
