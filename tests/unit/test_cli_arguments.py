"""Each bad argument, path or input file named in issue 25 is one line naming the argument, file or field, with the
documented exit code and no traceback; and the last-resort guard turns a bug into exit 70, one line."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vllm_fleet.audit.waivers import load_waivers
from vllm_fleet.catalog import hardware_import as hi
from vllm_fleet.cli import commands as cli
from vllm_fleet.profiles.migrate import migrate
from vllm_fleet.trust.user_yaml import InputFileError

CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback there
QUERY = "index, name, memory.total [MiB], compute_cap, driver_version\n0, NVIDIA L40S, 46068 MiB, 8.9, 550.54\n"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    # typer draws usage errors in a box that wraps: compare the words
    return result.exit_code, " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("x\n")
    return path


def test_junit_that_is_a_directory(tmp_path: Path) -> None:
    code, text = run("smoke", CLOSED, "-p", "cpu-lab", "--junit", str(tmp_path))
    assert code == 2 and "--junit" in text and "is a directory" in text


def test_junit_in_a_missing_folder(tmp_path: Path) -> None:
    code, text = run("metrics", "check", str(tmp_path / "m"), "-p", "cpu-lab", "--junit", str(tmp_path / "no/j.xml"))
    assert code == 2 and "--junit" in text and "does not exist" in text


def test_missing_api_key_file(tmp_path: Path) -> None:
    for command in ("smoke", "bench"):
        code, text = run(command, CLOSED, "-p", "cpu-lab", "--api-key-file", str(tmp_path / "none"))
        assert code == 2 and "--api-key-file" in text and "does not exist" in text, (command, text)


def test_api_key_file_too_large(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"k" * (cli.MAX_SECRET_BYTES + 1))
    code, text = run("smoke", CLOSED, "-p", "cpu-lab", "--api-key-file", str(big), "--timeout", "0")
    assert code == 2 and "--api-key-file" in text and "larger than" in text


def test_plot_into_a_missing_folder(tmp_path: Path) -> None:
    code, text = run("bench", CLOSED, "-p", "cpu-lab", "--plot", str(tmp_path / "no" / "p.png"))
    assert code == 2 and "--plot" in text and "does not exist" in text


def test_out_that_is_a_file(a_file: Path) -> None:
    code, text = run("monitoring", "-p", "cpu-lab", "--out", str(a_file))
    assert code == 2 and "--out" in text and "not a directory" in text
    code, text = run("monitoring", "-p", "cpu-lab", "--out", str(a_file / "below"))
    assert code == 2 and "--out" in text and "is a file" in text
    code, text = run("hardware", "import", str(a_file), "--out", str(a_file.parent))
    assert code == 2 and "--out" in text and "is a directory" in text
    code, text = run("audit", "--out", str(a_file / "below"), "--evidence", str(a_file.parent))
    assert code == 2 and "--out" in text and "is a file" in text


@pytest.mark.parametrize("option", ["--host-timeout", "--request-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_audit_timeouts_are_finite(tmp_path: Path, option: str, value: str) -> None:
    code, text = run("audit", "--out", str(tmp_path), "--evidence", str(tmp_path), option, value)
    assert code == 2 and option in text and ("finite" in text or "greater than or equal to 1" in text), text


@pytest.mark.parametrize("bad", ["a-dir", "missing"])
def test_profile_file_paths(tmp_path: Path, bad: str) -> None:
    (tmp_path / "a-dir").mkdir()
    code, text = run("plan", "-p", str(tmp_path / bad))
    assert code == 1 and str(tmp_path / bad) in text


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_smoke_timeout(value: str) -> None:
    code, text = run("smoke", CLOSED, "-p", "cpu-lab", "--timeout", value)
    assert code == 2 and "--timeout" in text


@pytest.mark.parametrize("command", ["drain", "ready"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_router_wait(tmp_path: Path, command: str, value: str) -> None:
    code, text = run("router", "--haproxy-socket", str(tmp_path / "s"), command, "web1", "--wait", value)
    assert code == 2 and "--wait" in text


@pytest.mark.parametrize("levels", ["0", "-1", "abc", "nan", "1,,0", ",", "5000", "１"])
def test_bench_concurrency(levels: str) -> None:
    code, text = run("bench", CLOSED, "-p", "cpu-lab", "--concurrency", levels)
    assert code == 2 and "--concurrency" in text


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (("bench", CLOSED, "-p", "cpu-lab"), "--max-tokens"),
        (("bench", CLOSED, "-p", "cpu-lab"), "--requests-per-client"),
        (("smoke", CLOSED, "-p", "cpu-lab"), "--max-tokens"),
        (("smoke", CLOSED, "-p", "cpu-lab"), "--requests"),
        (("plan", "-p", "cpu-lab"), "--context"),
        (("up",), "--hosts"),
        (("lab", "up"), "--hosts"),
    ],
)
@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_counts_at_least_one(command: tuple[str, ...], option: str, value: str) -> None:
    code, text = run(*command, option, value)
    assert code == 2 and option in text


@pytest.mark.parametrize("option", ["--bandwidth-gb-s", "--bf16-tflops", "--fp8-tflops"])
@pytest.mark.parametrize("value", ["0", "-5", "inf", "nan"])
def test_hardware_figures(tmp_path: Path, option: str, value: str) -> None:
    query = tmp_path / "q.csv"
    query.write_text(QUERY)
    code, text = run("hardware", "import", str(query), option, value)
    assert code == 2 and option in text and "positive finite" in text
    with pytest.raises(hi.HardwareImportError, match=re.escape(option)):
        kwargs = {option.removeprefix("--").replace("-", "_"): float(value)}
        hi.import_hardware(QUERY, **kwargs)  # type: ignore[arg-type]


def test_hardware_csv_beyond_the_field_limit(tmp_path: Path) -> None:
    query = tmp_path / "q.csv"
    query.write_text(
        'index, name, memory.total, compute_cap\n0, "' + "x" * (csv.field_size_limit() + 1) + '", 1, 8.9\n'
    )
    code, text = run("hardware", "import", str(query))
    assert code == 1 and str(query) in text and "not nvidia-smi's CSV" in text


def test_hardware_query_size_bounded(tmp_path: Path) -> None:
    query = tmp_path / "q.csv"
    query.write_bytes(QUERY.encode() + b" " * hi.MAX_BYTES)
    code, text = run("hardware", "import", str(query))
    assert code == 1 and "more than nvidia-smi writes" in text


@pytest.mark.parametrize("what", ["missing", "a-dir"])
def test_hardware_query_unreadable(tmp_path: Path, what: str) -> None:
    (tmp_path / "a-dir").mkdir()
    code, text = run("hardware", "import", str(tmp_path / what))
    assert code == 1 and str(tmp_path / what) in text and "cannot read" in text


@pytest.mark.parametrize(
    ("url", "named"),
    [("notaurl", "notaurl"), ("http://[::1", "http://[::1"), ("http://127.0.0.1:99999", "99999")],
)
def test_malformed_url(url: str, named: str) -> None:
    code, text = run("smoke", url, "-p", "cpu-lab", "--timeout", "0")
    assert code == 2 and named in text


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("vllm serve m --speculative-config '[1,2]'", "--speculative-config '[1,2]': a JSON object is wanted"),
        ("vllm serve m --speculative-config '{bad'", "--speculative-config '{bad': not JSON"),
        ("vllm serve m --max-num-seqs abc", "--max-num-seqs 'abc': not a whole number"),
        ("vllm serve m --gpu-memory-utilization nan", "--gpu-memory-utilization 'nan': not a finite number"),
        ("vllm serve m --bogus", "--bogus is not a vLLM argument"),
        ("vllm serve 'm", "the command line: No closing quotation"),
    ],
)
def test_migrate_names_the_flag(command: str, named: str) -> None:
    code, text = run("migrate", command, "--vllm-version", "0.32.0", "--hardware", "rtx4090")
    assert code == 1 and named in text
    with pytest.raises(ValueError, match=re.escape(named)):
        migrate(command, "0.32.0", "rtx4090")


BUCKETS = "name: bk\nhardware: cpu-lab\nvllm_version: 0.32.0\nmodel: {model: vllm-fleet/tiny-llama-lab}\n"


@pytest.mark.parametrize(
    ("buckets", "why"),
    [
        ("[0.1, abc, 1]", "[1]: 'abc' is not a finite number"),
        ("[0.1, .nan]", "[1]: 'nan' is not a finite number"),
        ("[0.5, 0.1]", "bounds must increase strictly"),
        ("[]", "a non-empty list"),
    ],
)
def test_histogram_buckets_refused_by_validate_and_monitoring(tmp_path: Path, buckets: str, why: str) -> None:
    profile = tmp_path / "bk.yaml"
    profile.write_text(BUCKETS + f"extra_args:\n  custom_histogram_buckets: {{time_to_first_token: {buckets}}}\n")
    field = "extra_args: custom_histogram_buckets['time_to_first_token']"
    code, text = run("validate", str(profile))
    assert code == 1 and field in text and why in text
    code, text = run("monitoring", "-p", str(profile), "--out", str(tmp_path / "m"))
    assert code == 2 and field in text and why in text


def test_waiver_expiring_on_no_date(tmp_path: Path) -> None:
    waivers = tmp_path / "waivers.yaml"
    waivers.write_text(
        "- {check: VF-UNIT-EXPOSURE, reason: ticket SEC-1, expires: 2027-03-31}\n"
        "- {check: VF-UNIT-EXPOSURE, reason: ticket SEC-2, expires: 2027-02-30}\n"
    )
    with pytest.raises(InputFileError) as caught:
        load_waivers(waivers)
    assert str(caught.value).startswith(f"{waivers}: (yaml): line 2, column ")
    assert "'2027-02-30'" in str(caught.value) and "\n" not in str(caught.value)


def test_an_unexpected_exception_is_one_line_and_exit_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom() -> None:
        raise RuntimeError("a bug\x1b[2J")

    monkeypatch.setattr(cli, "builtin_profiles", boom)
    monkeypatch.delenv("VLLM_FLEET_DEBUG", raising=False)
    with pytest.raises(SystemExit) as caught:
        cli.app(["profiles"], prog_name="vllm-fleet")
    assert caught.value.code == cli.EX_SOFTWARE
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "vllm-fleet: internal error: RuntimeError: a bug\\x1b[2J (please report; rerun with VLLM_FLEET_DEBUG=1 for "
        "the traceback)"
    ]
    monkeypatch.setenv("VLLM_FLEET_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.app(["profiles"], prog_name="vllm-fleet")


def test_usage_errors_keep_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.app(["plan", "--no-such-option"], prog_name="vllm-fleet")
    assert caught.value.code == 2 and "Traceback" not in capsys.readouterr().err
