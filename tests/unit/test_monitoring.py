"""`vllm-fleet monitoring`: targets, rules and dashboards generated from the metric table (no promtool needed;
tests/unit/test_monitoring_promtool.py has Prometheus judge the rules)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.monitoring_samples import PROFILES, fleet
from vllm_fleet.cli.commands import app
from vllm_fleet.monitoring import MonitoredNode, profile_scopes, scopes_of, write_monitoring
from vllm_fleet.monitoring import series as mseries
from vllm_fleet.monitoring.alerts import ALERTS
from vllm_fleet.monitoring.buckets import le_matcher, slo_bucket
from vllm_fleet.monitoring.drift import desired_labels
from vllm_fleet.monitoring.rules import FLEET_FILE, release_file, rule_set
from vllm_fleet.monitoring.signals import release_metrics
from vllm_fleet.monitoring.targets import SENTINEL_TARGETS_FILE, TARGETS_FILE
from vllm_fleet.probes.smoke_checks import cache_config_expectations
from vllm_fleet.profiles.model import CacheConfig
from vllm_fleet.vllm import metrics_table

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
NAME = re.compile(r"(?<![\w:])(vllm(?:_fleet)?:[A-Za-z0-9_:]+)")


def _write(tmp_path: Path, scopes: Any = None, nodes: Any = None) -> Path:
    if scopes is None:
        nodes = [t.node for t in fleet()]
        scopes = scopes_of(nodes)
    write_monitoring(tmp_path, scopes, nodes)
    return tmp_path


def _rule_files(out: Path) -> dict[str, dict[str, Any]]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted((out / "rules").glob("*.yml"))}


def _rules(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in data["groups"] for r in g["rules"]]


def _panel_exprs(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def stale_names(expr: str, version: str | None, recorded: set[str]) -> set[str]:
    """Names ``expr`` queries that nothing exposes: a ``vllm:`` name that is not an exposed sample of ``version``
    in the table (any ``vllm:`` name where no release applies), or a ``vllm_fleet:`` series no rule records."""
    out = set()
    for name in NAME.findall(expr):
        if name.startswith("vllm_fleet:"):
            if name not in recorded:
                out.add(name)
        else:
            family = metrics_table.family_of_sample(name, version) if version else None
            if family is None or name not in family.samples:  # a family name is not a sample: X_total, X_bucket…
                out.add(name)
    return out


def _recorded(files: dict[str, dict[str, Any]]) -> set[str]:
    return {r["record"] for data in files.values() for r in _rules(data) if "record" in r}


def test_every_queried_name_exists_for_its_release(tmp_path: Path) -> None:
    out = _write(tmp_path)
    files = _rule_files(out)
    recorded = _recorded(files)
    assert set(files) == {release_file("0.32.0"), FLEET_FILE}
    vllm_names = set()
    for name, data in files.items():
        version = name.removeprefix("vllm-").removesuffix(".rules.yml") if name != FLEET_FILE else None
        for rule in _rules(data):
            assert stale_names(rule["expr"], version, recorded) == set(), rule
            vllm_names |= {n for n in NAME.findall(rule["expr"]) if n.startswith("vllm:")}
    assert FLEET_FILE in files and not any(
        n.startswith("vllm:") for r in _rules(files[FLEET_FILE]) for n in [r["expr"]]
    )
    # The families the issue names, as the table spells them for 0.32.0 (the fixed preemption name included).
    for sample in ("vllm:num_preemptions_total", "vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds_bucket"):
        assert sample in vllm_names
    for board in (out / "dashboards").glob("*.json"):
        for expr in _panel_exprs(json.loads(board.read_text())):
            assert stale_names(expr, None, recorded) == set(), (board.name, expr)


def test_a_stale_name_is_caught() -> None:
    recorded = {mseries.KV_CACHE_USAGE}
    # Renamed or removed in vLLM: each would make a panel or an alert silently empty on 0.32.0.
    for expr in (
        "rate(vllm:num_preemptions[5m])",  # the counter's sample is _total
        "vllm:gpu_cache_usage_perc",  # removed in 0.12.0
        "histogram_quantile(0.95, rate(vllm:time_per_output_token_seconds_bucket[5m]))",  # removed in 0.15.0
        "vllm_fleet:kv_cache_usage:ratio",  # no rule records it
    ):
        assert stale_names(expr, "0.32.0", recorded), expr
    assert stale_names("vllm:gpu_cache_usage_perc", "0.9.1", recorded) == set()


def test_rules_follow_each_release_names(tmp_path: Path) -> None:
    """Three releases, three spellings of the same signals; every name exists in its own release."""
    base = PROFILES["cpu-spec"]
    profiles = [
        base.model_copy(update={"vllm_version": v, "name": f"p-{v.replace('.', '-')}"})
        for v in ("0.9.1", "0.10.1", "0.32.0")
    ]
    out = _write(tmp_path, profile_scopes(profiles))
    files = _rule_files(out)
    recorded = _recorded(files)
    exprs = {name: " ".join(r["expr"] for r in _rules(data)) for name, data in files.items()}
    for v in ("0.9.1", "0.10.1", "0.32.0"):
        for rule in _rules(files[release_file(v)]):
            assert stale_names(rule["expr"], v, recorded) == set(), (v, rule)
    assert "vllm:gpu_cache_usage_perc" in exprs[release_file("0.9.1")]
    assert "vllm:kv_cache_usage_perc" in exprs[release_file("0.10.1")]
    assert "vllm:time_per_output_token_seconds_bucket" in exprs[release_file("0.10.1")]
    assert "vllm:inter_token_latency_seconds_bucket" in exprs[release_file("0.32.0")]
    # Before 0.11.0 there is no per-request TPOT histogram: the spec profile's ITL SLO is judged on ITL there.
    assert "vllm:request_time_per_output_token_seconds" not in exprs[release_file("0.10.1")]
    assert "vllm_fleet:tpot_seconds_bucket" in exprs[release_file("0.32.0")]


def test_spec_rules_only_where_a_profile_speculates(tmp_path: Path) -> None:
    out = _write(tmp_path, profile_scopes([PROFILES["cpu-scraped"]]))
    text = (out / "rules" / release_file("0.32.0")).read_text()
    assert "spec_decode" not in text and "VllmSpecAcceptanceLow" not in text
    node = json.loads((out / "dashboards" / "vllm-fleet-node.json").read_text())
    assert not any("spec_" in e or "tpot" in e for e in _panel_exprs(node))
    old = PROFILES["cpu-spec"].model_copy(update={"vllm_version": "0.8.2"})
    notes = rule_set(profile_scopes([old])).notes
    assert any("VllmSpecAcceptanceLow" in n.message and "0.8.2" in n.message for n in notes)


def test_targets_carry_the_labels_and_no_key(tmp_path: Path) -> None:
    out = _write(tmp_path)
    groups = json.loads((out / "targets" / TARGETS_FILE).read_text())
    assert len(groups) == len(fleet())
    first = groups[0]
    assert first["targets"] == ["10.0.0.10:8000"]
    assert set(first["labels"]) == set(mseries.TARGET_LABELS)
    assert first["labels"]["host"] == "ok" and first["labels"]["vllm_version"] == "0.32.0"
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    job, sentinel = config["scrape_configs"]
    assert job["job_name"] == mseries.JOB and job["file_sd_configs"] == [{"files": [f"targets/{TARGETS_FILE}"]}]
    assert sentinel["job_name"] == mseries.SENTINEL_JOB
    assert sentinel["file_sd_configs"] == [{"files": [f"targets/{SENTINEL_TARGETS_FILE}"]}]
    for j in (job, sentinel):
        assert not {"authorization", "bearer_token", "bearer_token_file", "basic_auth", "oauth2"} & set(j)
    # Each node's sentinel, on its own port, with the node's labels: the sentinel alerts join on them.
    sentinels = json.loads((out / "targets" / SENTINEL_TARGETS_FILE).read_text())
    assert [g["labels"] for g in sentinels] == [g["labels"] for g in groups]
    assert sentinels[0]["targets"] == ["10.0.0.10:9180"]
    for name in (TARGETS_FILE, SENTINEL_TARGETS_FILE):
        text = (out / "targets" / name).read_text().lower()
        assert not any(k in text for k in ("key", "token", "bearer", "password")), text


def test_metrics_path_is_not_behind_the_api_key() -> None:
    """vLLM's AuthenticationMiddleware guards these prefixes only (checked in the real source when vLLM is here)."""
    from vllm_fleet.vllm.check import find_vllm_python

    python = find_vllm_python()
    if python is None:
        pytest.skip("no vLLM venv (tools/vllm_cpu_env.sh): the guarded prefixes cannot be read from its source")
    code = "from vllm.entrypoints.serve.middleware.authenticate import GUARDED_PREFIX as G; print(repr(G))"
    prefixes = ast.literal_eval(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert not any("/metrics".startswith(p) for p in prefixes)


def test_slo_buckets() -> None:
    m = release_metrics("0.32.0")
    prof = PROFILES["cpu-scraped"]
    exact = slo_bucket(prof, m, "ttft", 0.5)
    assert exact.exact and exact.bucket_s == 0.5
    between = slo_bucket(prof, m, "ttft", 0.3)
    assert between.bucket_s == 0.5 and between.note is not None
    assert "0.25 < SLO < 0.5" in between.note and '"time_to_first_token":[' in between.note and ",0.3," in between.note
    beyond = slo_bucket(prof, m, "itl", 100.0)
    assert beyond.bucket_s == 80.0 and "earlier than the SLO" in (beyond.note or "")
    old = slo_bucket(prof, release_metrics("0.31.0"), "ttft", 0.3)
    assert old.note is not None and "has no --custom-histogram-buckets: 0.32.0 added it" in old.note
    custom = prof.model_copy(
        update={"extra_args": {"custom_histogram_buckets": {"time_to_first_token": [0.1, 0.3, 1]}}}
    )
    mine = slo_bucket(custom, m, "ttft", 0.3)
    assert mine.exact and mine.source == "the profile's custom_histogram_buckets['time_to_first_token']"
    assert le_matcher(1.0) == '=~"1\\\\.0|1"' and le_matcher(0.025) == '=~"0\\\\.025"'


def test_drift_labels_are_spelt_as_vllm_prints_them() -> None:
    m = release_metrics("0.32.0")
    base = PROFILES["cpu-scraped"]
    cache = base.cache.model_copy(update={"kv_cache_memory_bytes": None, "gpu_memory_utilization": 1.0})
    prof = base.model_copy(update={"cache": cache})
    want, unseen = desired_labels(prof, m)
    assert cache_config_expectations(prof, None)["gpu_memory_utilization"] == "1"  # the smoke gate's number
    assert want["gpu_memory_utilization"] == "1.0" and unseen == []  # str(1.0), as vLLM's metrics_info() writes it
    assert want["enable_prefix_caching"] == "True" and want["cache_dtype"] == "auto"


def test_scopes_split_a_profile_by_host_when_overrides_differ(tmp_path: Path) -> None:
    base = PROFILES["cpu-tight"]
    loose = base.model_copy(update={"slo": base.slo.model_copy(update={"ttft_p95_s": 1.0})})
    nodes = [
        MonitoredNode(
            n,
            f"10.1.0.{i}:8000",
            "cpu-lab",
            base.name,
            p.model_dump(mode="json", exclude_none=True),
            "0.32.0",
            "0" * 64,
        )
        for i, (n, p) in enumerate((("gpu-a", base), ("gpu-b", base), ("gpu-c", loose)))
    ]
    scopes = scopes_of(nodes)
    assert [s.hosts for s in scopes] == [("gpu-a", "gpu-b"), ("gpu-c",)]
    assert all(s.by_host for s in scopes)
    assert scopes[0].selector() == '{job="vllm", vllm_version="0.32.0", profile="cpu-tight", host=~"gpu-a|gpu-b"}'
    alone = scopes_of(nodes[:2])
    assert not alone[0].by_host and "host" not in alone[0].selector()
    if shutil.which("promtool"):  # the by-host rules are valid PromQL (dashed host names included)
        write_monitoring(tmp_path, scopes, nodes)
        for f in (tmp_path / "rules").glob("*.yml"):
            result = subprocess.run(["promtool", "check", "rules", str(f)], capture_output=True, text=True)
            assert result.returncode == 0, result.stdout + result.stderr


def test_dashboards_are_templated_and_chart_tpot_with_speculation(tmp_path: Path) -> None:
    out = _write(tmp_path)
    boards = {p.stem: json.loads(p.read_text()) for p in (out / "dashboards").glob("*.json")}
    assert set(boards) == {"vllm-fleet-overview", "vllm-fleet-node"}
    for board in boards.values():
        names = {v["name"] for v in board["templating"]["list"]}
        assert {"datasource", "host", "profile"} <= names
        exprs = _panel_exprs(board)
        assert exprs and all('host=~"$host' in e or "ALERTS" in e for e in exprs)
    node = _panel_exprs(boards["vllm-fleet-node"])
    for wanted in (mseries.quantile("ttft", 95), mseries.slo("ttft"), mseries.quantile("tpot", 95),
                   mseries.SPEC_ACCEPTANCE_RATIO, mseries.KV_CACHE_USAGE, mseries.PREEMPTIONS_INCREASE,
                   mseries.WAITING, mseries.REQUESTS_FINISHED_RATE, mseries.GENERATION_TOKENS_RATE):  # fmt: skip
        assert any(wanted in e for e in node), wanted


def test_each_alert_has_its_runbook_section() -> None:
    doc = (ROOT / "docs" / "monitoring.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", doc, re.M)}
    nodes = [t.node for t in fleet()]
    rules = [r for f in rule_set(scopes_of(nodes)).files for r in f.rules() if "alert" in r]
    assert {r["alert"] for r in rules} == set(ALERTS)
    for r in rules:
        ann = r["annotations"]
        assert ann["summary"] and "{{ $value" in ann["description"], r["alert"]
        page, anchor = ann["runbook_url"].split("#")
        assert page == "docs/monitoring.md" and anchor in anchors, r["alert"]
    assert "slo-buckets" in anchors and "scraping-and-the-api-key" in anchors


