"""Node text is data on every surface: the terminal table, the JUnit reports, the audit's YAML parse.

Every control character a node could send, escape sequences, lone surrogates (undecodable bytes) and Rich markup
go in as a host name, a check detail or a model id; what comes out is escaped text, well-formed XML and, for a
YAML alias bomb in a node's config file or argv, one finding of that host in bounded time and memory."""

from __future__ import annotations

import base64
import io
import re
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from xml.etree import ElementTree as ET

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.audit_samples import b64, evidence, sample_desired
from vllm_fleet.audit.reconcile import Finding, judge, parse_argv
from vllm_fleet.audit.report import print_table as print_findings
from vllm_fleet.audit.report import to_junit
from vllm_fleet.cli.commands import app
from vllm_fleet.probes.smoke import SmokeResult
from vllm_fleet.probes.smoke_checks import Check
from vllm_fleet.project.tables import print_table, table
from vllm_fleet.trust.node_text import printable, xml_safe

CONTROLS = [chr(c) for c in (*range(0x00, 0x20), *range(0x7F, 0xA0))]
SEQUENCES = ["\x1b[31m", "\x1b]0;title\x07", "\x1b[2J\x1b[H", "\x9b31m", "\r\x1b[K"]
SURROGATES = ["\udcff", "\udc80", "\ud800"]
MARKUP = ["[/x]", "[bold]", "[/]", "[link=http://evil]x[/link]"]
HOSTILE = "".join(CONTROLS) + "".join(SEQUENCES) + "".join(SURROGATES) + "".join(MARKUP)
# What may not be written to a terminal or a file from data: every C0 but newline, DEL, C1, lone surrogates.
FORBIDDEN = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
runner = CliRunner()
T = TypeVar("T")


def test_printable_escapes_every_control_and_keeps_text() -> None:
    for c in CONTROLS:
        shown = printable(f"a{c}b")
        assert shown == f"a\\x{ord(c):02x}b"
    assert printable("\udcff\udc80\ud800") == "\\xff\\x80\\ud800"  # surrogateescape's bytes as bytes
    assert printable("\u202egnp.exe") == "\\u202egnp.exe"  # a bidi override cannot reorder the line
    plain = "gpu-01 café 東京 🙂 C:\\path [/x]"
    assert printable(plain) == plain
    assert printable("a\nb", newlines=True) == "a\nb" and printable("a\nb") == "a\\x0ab"


def test_xml_safe_is_legal_xml_for_every_code_point_class() -> None:
    text = HOSTILE + "\ufffe\uffff\t\n\r<&\"'"
    safe = xml_safe(text)
    assert "\\x1b[31m" in safe and "\\xff" in safe and "\\ufffe" in safe
    for keep in "\t\n\r<&":
        assert keep in safe
    root = ET.fromstring(ET.tostring(ET.Element("t", a=safe), encoding="unicode"))
    assert root.get("a") == safe  # the attribute round-trips: nothing was lost or mangled


def _hostile_table() -> object:
    tbl = table("host", "check", "detail", title=f"title {SEQUENCES[1]} [/x]")
    tbl.add_row(f"gpu-01{SEQUENCES[0]}[/x]", f"model {MARKUP[1]}", HOSTILE)
    return tbl


