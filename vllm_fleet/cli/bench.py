"""`vllm-fleet bench`: a decode concurrency sweep against a live node, beside the planner's roofline.

At each concurrency C, C clients each stream ``requests_per_client`` completions of ``max_tokens`` tokens
(ignore_eos, temperature 0). Latency is timed at the client, from each request's own stream, as vLLM's
`vllm bench serve` times it (``vllm/benchmarks/lib/endpoint_request_func.py``): TTFT = arrival of the first chunk
− send; ITL = the gaps between successive chunks (pooled over all requests); TPOT per request = (latency − TTFT) /
(output tokens − 1), the per-token figure a user sees when one chunk carries several tokens (speculation).

The node's own histograms (`/metrics` before and after the level) are reported beside them as what they can say:
the bucket that holds p50 and p95, never a figure interpolated inside it (with every observation in vLLM's
first ITL bucket, interpolation invents one). Where a histogram's first bucket holds half of the observations,
a note gives the `custom_histogram_buckets` entry that resolves them, where the release has the flag.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from rich.table import Table

from vllm_fleet.catalog import load_hardware, load_model
from vllm_fleet.monitoring.buckets import CUSTOM_BUCKETS_ARG
from vllm_fleet.monitoring.signals import BUCKET_FAMILY, Signal, release_metrics
from vllm_fleet.probes.smoke import served_name
from vllm_fleet.probes.smoke_checks import Scrape, parse_scrape
from vllm_fleet.probes.stream_client import Request, StreamError, StreamTiming, closed_loop, percentile
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.planner import Plan, plan, step_time_s
from vllm_fleet.project.tables import table
from vllm_fleet.trust.node_reads import DEFAULT_BOUNDS, NodeReadError, ReadBounds, get_one, run_sync
from vllm_fleet.vllm import flags, metrics_table

BenchError = StreamError
"""A node that could not be benchmarked: unreachable, a bound exceeded (node_reads), an answer out of shape."""

PROMPT = "Write a long story about a lighthouse keeper who counts the ships that pass each night:"
ENGINE_STEPS_FAMILY = "vllm:iteration_tokens_total"
"""A histogram of tokens per engine step: its count is the number of steps (batching: fewer steps than tokens)."""
SERVER_SIGNALS: tuple[Signal, ...] = ("ttft", "itl", "tpot")


@dataclass(frozen=True)
class Bucket:
    """One histogram bucket ``(lower_s, upper_s]``; ``upper_s`` None is +Inf."""

    lower_s: float
    upper_s: float | None

    def contains(self, value_s: float) -> bool:
        return self.lower_s < value_s and (self.upper_s is None or value_s <= self.upper_s)

    def describe(self, unit: str = "s") -> str:
        """``≤ 0.01 s (bucket 0–0.01 s)`` (or in ``ms``): what the histogram can say, no more."""
        k = 1000 if unit == "ms" else 1
        low = f"{self.lower_s * k:.6g}"
        if self.upper_s is None:
            return f"> {low} {unit} (bucket {low} {unit}–+Inf)"
        high = f"{self.upper_s * k:.6g}"
        return f"≤ {high} {unit} (bucket {low}–{high} {unit})"


@dataclass(frozen=True)
class ServerLatency:
    """What the node's histogram of one latency says about a level: counts and quantile buckets."""

    signal: Signal
    family: str
    observations: int
    mean_s: float | None
    """``_sum / _count`` over the level: exact, unlike any quantile read from the buckets."""
    p50: Bucket | None
    p95: Bucket | None
    bounds_s: tuple[float, ...]
    """The histogram's finite boundaries on the node (the scrape's own ``le`` labels)."""


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
    itl_mean_s: float
    tpot_p50_s: float
    tpot_p95_s: float
    """Client-side figures (seconds): p50/p95 over requests (TTFT, TPOT) and over all chunk gaps (ITL; its mean
    is robust to chunks that arrive in bursts, its median is not)."""
    itl_gaps: int
    """Client-side ITL observations (chunk gaps) in the level."""
    roofline_per_user_tokens_per_s: float
    roofline_aggregate_tokens_per_s: float
    server: dict[str, ServerLatency] = field(default_factory=dict)
    """The node's TTFT, ITL and TPOT histograms over the level (signals the release exposes)."""
    engine_steps: int | None = None
    """Engine steps over the level (``vllm:iteration_tokens_total`` count); None where the release lacks it."""
    notes: list[str] = field(default_factory=list)

    @property
    def aggregate_roofline_share(self) -> float:
        """Measured aggregate tokens/s as a share of the planner's roofline."""
        roof = self.roofline_aggregate_tokens_per_s
        return self.aggregate_tokens_per_s / roof if roof else 0.0


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
        """Aggregate tokens/s at the highest concurrency over the lowest."""
        first, last = self.levels[0], self.levels[-1]
        return last.aggregate_tokens_per_s / first.aggregate_tokens_per_s if first.aggregate_tokens_per_s else 0.0


