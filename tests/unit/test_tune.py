"""vllm-fleet tune without a lab: the workload and SLO options, the space and the planner's pruning, the noise rule,
the two searches over a synthetic landscape, the evidence, and one run's orchestration against a node double
(``FakeNode``: a test double of the tuned host's edge -- the router hook, rollout.yml and the client -- recording
what the session asked of it; the lab test in tests/converge/test_tune_lab.py runs the real ones)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from vllm_fleet.cli.commands import app
from vllm_fleet.probes.stream_client import StreamTiming
from vllm_fleet.profiles.loader import load_profile
from vllm_fleet.profiles.validate import check_file
from vllm_fleet.tune import node as node_mod
from vllm_fleet.tune.evidence import pareto, pareto_png, winner_yaml
from vllm_fleet.tune.node import Target, TuneError
from vllm_fleet.tune.noise import NoiseRule, better, clearly_worse
from vllm_fleet.tune.search import coordinate_descent, grid
from vllm_fleet.tune.session import Options, tune
from vllm_fleet.tune.space import Lever, Space, SpaceError, apply_point, derive_space, parse_levers, point_key, prune
from vllm_fleet.tune.trials import Level, Trial
from vllm_fleet.tune.workload import SLO, WorkloadError, parse_slo, parse_workload

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKIExBffbfYBXsaT5fHdWreey1Q9IW3hwQMERWb9y5AZ"


def fleet(n: int = 2) -> dict[str, Any]:
    return {
        "hosts": [
            {"name": f"n{i}", "address": f"10.9.0.{i}", "host_key": KEY, "hardware": "cpu-lab", "profile": "cpu-lab"}
            for i in range(1, n + 1)
        ]
    }


# --- workload and SLOs --------------------------------------------------------------------------------------------


def test_slo_from_the_option_and_the_profile() -> None:
    slo = parse_slo("itl_p95=200ms,error_rate=0.01", 5.0, 2.0)
    assert (slo.ttft_p95_s, slo.itl_p95_s, slo.error_rate) == (5.0, 0.2, 0.01)
    assert slo.sources == {"itl_p95": "--slo", "error_rate": "--slo", "ttft_p95": "the profile's slo"}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("itl_p95=fast", "itl_p95='fast': not a number of seconds"),
        ("itl_p95=-1", "positive number of seconds"),
        ("latency=1", "'latency': unknown"),
        ("error_rate=2", "share from 0 to 1"),
        ("itl_p95", "key=value pairs"),
    ],
)
def test_a_bad_slo_names_the_option_and_the_fix(text: str, words: str) -> None:
    with pytest.raises(WorkloadError, match="--slo") as e:
        parse_slo(text, None, None)
    assert words in str(e.value)


def test_no_slo_anywhere_is_refused() -> None:
    with pytest.raises(WorkloadError, match="no SLO"):
        parse_slo(None, None, None)


def test_random_prompts_are_the_same_for_every_candidate_and_sized_as_asked() -> None:
    w = parse_workload("input=32,output=8", [1, 4], 0, 2)
    a, b = w.batch(1024, 5, "0:4"), w.batch(1024, 5, "0:4")
    assert a == b and len(a) == 5
    assert all(len(r.prompt) == 32 and r.max_tokens == 8 for r in a)
    assert all(10 <= t < 1014 for r in a for t in r.prompt)
    assert w.batch(1024, 5, "1:4") != a  # another repeat, other prompts
    assert w.requests_at(4) == 16 and w.warmup_requests == 4


def test_a_dataset_is_read_as_data_and_bounded(tmp_path: Path) -> None:
    good = tmp_path / "d.jsonl"
    good.write_text('{"prompt": "{{ lookup(\'pipe\', \'id\') }}", "output_len": 5}\n{"prompt": "b"}\n')
    w = parse_workload(f"dataset={good},output=7", [2], 0, 1)
    assert [r.max_tokens for r in w.batch(100, 2, "x")] in ([5, 7], [7, 5])
    assert "{{ lookup('pipe', 'id') }}" in {r.prompt for r in w.batch(100, 4, "x")}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n')
    with pytest.raises(WorkloadError, match="line 1"):
        parse_workload(f"dataset={bad}", [2], 0, 1)
    with pytest.raises(WorkloadError, match="input= and dataset= together"):
        parse_workload(f"dataset={good},input=3", [2], 0, 1)
    with pytest.raises(WorkloadError, match="cannot be read"):
        parse_workload(f"dataset={tmp_path / 'none'}", [2], 0, 1)


# --- the space ----------------------------------------------------------------------------------------------------


def test_the_lab_space_has_the_levers_its_release_and_hardware_have() -> None:
    space = derive_space(load_profile("cpu-lab"), 4)
    names = [lv.name for lv in space.levers]
    assert names == ["max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "speculative"]
    assert any(n.startswith("kv_cache_dtype: ") and "no FP8" in n for n in space.notes)
    assert any(n.startswith("gpu_memory_utilization: no GPU") for n in space.notes)
    # Above the workload's 4 streams only the first value and the start's own are kept.
    assert dict((lv.name, lv.values) for lv in space.levers)["max_num_seqs"] == (1, 2, 4, 8)
    assert space.start == {"max_num_seqs": 8, "max_num_batched_tokens": 2048, "enable_chunked_prefill": True,
                           "speculative": "off"}  # fmt: skip


def test_gpu_memory_utilization_is_a_lever_only_where_the_release_makes_it_the_budget() -> None:
    gpu = load_profile("h200-llama3.1-70b-fp8")
    assert "gpu_memory_utilization" in [lv.name for lv in derive_space(gpu, 8).levers]
    newest = gpu.model_copy(update={"vllm_version": "0.34.0"})
    space = derive_space(newest, 8)
    assert "gpu_memory_utilization" not in [lv.name for lv in space.levers]
    assert any("extensible KV cache" in n for n in space.notes)


def test_levers_given_on_the_command_line() -> None:
    chosen = parse_levers(["max_num_seqs=4,2,2", "speculative=off,ngram:3"])
    assert chosen == {"max_num_seqs": (2, 4), "speculative": ("off", "ngram:3")}
    space = derive_space(load_profile("cpu-lab"), 4, chosen)
    assert [(lv.name, lv.values) for lv in space.levers] == [
        ("max_num_seqs", (2, 4, 8)),
        ("speculative", ("off", "ngram:3")),
    ]
    for bad, words in (
        (["max_num_seqs=0"], "not a value of max_num_seqs"),
        (["speculative=magic:3"], "not a value of speculative"),
        (["warp=1"], "unknown"),
        (["max_num_seqs"], "give its values"),
    ):
        with pytest.raises(SpaceError, match=words):
            parse_levers(bad)
    with pytest.raises(SpaceError, match="no FP8 units"):
        derive_space(load_profile("cpu-lab"), 4, parse_levers(["kv_cache_dtype=auto,fp8"]))


def test_a_point_applied_and_the_planner_pruning() -> None:
    lab = load_profile("cpu-lab")
    spec = apply_point(lab, {"speculative": "ngram:4", "max_num_seqs": 2})
    assert spec.speculative is not None and (spec.speculative.method, spec.speculative.num_speculative_tokens) == (
        "ngram",
        4,
    )
    assert spec.scheduler.max_num_seqs == 2 and spec.scheduler.max_num_batched_tokens == 2048
    assert apply_point(spec, {"speculative": "off"}).speculative is None
    assert prune(apply_point(lab, {"max_num_seqs": 2})) is None
    why = prune(apply_point(lab, {"max_num_batched_tokens": 256, "enable_chunked_prefill": False}))
    assert why is not None and why.startswith("planner: scheduler.max_num_batched_tokens") and "max_model_len" in why


# --- trials and the noise rule ------------------------------------------------------------------------------------


def level(concurrency: int, rate: float, itl: float, n: int = 40, seed: int = 0, spread: float = 0.05) -> Level:
    """A level of ``n`` requests of 32 tokens whose per-request throughput is about ``rate`` tok/s."""
    rng = random.Random(seed)
    lv = Level(concurrency)
    results: list[StreamTiming | str] = []
    for _ in range(n):
        per_req = max(rate * (1 + rng.gauss(0, spread)), 1e-3) / concurrency
        latency = 32 / per_req
        results.append(StreamTiming(32, 0.05, latency, tuple(itl * (1 + rng.gauss(0, spread)) for _ in range(31))))
    lv.add(results, sum(r.latency_s for r in results if isinstance(r, StreamTiming)) / concurrency)
    return lv


def trial(key: str, *levels: Level, status: str = "measured") -> Trial:
    return Trial(key, {"k": key}, status, levels=list(levels), repeats=1, number=1)  # type: ignore[arg-type]


SLO_ITL = SLO(ttft_p95_s=1.0, itl_p95_s=0.1)


def test_a_level_s_figures_and_its_slo_verdict() -> None:
    lv = level(4, 100.0, 0.05, seed=1)
    lv.add(["TimeoutError: "], 0.0)
    assert lv.requests == 41 and lv.errors == 1
    assert lv.violations(SLO_ITL) == {"error_rate": math.inf}
    assert not lv.violations(SLO(itl_p95_s=0.1, error_rate=0.05))
    assert lv.violations(SLO(itl_p95_s=0.01, error_rate=0.05))["itl_p95"] > 4
    assert 90 < lv.throughput < 110


def test_better_needs_both_the_effect_and_the_test() -> None:
    rule = NoiseRule(min_gain=0.05, alpha=0.01)
    base = trial("a", level(4, 100, 0.05, seed=1))
    same = trial("b", level(4, 101, 0.05, seed=2))
    faster = trial("c", level(4, 130, 0.05, seed=3))
    few = trial("d", level(4, 130, 0.05, n=1, seed=4))  # the effect, but one request: no evidence
    assert better(same, base, SLO_ITL, rule)[0] is False
    ok, why = better(faster, base, SLO_ITL, rule)
    assert ok and "Mann-Whitney p" in why
    assert better(few, base, SLO_ITL, rule)[0] is False
    slow_itl = trial("e", level(4, 200, 0.5, seed=5))  # more throughput, but misses the ITL SLO
    assert better(slow_itl, base, SLO_ITL, rule)[0] is False
    assert better(base, slow_itl, SLO_ITL, rule)[0] is True
    assert better(trial("f", status="failed"), base, SLO_ITL, rule)[0] is False


def test_clearly_worse_stops_early_only_on_evidence() -> None:
    rule = NoiseRule()
    base = trial("a", level(4, 100, 0.05, seed=1))
    assert clearly_worse(trial("b", level(4, 60, 0.05, seed=2)), base, SLO_ITL, rule)
    assert clearly_worse(trial("c", level(4, 98, 0.05, seed=3)), base, SLO_ITL, rule) is None
    assert clearly_worse(trial("d", level(4, 100, 0.3, seed=4)), base, SLO_ITL, rule)  # 3x the ITL SLO
    assert clearly_worse(trial("e", level(4, 60, 0.05, seed=5)), None, SLO_ITL, rule) is None


# --- the searches -------------------------------------------------------------------------------------------------


def landscape_space() -> Space:
    return Space(
        {"seqs": 1, "tokens": 512, "chunked": True},
        [
            Lever("seqs", (1, 2, 4, 8, 16, 32, 64)),
            Lever("tokens", (256, 512, 1024, 2048, 4096)),
            Lever("chunked", (True, False)),
        ],
    )


def landscape(seed: int = 0) -> tuple[Any, list[str]]:
    """Throughput grows with sequences (ITL too: the SLO stops it at 8), peaks at 1024 tokens per step and is lower
    without chunked prefill; 4096 tokens per step does not fit (pruned). Measured with noise."""
    started: list[str] = []
    counter = [0]

    def evaluate(point: dict[str, Any], incumbent: Trial | None) -> Trial:
        key = point_key(point)
        if point["tokens"] == 4096:
            return Trial(key, dict(point), "pruned", "planner: does not fit")
        started.append(key)
        counter[0] += 1
        s, t = point["seqs"], point["tokens"]
        rate = 50 * s**0.7 * (1 - 0.15 * abs(math.log2(t / 1024))) * (1 if point["chunked"] else 0.85)
        itl = 0.01 * s
        return Trial(key, dict(point), "measured", levels=[level(4, rate, itl, seed=seed + counter[0])], repeats=1,
                     number=counter[0])  # fmt: skip

    return evaluate, started


def test_the_descent_finds_the_grid_s_best_in_fewer_trials() -> None:
    space = landscape_space()
    g_eval, g_started = landscape()
    g = grid(space, g_eval, SLO_ITL)
    d_eval, d_started = landscape(seed=100)
    d = coordinate_descent(space, d_eval, SLO_ITL)
    assert g.best is not None and d.best is not None
    assert g.best.point == {"seqs": 8, "tokens": 1024, "chunked": True}
    assert (d.best.score(SLO_ITL) or 0) >= 0.95 * (g.best.score(SLO_ITL) or 0)
    assert len(g_started) == 56 and len(d_started) <= 56 / 3, d.steps
    assert not any("4096" in k for k in d_started + g_started)  # pruned: never started


def test_the_descent_stops_at_its_budget_with_the_best_so_far() -> None:
    evaluate, started = landscape()
    out = coordinate_descent(landscape_space(), evaluate, SLO_ITL, max_trials=3)
    assert out.stopped_at_budget and len(started) == 3 and out.best is not None and out.best.measured


# --- the evidence -------------------------------------------------------------------------------------------------


def test_the_winner_is_a_valid_profile_file_with_its_figures(tmp_path: Path) -> None:
    lab = load_profile("cpu-lab")
    win = Trial("max_num_seqs=4", {"max_num_seqs": 4}, "measured", levels=[level(4, 120, 0.05)], repeats=2, number=3)
    start = Trial("max_num_seqs=8", {"max_num_seqs": 8}, "measured", levels=[level(4, 100, 0.05)], repeats=2, number=1)
    w = parse_workload("input=16,output=8", [4], 0, 2)
    text = winner_yaml(apply_point(lab, win.point), win, start, SLO_ITL, w, "n1")
    path = tmp_path / "winner.yaml"
    path.write_text(text)
    errors, _ = check_file(path)
    assert errors == []
    tuned = load_profile(str(path))
    assert tuned.name == "cpu-lab-tuned" and tuned.scheduler.max_num_seqs == 4
    assert "# Measured (trial 3, 2 repeat(s)):" in text and "Gain over the starting profile: +" in text


def test_the_pareto_front_and_plot(tmp_path: Path) -> None:
    assert pareto([(10, 100), (20, 150), (15, 90), (30, 140)]) == [(10, 100), (20, 150)]
    trials = [trial("a", level(2, 80, 0.04)), trial("b", level(4, 120, 0.12))]
    png = pareto_png(trials, SLO_ITL, trials[0], tmp_path / "p.png", "t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- one run against a node double --------------------------------------------------------------------------------


class FakeNode:
    """Test double of the tuned host's edge (tune.node.Node's router hook, rollout.yml and client): the throughput
    it measures depends on max_num_seqs; ``fail`` makes that value's converge fail as vLLM would refuse it;
    ``interrupt_at`` raises KeyboardInterrupt when that trial is measured (an operator's Ctrl-C)."""

    calls: ClassVar[list[str]] = []
    others: ClassVar[list[str]] = ["n2"]
    fail: int | None = None
    interrupt_at: int | None = None

    @classmethod
    def install(cls, monkeypatch: pytest.MonkeyPatch) -> None:
        cls.calls = []
        monkeypatch.setattr(node_mod.Node, "others_serving", lambda self: list(cls.others))
        monkeypatch.setattr(node_mod.Node, "router", lambda self, action: cls.calls.append(f"router {action}"))
        monkeypatch.setattr(node_mod.Node, "apply", cls.apply)
        monkeypatch.setattr(node_mod.Node, "measure", cls.measure)
        monkeypatch.setattr(node_mod.Node, "router_command", property(lambda self: ["router-hook"]))

    @staticmethod
    def apply(self: Any, profile_file: Path | None) -> str | None:
        if profile_file is None:
            FakeNode.calls.append("apply previous")
            return None
        seqs = load_profile(str(profile_file)).scheduler.max_num_seqs
        FakeNode.calls.append(f"apply {seqs}")
        if seqs == FakeNode.fail:
            return "Write the config: vLLM's check: ValueError: max_num_seqs (2) is not allowed here"
        return None

    @staticmethod
    def measure(self: Any, profile: Any, workload: Any, repeat: int) -> list[tuple[int, list[Any], float]]:
        seqs = profile.scheduler.max_num_seqs
        if FakeNode.interrupt_at == seqs:
            raise KeyboardInterrupt
        FakeNode.calls.append(f"measure {seqs}")
        lv = level(4, 40 * min(seqs, 4) ** 0.8, 0.01 * seqs, seed=seqs * 10 + repeat)
        timings = [
            StreamTiming(32, t, 32 / r * 4, (0.01 * seqs,) * 31) for t, r in zip(lv.ttft_s, lv.rates, strict=True)
        ]
        return [(4, timings, lv.wall_s)]


def run(tmp_path: Path, slo: str = "itl_p95=0.05", **options: Any) -> Any:
    return tune(
        Target("n1", fleet()),
        None,
        lambda p: parse_slo(slo, p.slo.ttft_p95_s, p.slo.itl_p95_s),
        parse_workload("input=16,output=8", [4], 0, 2),
        parse_levers(["max_num_seqs=1,2,4,8"]),
        tmp_path,
        Options(**options),
        log=lambda line: None,
    )


def test_a_run_drains_searches_puts_back_and_writes_its_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeNode.install(monkeypatch)
    FakeNode.fail, FakeNode.interrupt_at = 2, None
    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal: the report file is a Markdown table all the same
    result = run(tmp_path)
    assert FakeNode.calls[0] == "router drain" and FakeNode.calls[-2:] == ["apply previous", "router ready"]
    assert result.feasible and result.winner.point == {"max_num_seqs": 4}
    failed = [t for t in result.outcome.trials if t.status == "failed"]
    assert [t.point for t in failed] == [{"max_num_seqs": 2}] and "vLLM's check: ValueError" in failed[0].reason
    assert "measure 2" not in FakeNode.calls  # a candidate that failed to start is not measured
    assert {"trials", "plot", "winner", "journal"} <= set(result.files)
    assert load_profile(str(result.files["winner"])).scheduler.max_num_seqs == 4
    table = result.files["trials"].read_text()
    assert "failed to start" in table and "meets SLO at C=4" in table
    assert table.splitlines()[1].startswith("| ") and table.splitlines()[2].startswith("|--")


def test_an_interrupted_run_resumes_from_its_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNode.install(monkeypatch)
    FakeNode.fail, FakeNode.interrupt_at = None, 4
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path)
    assert FakeNode.calls[-2:] == ["apply previous", "router ready"]  # put back even so
    measured_before = [c for c in FakeNode.calls if c.startswith("measure")]
    FakeNode.install(monkeypatch)
    FakeNode.interrupt_at = None
    result = run(tmp_path)
    again = [c for c in FakeNode.calls if c.startswith("measure")]
    assert measured_before and not set(measured_before) & set(again)  # nothing measured twice
    assert result.winner is not None and result.winner.point == {"max_num_seqs": 4}
    other = tmp_path / "other"
    run(other)
    with pytest.raises(TuneError, match="journal of another tuning run"):
        run(other, slo="itl_p95=0.09")


