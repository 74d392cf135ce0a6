"""The main job's closing report: the nodes, where the API key is (never the key), a smoke line per node that
`vllm-fleet smoke` accepts as printed, and Prometheus when the lab runs one."""

from __future__ import annotations

import io
import shlex
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from vllm_fleet.cli.commands import app
from vllm_fleet.cli.up_report import lab_api_key_file, print_up_report, program, smoke_line

NODES = [
    {"host": "lab-1", "endpoint": "http://172.31.254.11:8000", "hardware": "cpu-lab", "profile": "cpu-lab",
     "vllm_version": "0.32.0", "config_hash": "0123456789ab"},
    {"host": "lab-2", "endpoint": "http://172.31.254.12:8000", "hardware": "cpu-lab", "profile": "my profile",
     "vllm_version": "0.32.0", "config_hash": "ba9876543210"},
]  # fmt: skip


def report(key_file: Path | None, prometheus: str | None = None, width: int = 60) -> str:
    buf = io.StringIO()
    refs = {"lab-1": "cpu-lab", "lab-2": "/srv/profiles/my profile.yaml"}
    print_up_report(
        Console(file=buf, width=width), NODES, "lab", profile_refs=refs, api_key_file=key_file,
        prometheus_url=prometheus,
    )  # fmt: skip
    return buf.getvalue()


def test_the_report_says_where_the_key_is_and_never_the_key(tmp_path: Path) -> None:
    key = tmp_path / "lab-api-key"
    key.write_text("sk-lab-0123456789abcdef0123456789abcdef")
    text = report(key)
    assert f"API key: {key} " in text
    assert "sk-lab-0123" not in text
    assert "Prometheus" not in text  # the lab runs none yet: nothing invented


def test_each_smoke_line_is_whole_and_accepted_by_smoke(tmp_path: Path) -> None:
    key = tmp_path / "lab-api-key"
    key.write_text("sk-lab-x")
    lines = [line.strip() for line in report(key, width=40).splitlines() if " smoke " in line]
    assert len(lines) == len(NODES)  # one per node, each on one line even at 40 columns
    for line, node in zip(lines, NODES, strict=True):
        argv = shlex.split(line)
        assert argv[0] == program() and argv[1:3] == ["smoke", node["endpoint"]]
        assert argv[argv.index("--api-key-file") + 1] == str(key)
    assert shlex.split(lines[1])[4] == "/srv/profiles/my profile.yaml"  # a file profile survives the shell
    # What smoke makes of the printed options: the built-in profile loads, the key file is read, and the node (a
    # closed port here) is reported as not reachable (exit 2), not as a usage error.
    argv = shlex.split(smoke_line("http://127.0.0.1:9", "cpu-lab", key))
    result = CliRunner().invoke(app, [*argv[1:], "--timeout", "0"])
    assert result.exit_code == 2, result.output
    assert "not healthy within 0 s" in result.output


def test_prometheus_is_printed_when_given() -> None:
    text = report(None, prometheus="http://172.31.254.1:9090")
    assert "Prometheus: http://172.31.254.1:9090 (alerts: http://172.31.254.1:9090/alerts)" in text
    assert "API key" not in text and "--api-key-file" not in text


def test_the_key_file_is_the_one_the_lab_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_fleet.lab.fleet import lab_api_key

    monkeypatch.setenv("VLLM_FLEET_CACHE", str(tmp_path))
    assert lab_api_key_file() == tmp_path / "lab-api-key"
    assert lab_api_key() == lab_api_key_file().read_text().strip()