def quantile_bucket(q: float, cumulative: list[tuple[float, float]]) -> Bucket | None:
    """The bucket holding rank q·count of a cumulative histogram ``[(le, count), …]`` (as Prometheus's
    histogram_quantile picks it), without interpolating inside it; None when the histogram is empty."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    lower = 0.0
    for bound, count in cumulative:
        if count >= rank:
            return Bucket(lower, None if math.isinf(bound) else bound)
        lower = bound
    return Bucket(lower, None)


def _scrape(url: str, headers: dict[str, str], bounds: ReadBounds) -> Scrape:
    answer = get_one(url, "/metrics", headers, bounds)
    if answer.status != 200:
        raise BenchError(f"{url}/metrics answered {answer.status}")
    return parse_scrape(answer.text)


def _delta(after: Scrape, before: Scrape, family: str) -> list[tuple[float, float]]:
    old = dict(before.buckets(family))
    return [(le, n - old.get(le, 0.0)) for le, n in after.buckets(family)]


def server_latency(profile: DecodeProfile, after: Scrape, before: Scrape) -> dict[str, ServerLatency]:
    """The node's latency histograms over one level: observation counts and the p50/p95 buckets."""
    metrics = release_metrics(profile.vllm_version)
    out: dict[str, ServerLatency] = {}
    for signal in SERVER_SIGNALS:
        spec = metrics.get(signal)
        if spec is None:
            continue
        delta = _delta(after, before, spec.name)
        if not delta:
            continue
        bounds = tuple(le for le, _ in delta if math.isfinite(le))
        count = delta[-1][1]
        total = (after.total(f"{spec.name}_sum") or 0.0) - (before.total(f"{spec.name}_sum") or 0.0)
        mean = total / count if count > 0 else None
        p50, p95 = quantile_bucket(0.5, delta), quantile_bucket(0.95, delta)
        out[signal] = ServerLatency(signal, spec.name, round(count), mean, p50, p95, bounds)
    return out


def _engine_steps(profile: DecodeProfile, after: Scrape, before: Scrape) -> int | None:
    spec = metrics_table.metric_spec(profile.vllm_version, ENGINE_STEPS_FAMILY)
    if spec is None:
        return None
    now = after.total(metrics_table.sample_name(spec))
    return None if now is None else round(now - (before.total(metrics_table.sample_name(spec)) or 0.0))


def finer_buckets_note(profile: DecodeProfile, server: ServerLatency) -> str | None:
    """Where half of a histogram's observations sit in its first bucket, the histogram cannot tell them apart:
    the ``custom_histogram_buckets`` entry that would (the node's boundaries with the first one split), or why
    the release cannot take one. None when the first bucket holds less than half."""
    if server.p50 is None or server.p50.lower_s > 0 or server.p50.upper_s is None:
        return None
    first = server.p50.upper_s
    family = BUCKET_FAMILY[server.signal]
    what = (
        f"server {server.signal.upper()}: at least half of {server.observations} observations in the first "
        f"bucket (≤ {first:g} s): the histogram cannot say more than that"
    )
    if not flags.has_arg(profile.vllm_version, CUSTOM_BUCKETS_ARG):
        since = flags.first_version(CUSTOM_BUCKETS_ARG)
        return f"{what} (vLLM {profile.vllm_version} has no --custom-histogram-buckets: {since} added it)"
    finer = sorted({float(f"{first * f:.3g}") for f in (0.1, 0.25, 0.5)} | set(server.bounds_s))
    entry = json.dumps({family: finer}, separators=(",", ":"))
    return f"{what}; for finer buckets set the profile's extra_args.{CUSTOM_BUCKETS_ARG}: {entry}"