def test_an_slo_no_candidate_meets_names_the_nearest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNode.install(monkeypatch)
    FakeNode.fail = FakeNode.interrupt_at = None
    result = run(tmp_path, slo="itl_p95=0.001")
    assert not result.feasible and result.winner is not None
    assert result.winner.point == {"max_num_seqs": 1}  # the nearest to the ITL SLO
    assert "itl_p95 0.01 s > 0.001 s" in result.winner.why_infeasible(result.slo)


def test_the_last_serving_host_is_refused_before_anything_is_touched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeNode.install(monkeypatch)
    FakeNode.others = []
    try:
        with pytest.raises(TuneError, match=r"last serving host.*--force"):
            run(tmp_path)
        assert FakeNode.calls == []
        FakeNode.fail = FakeNode.interrupt_at = None
        assert run(tmp_path / "forced", force=True).winner is not None
    finally:
        FakeNode.others = ["n2"]


def test_the_command_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    fleet_file = tmp_path / "fleet.yaml"
    import yaml

    fleet_file.write_text(yaml.safe_dump(fleet()))
    for args, words in (
        (["n1", "--fleet", str(fleet_file), "--slo", "itl=1"], "--slo 'itl': unknown"),
        (["n1", "--fleet", str(fleet_file), "--concurrency", "0"], "--concurrency '0'"),
        (["n1", "--fleet", str(fleet_file), "--lever", "max_num_seqs=x"], "not a value of max_num_seqs"),
        (["n1", "--fleet", str(fleet_file), "--search", "annealing"], "want descent or grid"),
        (
            ["nine", "--fleet", str(fleet_file), "--out", str(tmp_path / "o")],
            "'nine' is not in the fleet; its hosts are n1, n2",
        ),
    ):
        res = runner.invoke(app, ["tune", *args])
        assert res.exit_code == 2, (args, res.output)
        assert words in res.output and "Traceback" not in res.output
