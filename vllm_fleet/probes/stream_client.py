"""Streamed completions timed at the client, as vLLM's own `vllm bench serve` times them
(``vllm/benchmarks/lib/endpoint_request_func.py``): TTFT = arrival of the first chunk − send; ITL = the gaps between
successive chunks; latency = last chunk − send. One client for `vllm-fleet bench` (a concurrency sweep) and
`vllm-fleet tune` (a workload per trial).

Every read is bounded (``trust.node_reads``): a whole stream by ``stream_s``, each line by ``line_bytes``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import httpx

from vllm_fleet.trust.node_reads import DEFAULT_BOUNDS, NodeReadError, ReadBounds, stream_lines
from vllm_fleet.trust.node_reads import client as node_client

Prompt = str | tuple[int, ...]
"""Text, or token ids (the OpenAI completions API takes either; ids give an exact input length)."""


class StreamError(ValueError):
    """A completion that could not be timed: an HTTP status other than 200, a stream out of shape, no token."""


@dataclass(frozen=True)
class Request:
    prompt: Prompt
    max_tokens: int


@dataclass(frozen=True)
class StreamTiming:
    """One streamed completion, timed at the client as `vllm bench serve` times it."""

    output_tokens: int
    ttft_s: float
    latency_s: float
    itl_s: tuple[float, ...]
    """Gaps between successive chunks after the first (one chunk may carry several tokens)."""

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first: (latency − TTFT) / (tokens − 1)."""
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1) if self.output_tokens > 1 else None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between samples (numpy's default, as `vllm bench
    serve` reports them); 0.0 for no samples."""
    if not values:
        return 0.0
    if len(values) == 1 or q <= 0:
        return min(values)
    if q >= 100:
        return max(values)
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


async def stream_one(client: httpx.AsyncClient, model: str, request: Request, bounds: ReadBounds) -> StreamTiming:
    """One streamed completion, timed per chunk (a chunk is a data event with a choice, as vLLM's bench counts)."""
    prompt = list(request.prompt) if isinstance(request.prompt, tuple) else request.prompt
    body = {"model": model, "prompt": prompt, "max_tokens": request.max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}  # fmt: skip
    start = time.perf_counter()
    ttft: float | None = None
    last = start
    gaps: list[float] = []
    chunks = tokens = 0
    async with asyncio.timeout(bounds.stream_s), client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise StreamError(f"/v1/completions answered {r.status_code}")
        async for raw in stream_lines(r, bounds):
            if not raw.startswith(b"data: ") or raw == b"data: [DONE]":
                continue
            now = time.perf_counter()
            try:
                chunk = json.loads(raw[6:])
                if not isinstance(chunk, dict):
                    raise ValueError("not an object")
                if chunk.get("choices"):
                    chunks += 1
                    if ttft is None:
                        ttft = now - start
                    else:
                        gaps.append(now - last)
                    last = now
                elif chunk.get("usage"):
                    tokens = int(chunk["usage"]["completion_tokens"])
            except (ValueError, KeyError, TypeError) as err:
                raise StreamError(f"/v1/completions: a stream event that is not an OpenAI chunk ({err})") from None
    if ttft is None:
        raise StreamError("/v1/completions: the stream carried no tokens")
    return StreamTiming(output_tokens=tokens or chunks, ttft_s=ttft, latency_s=last - start, itl_s=tuple(gaps))


async def closed_loop(
    url: str,
    headers: Mapping[str, str],
    model: str,
    concurrency: int,
    requests: Sequence[Request],
    bounds: ReadBounds = DEFAULT_BOUNDS,
    *,
    keep_errors: bool = False,
) -> tuple[list[StreamTiming | str], float]:
    """``concurrency`` clients, each sending its share of ``requests`` one after the other (client k: requests k,
    k + concurrency, …); (results in the order of ``requests``, wall seconds). A failed request raises, or with
    ``keep_errors`` is its error's text in the results (a tuner counts errors; a sweep stops at the first)."""
    # Per read as long as a whole stream may take (a loaded node's first token); the stream's own bound is total.
    results: list[StreamTiming | str] = ["not sent"] * len(requests)
    async with node_client(url, headers, replace(bounds, request_s=bounds.stream_s)) as client:

        async def worker(k: int) -> None:
            for i in range(k, len(requests), concurrency):
                try:
                    results[i] = await stream_one(client, model, requests[i], bounds)
                except (StreamError, NodeReadError, httpx.HTTPError, TimeoutError, OSError) as err:
                    if not keep_errors:
                        raise
                    results[i] = f"{type(err).__name__}: {err}"[:300]

        start = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        return results, time.perf_counter() - start
