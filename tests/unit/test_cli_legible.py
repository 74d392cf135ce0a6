"""Tables stay legible in a file and a narrow terminal: nothing cut, no box-drawing, wrapped rather than cut."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vllm_fleet.cli.commands import app
from vllm_fleet.profiles.loader import builtin_profiles

runner = CliRunner()
BOX_DRAWING = re.compile("[\u2500-\u257f]")
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def assert_legible(output: str, width: int | None) -> None:
    """Every profile's name and model whole on a line, every word of its description present, no box-drawing
    characters, and (for a width) no line longer than it."""
    lines = output.splitlines()
    assert not BOX_DRAWING.search(output), output
    words = set(" ".join(lines).replace("|", " ").split())
    for p in builtin_profiles():
        assert any(p.name in line.split() or f"| {p.name} " in line for line in lines), (p.name, output)
        assert any(p.model.model in line for line in lines), (p.model.model, output)
        assert set(p.description.split()) <= words, (p.description, output)
    if width is not None:
        assert max(len(line) for line in lines) <= width, output
    assert "…" not in output


def test_profiles_in_a_narrow_column_become_records() -> None:
    result = runner.invoke(app, ["profiles"], env={"COLUMNS": "60"})
    assert result.exit_code == 0
    assert_legible(result.stdout, 60)
    assert "  description  " in result.stdout  # one record per profile, column names as labels


def test_profiles_in_a_file_are_a_markdown_table_one_line_per_profile() -> None:
    result = runner.invoke(app, ["profiles"], env={"COLUMNS": None})
    assert result.exit_code == 0
    assert_legible(result.stdout, None)
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(builtin_profiles())  # the header and one row each: no wrapped cells
    for p in builtin_profiles():
        assert any(p.name in r and p.model.model in r and p.description in r for r in rows)


@pytest.mark.parametrize("columns", [None, "60"])
def test_profiles_piped_to_a_file_by_a_real_process(tmp_path: Path, columns: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns:
        env["COLUMNS"] = columns
    out = tmp_path / "profiles.txt"
    with out.open("w") as fh:
        subprocess.run([sys.executable, "-m", "vllm_fleet.cli", "profiles"], stdout=fh, env=env, check=True)
    text = out.read_text(encoding="utf-8")
    assert_legible(text, int(columns) if columns else None)
    assert "\x1b[" not in text  # no colour codes in a file


def test_profiles_in_a_narrow_terminal(tmp_path: Path) -> None:
    """A real terminal (a pty) 60 columns wide, no $COLUMNS: rich's own width detection."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 60, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_fleet.cli", "profiles"], stdin=child, stdout=child, stderr=child, env=env
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 0
    os.close(main)
    text = ANSI.sub("", b"".join(chunks).decode("utf-8")).replace("\r\n", "\n")
    assert_legible(text, 60)


def test_a_wrapping_table_keeps_each_word_whole() -> None:
    # The plan's table is wider than 60 columns but its longest words fit: a table whose cells wrap between words
    # (rich alone would fold `gpu_memory_utilization` mid-word to squeeze the widest column).
    result = runner.invoke(app, ["plan", "-p", "rtx4090-qwen2.5-7b-spec"], env={"COLUMNS": "60"})
    lines = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert lines and max(len(line) for line in lines) <= 60, result.stdout
    words = " ".join(lines).replace("|", " ").split()
    for word in ("gpu_memory_utilization", "torch", "149,472", "kv_heads"):
        assert word in words, result.stdout


def test_audit_table_prints_what_a_host_reported_whole_and_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from vllm_fleet.audit.reconcile import Finding
    from vllm_fleet.audit.report import print_table

    actual = "[bold]--max-num-seqs 64 --kv-cache-memory-bytes 67108864 --served-model-name tiny-llama-lab[/bold]"
    finding = Finding("VF-ARGV", "lab-1", "argv", "high", "failed", "--max-num-seqs 8", actual, "argv")
    monkeypatch.delenv("COLUMNS", raising=False)  # a file: as wide as the content
    buf = io.StringIO()
    print_table(Console(file=buf), [finding])
    assert actual in buf.getvalue()  # not cut at 60 characters, and markup-looking text is not rendered