def test_cli_writes_a_stack_fleet(tmp_path: Path) -> None:
    result = runner.invoke(app, ["monitoring", str(ROOT / "Pulumi.example.yaml"), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    groups = json.loads((tmp_path / "targets" / TARGETS_FILE).read_text())
    assert [g["labels"]["host"] for g in groups] == ["gpu-4090-a", "gpu-4090-b", "gpu-l40-a"]
    assert all(len(g["labels"]["config_hash"]) == 64 for g in groups)
    notes = (tmp_path / "NOTES.md").read_text()
    assert "SLO 0.8 s is not a boundary" in notes  # l40's TTFT SLO sits between the 0.75 and 1.0 buckets


def test_cli_profiles_alone_write_no_targets(tmp_path: Path) -> None:
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / TARGETS_FILE).write_text("[]")  # from an earlier fleet run: removed
    result = runner.invoke(app, ["monitoring", "--profile", "cpu-lab", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "targets" / TARGETS_FILE).exists()
    assert (tmp_path / "rules" / release_file("0.32.0")).is_file()
    assert "scrape_configs" not in yaml.safe_load((tmp_path / "prometheus.yml").read_text())


def test_cli_bad_input_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["monitoring", "--profile", "no-such-profile", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  vllm-fleet:fleet:\n    hosts: []\n")
    result = runner.invoke(app, ["monitoring", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_profile_field_types_used_for_drift_are_the_profiles() -> None:
    """desired_labels() relies on CacheConfig's label names being the cache section's fields (but cache_dtype)."""
    keys = set(cache_config_expectations(PROFILES["cpu-scraped"], None)) - {"cache_dtype"}
    assert keys <= set(CacheConfig.model_fields)
