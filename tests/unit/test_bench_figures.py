"""The bench's own figures: client percentiles as `vllm bench serve` computes them, server histograms read as
buckets (never interpolated), and the finer-bucket note where the release takes --custom-histogram-buckets."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from vllm_fleet.cli.bench import (
    Bucket,
    ServerLatency,
    StreamTiming,
    finer_buckets_note,
    finer_buckets_notes,
    percentile,
    quantile_bucket,
)
from vllm_fleet.profiles.loader import load_profile

ITL_DEFAULTS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)


@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_percentiles_are_numpys_linear_ones(n: int) -> None:
    xs = [random.Random(n).uniform(0.001, 0.01) for _ in range(n)]
    for q in (50, 95, 99):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)
    assert percentile([], 50) == 0.0


def test_tpot_is_decode_time_per_token_after_the_first() -> None:
    # Speculation: 2 chunks carry 9 tokens; the per-token figure is (latency - ttft) / 8, not the chunk gap.
    t = StreamTiming(output_tokens=9, ttft_s=0.1, latency_s=0.5, itl_s=(0.4,))
    assert t.tpot_s == pytest.approx(0.05) and t.itl_s == (0.4,)
    assert StreamTiming(output_tokens=1, ttft_s=0.1, latency_s=0.1, itl_s=()).tpot_s is None


def test_a_quantile_is_read_as_its_bucket() -> None:
    all_in_first = [(0.01, 40.0), (0.025, 40.0), (float("inf"), 40.0)]
    assert quantile_bucket(0.95, all_in_first) == Bucket(0.0, 0.01)
    assert Bucket(0.0, 0.01).describe() == "≤ 0.01 s (bucket 0–0.01 s)"
    spread = [(0.01, 10.0), (0.025, 50.0), (0.05, 99.0), (float("inf"), 100.0)]
    assert quantile_bucket(0.5, spread) == Bucket(0.01, 0.025)
    assert quantile_bucket(0.95, spread) == Bucket(0.025, 0.05)
    assert quantile_bucket(0.995, spread) == Bucket(0.05, None)
    assert Bucket(0.05, None).describe() == "> 0.05 s (bucket 0.05 s–+Inf)"
    assert Bucket(0.01, 0.025).contains(0.02) and not Bucket(0.01, 0.025).contains(0.01)
    assert quantile_bucket(0.5, [(0.01, 0.0), (float("inf"), 0.0)]) is None


def _itl(p50: Bucket) -> ServerLatency:
    return ServerLatency("itl", "vllm:inter_token_latency_seconds", 40, 0.004, p50, p50, ITL_DEFAULTS)


def test_a_first_bucket_reading_names_the_finer_buckets_the_release_takes() -> None:
    note = finer_buckets_note(load_profile("cpu-lab"), _itl(Bucket(0.0, 0.01)))
    assert note is not None and "at least half of 40 observations in the first bucket (≤ 0.01 s)" in note
    entry = json.loads(note.split("extra_args.custom_histogram_buckets: ", 1)[1])
    assert list(entry) == ["inter_token_latency"]
    assert entry["inter_token_latency"][:4] == [0.001, 0.0025, 0.005, 0.01]
    assert set(ITL_DEFAULTS) <= set(entry["inter_token_latency"])
    assert finer_buckets_note(load_profile("cpu-lab"), _itl(Bucket(0.01, 0.025))) is None


def test_a_release_without_the_flag_says_so() -> None:
    old = load_profile("cpu-lab").model_copy(update={"vllm_version": "0.31.0"})
    note = finer_buckets_note(old, _itl(Bucket(0.0, 0.01)))
    assert note is not None and "vLLM 0.31.0 has no --custom-histogram-buckets: 0.32.0 added it" in note


def test_one_note_per_bucket_family() -> None:
    tpot = ServerLatency("tpot", "vllm:request_time_per_output_token_seconds", 2, 0.004, *[Bucket(0.0, 0.01)] * 2, ())
    notes = finer_buckets_notes(load_profile("cpu-lab"), {"itl": _itl(Bucket(0.0, 0.01)), "tpot": tpot})
    assert len(notes) == 1 and notes[0].startswith("server ITL")