def burst_note(level: Level) -> str | None:
    """When the client's median chunk gap is far below its time per token, tokens reached it in bursts (several
    stream events in one read: a busy host), and the chunk gaps say more about the reads than about decoding."""
    if not level.tpot_p50_s or level.itl_p50_s * 4 >= level.tpot_p50_s:
        return None
    return (
        f"client ITL p50 {level.itl_p50_s * 1000:.2f} ms is far below TPOT p50 {level.tpot_p50_s * 1000:.2f} ms: "
        "tokens reached the client in bursts (several stream events per read, a busy host); TPOT (and the mean "
        f"ITL, {level.itl_mean_s * 1000:.2f} ms) is the per-token time, the figure the node's ITL histogram times"
    )


def finer_buckets_notes(profile: DecodeProfile, server: dict[str, ServerLatency]) -> list[str]:
    """One finer-bucket note per bucket family (TPOT shares the ITL family's buckets: the ITL note covers it)."""
    notes: dict[str, str] = {}
    for s in server.values():
        family = BUCKET_FAMILY[s.signal]
        if family not in notes and (note := finer_buckets_note(profile, s)) is not None:
            notes[family] = note
    return list(notes.values())


async def _level(
    url: str, headers: dict[str, str], model: str, c: int, per_client: int, max_tokens: int, bounds: ReadBounds
) -> tuple[list[StreamTiming], float]:
    results, wall = await closed_loop(url, headers, model, c, [Request(PROMPT, max_tokens)] * (c * per_client), bounds)
    return [r for r in results if isinstance(r, StreamTiming)], wall


def roofline(profile: DecodeProfile, p: Plan, batch: int, context: int) -> tuple[float, float]:
    """(per-user, aggregate) tokens/s ceiling at ``batch`` sequences of ``context`` tokens."""
    hw, model = load_hardware(profile.hardware), load_model(profile.model.model)
    params = model.total_parameters // profile.parallel.tensor_parallel_size
    t = step_time_s(hw, p.weights_bytes, params, batch, context, p.kv_bytes_per_token, fp8_compute=False)
    return 1 / t, batch / t