@pytest.mark.parametrize("terminal", [False, True])
def test_table_cells_are_data(terminal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    buffer = io.StringIO()
    console = Console(record=True, file=buffer, force_terminal=terminal, color_system="standard" if terminal else None)
    print_table(console, _hostile_table())  # type: ignore[arg-type]
    output = buffer.getvalue()
    for sequence in SEQUENCES:
        assert sequence not in output
        assert printable(sequence) in output.replace("\n", "") or terminal  # folded cells may split a sequence
    assert "[/x]" in output and "[bold]" in output and "[link=http://evil]x[/link]" in output
    assert "\\x1b[31m" in output and "\\xff" in output
    if terminal:  # our own styles are SGR sequences; nothing else is
        stripped = re.sub(r"\x1b\[[0-9;]*m", "", output)
        assert not FORBIDDEN.search(stripped), repr(stripped)
    else:
        assert not FORBIDDEN.search(output), repr(output)


def _finding(host: str, actual: str, status: str = "failed") -> Finding:
    return Finding(
        id=f"VF-VER-LIVE@{host}",
        host=host,
        check="VF-VER-LIVE",
        severity="high",
        status=status,  # type: ignore[arg-type]
        expected="0.32.0",
        actual=actual,
        layer="/version",
        remediation="converge",
        title="the running vLLM is the profile's release",
    )


def test_audit_table_and_junit_take_any_host_and_version() -> None:
    findings = [
        _finding(f"gpu{SEQUENCES[0]}[/x]", HOSTILE),
        _finding("gpu-02\udcfe", "\x00\x1b]0;owned\x07", status="error"),
    ]
    buffer = io.StringIO()
    print_findings(Console(record=True, file=buffer, width=300), findings, all_checks=True)
    output = buffer.getvalue()
    assert not FORBIDDEN.search(output), repr(output)
    assert "gpu\\x1b[31m[/x]" in output and "\\x1b]0;owned\\x07" in output
    assert "failed" in output and "error" in output  # the styled status cells are still there, as text

    root = ET.fromstring(to_junit(findings))
    hosts = [suite.get("name") for suite in root.iter("testsuite")]
    assert "gpu\\x1b[31m[/x]" in hosts and "gpu-02\\xfe" in hosts
    messages = " ".join(e.get("message", "") for e in root.iter() if e.tag in ("failure", "error"))
    assert "\\x1b]0;owned\\x07" in messages and "\\x00" in messages


def test_smoke_junit_is_well_formed_for_any_detail() -> None:
    result = SmokeResult(url=f"http://node{SEQUENCES[0]}:8000", profile=f"p{SURROGATES[0]}", reason=HOSTILE)
    result.checks = [
        Check("model", "fail", f"serves ['{MARKUP[0]}{SEQUENCES[1]}']"),
        Check("families", "pass", "".join(CONTROLS)),
        Check("itl", "skip", "\udc9b[2J"),
    ]
    root = ET.fromstring(result.junit())
    assert root.get("name") == "vllm-fleet smoke http://node\\x1b[31m:8000"
    failure = next(root.iter("failure"))
    assert failure.get("message") == "serves ['[/x]\\x1b]0;title\\x07']"
    out = next(root.iter("system-out")).text or ""
    assert "\\x00" in out and "\\x1b" in out and "\\x9f" in out
    assert next(root.iter("skipped")).get("message") == "\\x9b[2J"


def test_cli_errors_escape_what_they_name(tmp_path: Path) -> None:
    missing = tmp_path / "scrape\x1b[31m[/x].txt"
    result = runner.invoke(app, ["metrics", "check", str(missing), "--profile", "cpu-lab"])
    assert result.exit_code == 2
    assert "\x1b" not in result.output and "scrape\\x1b[31m[/x].txt" in result.output.replace("\n", "")


BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def _bounded(run: Callable[[], T]) -> tuple[T, float, int]:
    """``run()``, the seconds it took and its peak of traced memory."""
    tracemalloc.start()
    began = time.monotonic()
    try:
        value = run()
        return value, time.monotonic() - began, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_alias_bomb_in_the_config_file_is_that_hosts_error(data_dir: Path) -> None:
    desired = sample_desired()
    findings, seconds, peak = _bounded(lambda: judge(desired, evidence(desired, data_dir, config=b64(BOMB))))
    assert seconds < 20 and peak < 64 * 1024**2  # hang and memory guards: expanded, the bomb is 10^9 nodes
    run = [f for f in findings if f.check.startswith("VF-RUN-CONFIG")]
    assert len(run) == 1 and run[0].status == "error"
    assert "node1/remote/config" in run[0].actual and "alias" in run[0].actual


@pytest.mark.parametrize("config", [b"[1, 2]\n", b"key: [unclosed\n", b"a: 1\na: 2\n", b"bad: \xff\x1b\n"])
def test_a_config_file_that_is_not_a_mapping_of_flags_is_an_error_finding(data_dir: Path, config: bytes) -> None:
    desired = sample_desired()
    ev = evidence(desired, data_dir, config=base64.b64encode(config).decode() + "\n")
    findings = judge(desired, ev)
    run = [f for f in findings if f.check.startswith("VF-RUN-CONFIG")]
    assert [f.status for f in run] == ["error"], run
    assert run[0].actual.startswith("node1/remote/config: ")


def test_argv_values_that_are_not_yaml_stay_strings() -> None:
    bomb = "[" + ", ".join(["*a"] * 3) + "]"
    argv = ["vllm", "serve", "--max-num-seqs", "[unclosed", "--served-model-name", "m\udcff", "--kv-cache-dtype", bomb]
    (_, flags), seconds, peak = _bounded(lambda: parse_argv(argv, "0.32.0"))
    assert flags["max-num-seqs"] == "[unclosed" and flags["served-model-name"] == "m\udcff"
    assert flags["kv-cache-dtype"] == bomb
    assert seconds < 10 and peak < 16 * 1024**2
    (_, typed), _, _ = _bounded(lambda: parse_argv(["vllm", "serve", "--max-num-seqs", "8"], "0.32.0"))
    assert typed["max-num-seqs"] == 8
