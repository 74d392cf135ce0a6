"""SLO thresholds on histogram bucket boundaries.

A latency SLO alert counts the observations above one bucket boundary (``1 - bucket{le=B} / count > 0.05`` is
exactly "p95 > B", with no interpolation). So the SLO must be a boundary of the histogram the node really has:
the release's defaults (``buckets`` in the metric table) or the profile's own
``extra_args.custom_histogram_buckets`` (vLLM >= 0.32.0's ``--custom-histogram-buckets``). When the SLO is not a
boundary, the alert uses the smallest boundary above it (it never fires for a p95 that meets the SLO, and may
stay quiet for one between the SLO and that boundary) and says so; where the release has the flag, the note
gives the ``custom_histogram_buckets`` entry that puts the SLO on a boundary (docs/monitoring.md#slo-buckets).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from prometheus_client.utils import floatToGoString

from vllm_fleet.monitoring.signals import BUCKET_FAMILY, ReleaseMetrics, Signal
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.vllm import flags

CUSTOM_BUCKETS_ARG = "custom_histogram_buckets"


@dataclass(frozen=True)
class SloBucket:
    signal: Signal
    slo_s: float
    bucket_s: float
    """The boundary the alert counts above."""
    buckets: tuple[float, ...]
    """The histogram's boundaries on the node (finite ones)."""
    source: str
    """``vLLM X defaults`` or ``the profile's custom_histogram_buckets``."""
    note: str | None
    """Why the alert does not use the SLO itself, and the fix; None when the SLO is a boundary."""

    @property
    def exact(self) -> bool:
        return self.note is None


def le_matcher(bound: float) -> str:
    """A matcher for the ``le`` label of ``bound``: prometheus_client writes ``0.5``, ``1.0``, ``+Inf``; Prometheus 3
    normalises integral bounds to ``1``: both spellings match."""
    text: str = floatToGoString(bound)  # type: ignore[no-untyped-call]
    spellings = [text]
    if text.endswith(".0"):
        spellings.append(text[:-2])
    return "=~" + json.dumps("|".join(re.escape(s) for s in spellings))


def node_buckets(profile: DecodeProfile, metrics: ReleaseMetrics, signal: Signal) -> tuple[tuple[float, ...], str]:
    """The boundaries ``signal``'s histogram has on a node of ``profile``, and where they come from."""
    custom = profile.extra_args.get(CUSTOM_BUCKETS_ARG)
    family = BUCKET_FAMILY[signal]
    if isinstance(custom, dict) and isinstance(custom.get(family), list):
        return tuple(float(b) for b in custom[family]), f"the profile's {CUSTOM_BUCKETS_ARG}[{family!r}]"
    spec = metrics.require(signal)
    if spec.buckets is None:
        raise ValueError(f"{spec.name} on vLLM {metrics.version}: the table has no literal buckets")
    return tuple(float(b) for b in spec.buckets if math.isfinite(float(b))), f"vLLM {metrics.version} defaults"


def _g(value: float) -> str:
    return f"{value:g}"


def slo_bucket(profile: DecodeProfile, metrics: ReleaseMetrics, signal: Signal, slo_s: float) -> SloBucket:
    buckets, source = node_buckets(profile, metrics, signal)
    family = BUCKET_FAMILY[signal]
    on_boundary = [b for b in buckets if math.isclose(b, slo_s, rel_tol=1e-9)]
    if on_boundary:
        return SloBucket(signal, slo_s, on_boundary[0], buckets, source, None)
    above = [b for b in buckets if b > slo_s]
    if above:
        chosen = above[0]
        below = max((b for b in buckets if b < slo_s), default=0.0)
        why = (
            f"SLO {_g(slo_s)} s is not a boundary of {source} ({_g(below)} < SLO < {_g(chosen)}): "
            f"the alert fires when p95 > {_g(chosen)} s"
        )
    else:
        chosen = buckets[-1]
        why = (
            f"SLO {_g(slo_s)} s is above the last finite boundary of {source} ({_g(chosen)}): "
            f"the alert fires when p95 > {_g(chosen)} s, earlier than the SLO"
        )
    if flags.has_arg(metrics.version, CUSTOM_BUCKETS_ARG):
        fixed = sorted({*buckets, slo_s})
        entry = json.dumps({family: fixed}, separators=(",", ":"))
        why += f"; to alert at the SLO itself, set the profile's extra_args.{CUSTOM_BUCKETS_ARG}: {entry}"
    else:
        since = flags.first_version(CUSTOM_BUCKETS_ARG)
        why += f" (vLLM {metrics.version} has no --custom-histogram-buckets: {since} added it)"
    return SloBucket(signal, slo_s, chosen, buckets, source, why)
