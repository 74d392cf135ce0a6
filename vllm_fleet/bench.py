"""`vllm-fleet bench`: a decode concurrency sweep against a live node, beside the planner's roofline.

At each concurrency C, C clients each stream ``requests_per_client`` completions of ``max_tokens`` tokens
(ignore_eos, temperature 0). Per level: tokens/s per user (completion tokens / request latency), aggregate
tokens/s (all completion tokens / wall time), and TTFT / ITL percentiles from the node's own histograms
(`/metrics` deltas over the level: streamed chunks coalesce on the wire, so client-side gaps understate ITL) —
beside the planner's roofline for a batch of C.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from vllm_fleet.catalog import load_hardware, load_model
from vllm_fleet.planner import Plan, plan, step_time_s
from vllm_fleet.profile import DecodeProfile
from vllm_fleet.smoke import served_name
from vllm_fleet.smoke_checks import Scrape, histogram_quantile, parse_scrape
from vllm_fleet.vllm import metrics_table

PROMPT = "Write a long story about a lighthouse keeper who counts the ships that pass each night:"


@dataclass
class Level:
    concurrency: int
    requests: int
    completion_tokens: int
    wall_s: float
    aggregate_tokens_per_s: float
    per_user_tokens_per_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    itl_p50_s: float
    itl_p95_s: float
    roofline_per_user_tokens_per_s: float
    roofline_aggregate_tokens_per_s: float


@dataclass
class Sweep:
    url: str
    profile: str
    max_tokens: int
    levels: list[Level] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"url": self.url, "profile": self.profile, "max_tokens": self.max_tokens,
                "levels": [asdict(x) for x in self.levels]}  # fmt: skip

    @property
    def batching_gain(self) -> float:
        """Aggregate tokens/s at the highest concurrency over concurrency 1."""
        first, last = self.levels[0], self.levels[-1]
        return last.aggregate_tokens_per_s / first.aggregate_tokens_per_s if first.aggregate_tokens_per_s else 0.0


Result = tuple[int, float]
"""(completion tokens, request latency in seconds) of one request; TTFT/ITL come from the node's histograms."""


def _scrape(url: str, headers: dict[str, str]) -> Scrape:
    return parse_scrape(httpx.get(f"{url}/metrics", headers=headers, timeout=10).raise_for_status().text)


def _server_quantiles(profile: DecodeProfile, after: Scrape, before: Scrape, concern: str) -> tuple[float, float]:
    """(p50, p95) seconds from the node's histogram for ``concern`` over one level."""
    spec = metrics_table.family_for(profile.vllm_version, concern)
    if spec is None:
        return 0.0, 0.0
    old = dict(before.buckets(spec.name))
    delta = [(le, n - old.get(le, 0.0)) for le, n in after.buckets(spec.name)]
    return histogram_quantile(0.5, delta) or 0.0, histogram_quantile(0.95, delta) or 0.0


async def _one(client: httpx.AsyncClient, model: str, max_tokens: int) -> Result:
    """(tokens, latency) of one streamed completion."""
    body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}  # fmt: skip
    start = time.perf_counter()
    chunks = 0
    tokens = 0
    async with client.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                chunks += 1
    if not chunks:
        raise RuntimeError("the stream carried no tokens")
    return tokens or chunks, time.perf_counter() - start


async def _level(
    url: str, headers: dict[str, str], model: str, c: int, per_client: int, max_tokens: int
) -> tuple[list[Result], float]:
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as client:

        async def worker() -> list[Result]:
            return [await _one(client, model, max_tokens) for _ in range(per_client)]

        start = time.perf_counter()
        results = await asyncio.gather(*(worker() for _ in range(c)))
        return [r for rs in results for r in rs], time.perf_counter() - start


def roofline(profile: DecodeProfile, p: Plan, batch: int, context: int) -> tuple[float, float]:
    """(per-user, aggregate) tokens/s ceiling at ``batch`` sequences of ``context`` tokens."""
    hw, model = load_hardware(profile.hardware), load_model(profile.model)
    params = model.total_parameters // profile.tensor_parallel_size
    t = step_time_s(hw, p.weights_bytes, params, batch, context, p.kv_bytes_per_token, fp8_compute=False)
    return 1 / t, batch / t


def sweep(
    url: str,
    profile: DecodeProfile,
    concurrencies: list[int],
    *,
    max_tokens: int = 64,
    requests_per_client: int = 2,
    api_key: str | None = None,
) -> Sweep:
    p = plan(profile)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    model = served_name(profile)
    out = Sweep(url=url, profile=profile.name, max_tokens=max_tokens)
    asyncio.run(_level(url, headers, model, 1, 1, 8))  # warm-up, not measured
    for c in concurrencies:
        before = _scrape(url, headers)
        results, wall = asyncio.run(_level(url, headers, model, c, requests_per_client, max_tokens))
        after = _scrape(url, headers)
        ttft = _server_quantiles(profile, after, before, "ttft")
        itl = _server_quantiles(profile, after, before, "itl")
        tokens = sum(n for n, _ in results)
        per_user = [n / latency for n, latency in results if latency > 0]
        roof_user, roof_agg = roofline(profile, p, c, max_tokens // 2 + 20)
        out.levels.append(
            Level(
                concurrency=c,
                requests=len(results),
                completion_tokens=tokens,
                wall_s=round(wall, 3),
                aggregate_tokens_per_s=round(tokens / wall, 2),
                per_user_tokens_per_s=round(statistics.mean(per_user), 2) if per_user else 0.0,
                ttft_p50_s=round(ttft[0], 4),
                ttft_p95_s=round(ttft[1], 4),
                itl_p50_s=round(itl[0], 4),
                itl_p95_s=round(itl[1], 4),
                roofline_per_user_tokens_per_s=round(roof_user, 1),
                roofline_aggregate_tokens_per_s=round(roof_agg, 1),
            )
        )
    return out


def plot(result: Sweep, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [x.concurrency for x in result.levels]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    ax.plot(xs, [x.aggregate_tokens_per_s for x in result.levels], "o-", label="aggregate tokens/s (measured)")
    ax.plot(xs, [x.per_user_tokens_per_s for x in result.levels], "s-", label="per-user tokens/s (measured)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("decode tokens/s")
    ax.set_title(f"{result.profile}: decode throughput vs concurrency ({result.url})", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(xs, [x.roofline_aggregate_tokens_per_s for x in result.levels], "--", color="grey",
             label="aggregate roofline (planner, right axis)")  # fmt: skip
    ax2.set_ylabel("roofline tokens/s")
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(lines, labels, fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