def level_of(
    profile: DecodeProfile, p: Plan, c: int, max_tokens: int, timings: list[StreamTiming], wall_s: float
) -> Level:
    """One level's figures from its client timings (the server's are added by the caller)."""
    tokens = sum(t.output_tokens for t in timings)
    per_user = [t.output_tokens / t.latency_s for t in timings if t.latency_s > 0]
    ttft = [t.ttft_s for t in timings]
    itl = [g for t in timings for g in t.itl_s]
    tpot = [x for t in timings if (x := t.tpot_s) is not None]
    roof_user, roof_agg = roofline(profile, p, c, max_tokens // 2 + 20)
    return Level(
        concurrency=c,
        requests=len(timings),
        completion_tokens=tokens,
        wall_s=round(wall_s, 3),
        aggregate_tokens_per_s=round(tokens / wall_s, 2),
        per_user_tokens_per_s=round(statistics.mean(per_user), 2) if per_user else 0.0,
        ttft_p50_s=round(percentile(ttft, 50), 6),
        ttft_p95_s=round(percentile(ttft, 95), 6),
        itl_p50_s=round(percentile(itl, 50), 6),
        itl_p95_s=round(percentile(itl, 95), 6),
        itl_mean_s=round(statistics.mean(itl), 6) if itl else 0.0,
        tpot_p50_s=round(percentile(tpot, 50), 6),
        tpot_p95_s=round(percentile(tpot, 95), 6),
        itl_gaps=len(itl),
        roofline_per_user_tokens_per_s=round(roof_user, 1),
        roofline_aggregate_tokens_per_s=round(roof_agg, 1),
    )


def sweep(
    url: str,
    profile: DecodeProfile,
    concurrencies: list[int],
    *,
    max_tokens: int = 64,
    requests_per_client: int = 2,
    api_key: str | None = None,
    bounds: ReadBounds = DEFAULT_BOUNDS,
) -> Sweep:
    """Every level in turn; BenchError when the node cannot be benchmarked (every read bounded by ``bounds``)."""
    p = plan(profile)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    model = served_name(profile)
    out = Sweep(url=url, profile=profile.name, max_tokens=max_tokens)
    try:
        run_sync(_level(url, headers, model, 1, 1, 8, bounds))  # warm-up, not measured
        for c in concurrencies:
            before = _scrape(url, headers, bounds)
            timings, wall = run_sync(_level(url, headers, model, c, requests_per_client, max_tokens, bounds))
            after = _scrape(url, headers, bounds)
            level = level_of(profile, p, c, max_tokens, timings, wall)
            level.server = server_latency(profile, after, before)
            level.engine_steps = _engine_steps(profile, after, before)
            level.notes = finer_buckets_notes(profile, level.server)
            if (burst := burst_note(level)) is not None:
                level.notes.append(burst)
            out.levels.append(level)
    except TimeoutError:
        raise BenchError(f"{url}: a streamed completion took longer than {bounds.stream_s:g} s (the bound)") from None
    except (NodeReadError, httpx.HTTPError) as err:
        raise BenchError(f"{url}: {err}") from None
    except ValueError as err:  # a scrape that cannot be parsed (ScrapeError), a URL that is not one
        raise BenchError(f"{url}: {err}") from None
    return out


def plot(result: Sweep, path: Path) -> Path:
    """Measured and roofline tokens/s on one (log) axis, each measured point labelled with its share of the
    roofline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    xs = [x.concurrency for x in result.levels]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    series = (
        ("aggregate", "C0", "o", [x.aggregate_tokens_per_s for x in result.levels],
         [x.roofline_aggregate_tokens_per_s for x in result.levels]),
        ("per-user", "C1", "s", [x.per_user_tokens_per_s for x in result.levels],
         [x.roofline_per_user_tokens_per_s for x in result.levels]),
    )  # fmt: skip
    for (name, color, marker, measured, roof), dy in zip(series, (-11, 6), strict=True):
        ax.plot(xs, measured, marker + "-", color=color, label=f"{name} tokens/s (measured)")
        ax.plot(xs, roof, "--", color=color, alpha=0.6, label=f"{name} roofline (planner)")
        for x, m, r in zip(xs, measured, roof, strict=True):
            if r:
                share = f"{m / r:.1%}" if m < r / 10 else f"{m / r:.0%}"
                ax.annotate(share, (x, m), textcoords="offset points", xytext=(4, dy), fontsize=7, color=color)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    # Minor ticks labelled at 2× and 5× each decade only: a range over several decades stays readable.
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if f"{v:.0e}"[0] in "25" else ""))
    ax.tick_params(axis="y", which="both", labelsize=7)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("decode tokens/s (log)")
    ax.set_title(f"{result.profile}: measured vs roofline, % = share of the roofline ({result.url})", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _ms(p50_s: float, p95_s: float) -> str:
    return f"{p50_s * 1000:.1f} / {p95_s * 1000:.1f}"


def _server(x: Level, signal: str) -> str:
    s = x.server.get(signal)
    if s is None or s.p95 is None:
        return "-"
    mean = "" if s.mean_s is None else f", mean {s.mean_s * 1000:.2f} ms"
    return f"{s.p95.describe('ms')}{mean}, n={s.observations}"


def tables(result: Sweep) -> list[Table]:
    """Throughput beside the roofline, then latency: the client's figures beside what the node's histograms say."""
    head = f"decode sweep: {result.url} ({result.profile}), {result.max_tokens} tokens per request"
    num = ("C", "agg tok/s", "roofline agg", "of roofline", "per-user tok/s", "roofline/user", "engine steps")
    throughput = table(*num, title=f"{head}: throughput", right=num)
    for x in result.levels:
        throughput.add_row(
            str(x.concurrency),
            f"{x.aggregate_tokens_per_s:,.1f}",
            f"{x.roofline_aggregate_tokens_per_s:,.0f}",
            f"{x.aggregate_roofline_share:.1%}",
            f"{x.per_user_tokens_per_s:,.1f}",
            f"{x.roofline_per_user_tokens_per_s:,.0f}",
            "-" if x.engine_steps is None else str(x.engine_steps),
        )
    latency = table(
        "C", "TTFT p50/p95 ms", "server TTFT p95", "ITL p50/p95 ms", "server ITL p95", "TPOT p50/p95 ms",
        "server TPOT p95",
        title=f"{head}: latency (client stream timing; server: the histogram bucket, not interpolated)",
        right=("C", "TTFT p50/p95 ms", "ITL p50/p95 ms", "TPOT p50/p95 ms"),
    )  # fmt: skip
    for x in result.levels:
        latency.add_row(
            str(x.concurrency),
            _ms(x.ttft_p50_s, x.ttft_p95_s),
            _server(x, "ttft"),
            _ms(x.itl_p50_s, x.itl_p95_s),
            _server(x, "itl"),
            _ms(x.tpot_p50_s, x.tpot_p95_s),
            _server(x, "tpot"),
        )
    return [throughput, latency]
