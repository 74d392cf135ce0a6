#!/usr/bin/env python3
"""vllm-sentinel: is this vLLM server really serving? Readiness for the router, the wedge for Prometheus, and an
optional watchdog. One per vLLM instance, beside it on the node (unit vllm-sentinel-<instance>.service, written by
the vllm_service role); the Python standard library only.

Why: vLLM's ``/health`` and ``/v1/models`` answer 200 while the engine process is stopped or hung; completions then
hang and every engine counter freezes. The sentinel samples the server once a second, from the node itself:

* ``GET /health``  — the API server answers and its engine is not dead;
* ``GET /load``    — requests in flight in the API server (``--enable-server-load-tracking``, rendered by
  vllm-fleet for every release that has it);
* ``GET /metrics`` — the engine's progress: the series in ``PROGRESS`` move whenever the engine runs a step.

and judges (:class:`Judge`): **wedged** when requests are in flight and no progress series moved for
``--stall-sec`` seconds. Busy is not wedged (a saturated engine still moves its counters); idle is not wedged
(nothing in flight). A release whose ``/metrics`` has none of ``PROGRESS`` cannot be judged: the sentinel then
says so (``vllm_fleet_engine_progress_known 0``) and keeps the node ready rather than take it out on a guess.

It answers on ``--listen``:

* ``GET /ready``   — 200 ``ready`` or 503 with the reason (down, wedged, cordoned, no fresh sample): the router's
  health check (HAProxy: ``option httpchk GET /ready`` and ``check port <sentinel port>``);
* ``GET /metrics`` — the verdict in Prometheus' text format (docs/monitoring.md: VllmEngineWedged);
* ``GET /state``   — the same as JSON.

A **cordon** file (``/etc/vllm/<instance>.cordon``, written by a person) makes ``/ready`` 503 whatever the engine does,
its first line shown as the reason. The **watchdog** (``--watchdog-sec`` > 0) kills every process of the vLLM unit
with SIGKILL once the engine has been wedged that long; systemd's ``Restart=on-failure`` starts it again. Each kill
is logged (stdout: the systemd journal) and appended to ``<state dir>/watchdog.jsonl``; it fires at most once per
wedge (again only after the node was seen ready).

**GPU health** (``--nvidia-smi``, ``--xid-source``; a thread, every ``--gpu-interval`` s): nvidia-smi's
uncorrected ECC count and row-remap pending/failure per GPU, and the driver's ``NVRM: Xid`` lines in this boot's
journal, counted by GPU and code; exported as ``vllm_fleet_gpu_*`` (docs/monitoring.md#gpu-health).

Everything the server sends is data: every read is bounded in time and size, numbers are parsed, not evaluated,
and text shown back (the cordon reason) is cut to printable ASCII.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path

PROGRESS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:iteration_tokens_total_count",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
)
"""Series the engine moves when it runs a step (tokens prefilled or generated, requests scheduled, KV blocks taken).
tests/unit/test_sentinel.py checks each is in vllm-fleet's metric table for the releases that have it."""

HEALTH_MAX_BYTES = 4096
LOAD_MAX_BYTES = 4096
METRICS_MAX_BYTES = 8 * 1024 * 1024
CORDON_MAX_BYTES = 4096
REQUEST_TIMEOUT_S = 2.0
"""One read from the server, connect to last byte."""
STALE_AFTER_S = 5.0
"""``/ready`` answers 503 when the newest sample is older than this (the sampler is stuck on a slow server)."""
REASON_MAX = 200
WATCHDOG_LOG_KEEP = 100

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^\n]*\})?[ \t]+(\S+)")


class ReadError(Exception):
    """A read from the server failed or broke a bound; the message says which."""


@dataclass(frozen=True)
class Sample:
    """One look at the server."""

    at: float
    error: str | None = None
    """Why the server is not serving (not answering, /health not 200); None when it answers."""
    in_flight: int | None = None
    """``/load``'s server_load; None when the server does not say."""
    progress: tuple[tuple[str, float], ...] | None = None
    """The ``PROGRESS`` samples as (series with labels, value); None when /metrics has none of them."""


@dataclass
class Verdict:
    state: str = "starting"
    """ready | wedged | down | cordoned | starting"""
    reason: str = "no sample yet"
    in_flight: int | None = None
    stalled_s: float = 0.0
    """Seconds with requests in flight and no progress (0 when idle or moving)."""
    progress_known: bool = False
    cordoned: bool = False
    sampled_at: float = 0.0

    @property
    def ready(self) -> bool:
        return self.state == "ready"


def printable(text: str, limit: int = REASON_MAX) -> str:
    """Printable ASCII only, cut to ``limit``: what a node or a file says is shown as data, never as markup."""
    out = "".join(c if " " <= c <= "~" else "?" for c in text)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def parse_progress(text: str) -> tuple[tuple[str, float], ...] | None:
    """The ``PROGRESS`` samples of a Prometheus text exposition, sorted; None when there are none.

    Values are parsed with float() (NaN kept as text-equal), never evaluated; other lines are ignored."""
    wanted = set(PROGRESS)
    found: list[tuple[str, float]] = []
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        m = _SAMPLE.match(line)
        if m is None or m.group(1) not in wanted:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        found.append((m.group(1) + (m.group(2) or ""), -1.0 if math.isnan(value) else value))
    return tuple(sorted(found)) if found else None


def parse_load(body: bytes) -> int:
    """``/load``'s ``{"server_load": n}``: a whole number ≥ 0, else ReadError."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ReadError("/load: not JSON") from None
    value = data.get("server_load") if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ReadError("/load: no whole server_load >= 0")
    return value


class Judge:
    """Turns samples into verdicts; remembers when progress was last seen. ``now`` comes from the sample."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self._last: tuple[tuple[str, float], ...] | None = None
        self._moving_at: float | None = None

    def judge(self, sample: Sample, cordon: str | None = None) -> Verdict:
        v = Verdict(sampled_at=sample.at, in_flight=sample.in_flight, progress_known=sample.progress is not None)
        if sample.error is not None:
            self._last, self._moving_at = None, None
            v.state, v.reason = "down", sample.error
        else:
            if sample.progress != self._last or not sample.in_flight or self._moving_at is None:
                self._moving_at = sample.at  # moved, idle, or first look: not stalled
            self._last = sample.progress
            v.stalled_s = round(sample.at - self._moving_at, 1)
            if sample.progress is not None and sample.in_flight and v.stalled_s >= self.stall_s:
                v.state = "wedged"
                v.reason = f"{sample.in_flight} request(s) in flight and no engine progress for {v.stalled_s:g} s"
            else:
                v.state = "ready"
                v.reason = f"{sample.in_flight if sample.in_flight is not None else '?'} request(s) in flight" + (
                    "" if v.progress_known else "; progress unknown (no progress series in /metrics)"
                )
        if cordon is not None:
            v.cordoned = True
            v.state, v.reason = "cordoned", f"cordoned: {cordon}"
        return v


def read(url: urllib.parse.SplitResult, path: str, limit: int, timeout: float = REQUEST_TIMEOUT_S) -> bytes:
    """GET ``path`` on the server: status 200 and at most ``limit`` bytes within ``timeout`` s, else ReadError."""
    deadline = time.monotonic() + timeout
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=timeout)
    try:
        conn.request("GET", url.path.rstrip("/") + path, headers={"Accept": "*/*"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ReadError(f"{path}: HTTP {resp.status}")
        body = bytearray()
        while len(body) <= limit:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReadError(f"{path}: no whole answer within {timeout:g} s")
            if conn.sock is not None:
                conn.sock.settimeout(left)
            chunk = resp.read1(65536)
            if not chunk:
                return bytes(body)
            body += chunk
        raise ReadError(f"{path}: larger than {limit} bytes")
    except (OSError, http.client.HTTPException) as e:
        raise ReadError(f"{path}: {type(e).__name__}: {printable(str(e), 80)}") from None
    finally:
        conn.close()


def sample(url: urllib.parse.SplitResult) -> Sample:
    """One look at the server: health, load, progress."""
    at = time.monotonic()
    try:
        read(url, "/health", HEALTH_MAX_BYTES)
        in_flight = parse_load(read(url, "/load", LOAD_MAX_BYTES))
        progress = parse_progress(read(url, "/metrics", METRICS_MAX_BYTES).decode("utf-8", "replace"))
    except ReadError as e:
        return Sample(at=at, error=f"vLLM not serving: {e}")
    return Sample(at=at, in_flight=in_flight, progress=progress)


def read_cordon(path: Path | None) -> str | None:
    """The cordon file's first line (printable, bounded) when it exists, else None."""
    if path is None:
        return None
    try:
        with path.open("rb") as f:
            head = f.read(CORDON_MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cordon file {path} unreadable ({e.strerror})"  # present but unreadable: stay out, say why
    line = head.decode("utf-8", "replace").strip().splitlines()[:1]
    return printable(line[0]) if line and line[0].strip() else "no reason given"


def unit_pids(unit: str, proc: Path = Path("/proc")) -> list[int]:
    """Every process in the cgroup of systemd unit ``unit`` (its last path component), from /proc."""
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdecimal():
            continue
        try:
            cgroup = (entry / "cgroup").read_text(encoding="utf-8", errors="replace")[:4096]
        except OSError:
            continue
        if any(line.rsplit("/", 1)[-1] == unit for line in cgroup.splitlines() if line.startswith("0::")):
            pids.append(int(entry.name))
    return sorted(pids)


@dataclass
class Watchdog:
    """Kills a wedged unit once per wedge; keeps the record."""

    unit: str
    after_s: float
    log_path: Path | None
    restarts: int = 0
    armed: bool = True
    history: list[dict[str, object]] = field(default_factory=list)

    def load(self) -> None:
        if self.log_path is None:
            return
        try:
            lines = self.log_path.read_bytes()[-256 * 1024 :].decode("utf-8", "replace").splitlines()
        except OSError:
            return
        self.restarts = sum(1 for line in lines if line.startswith("{"))

    def observe(self, v: Verdict, kill: bool = True) -> dict[str, object] | None:
        """Re-arm on a ready verdict; on a wedge held ``after_s``, kill the unit and return the record."""
        if v.state == "ready":
            self.armed = True
            return None
        if self.after_s <= 0 or not self.armed or v.state != "wedged" or v.stalled_s < self.after_s:
            return None
        self.armed = False
        pids = unit_pids(self.unit) if kill else []
        killed, refused = [], []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
            except PermissionError:
                refused.append(pid)
        record: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "unit": self.unit,
            "in_flight": v.in_flight,
            "stalled_s": v.stalled_s,
            "killed": killed,
            "refused": refused,
        }
        self.restarts += 1
        self.history = [*self.history, record][-WATCHDOG_LOG_KEEP:]
        print(
            f"watchdog: {self.unit} wedged ({v.reason}) for at least {self.after_s:g} s: SIGKILL to "
            f"{len(killed)} process(es) {killed}{f', not permitted for {refused}' if refused else ''}; "
            "systemd restarts it (Restart=on-failure)",
            flush=True,
        )
        if self.log_path is not None:
            try:
                with self.log_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")
            except OSError as e:
                print(f"watchdog: cannot record to {self.log_path}: {e.strerror}", flush=True)
        return record


GPU_OUTPUT_MAX_BYTES = 256 * 1024
GPU_COMMAND_TIMEOUT_S = 20.0
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (\d{1,4})\b")
XID_MATCHES = {"kernel": ["_TRANSPORT=kernel"], "kernel-tag": ["SYSLOG_IDENTIFIER=kernel"]}
"""Which journal entries may carry an Xid: the kernel's own (``_TRANSPORT=kernel``), or, on a stand-in lab whose
containers have no kernel log, entries tagged ``kernel`` (``logger -t kernel``: anyone on the node can write one)."""


@dataclass
class GpuHealth:
    """GPU fault signals of the node: nvidia-smi's counters and the kernel's Xid events since boot."""

    known: bool = False
    """nvidia-smi answered."""
    note: str = "not sampled yet"
    gpus: list[dict[str, str]] = field(default_factory=list)
    """Per GPU: index, pci_bus_id, ecc_uncorrected (a number or ""), remap_pending / remap_failure ("1", "0", "")."""
    xid_known: bool = False
    xid_note: str = "off"
    """What reading the journal said (its exit status and error) when it found no Xid line."""
    xids: dict[tuple[str, str], int] = field(default_factory=dict)
    """(PCI address, Xid) -> events since boot."""


def run_bounded(argv: list[str], timeout: float = GPU_COMMAND_TIMEOUT_S) -> tuple[int, str]:
    """Run ``argv`` (no shell), at most ``timeout`` s and GPU_OUTPUT_MAX_BYTES of output; (rc, text)."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, printable(str(e), 120)
    out = done.stdout[:GPU_OUTPUT_MAX_BYTES].decode("utf-8", "replace")
    return done.returncode, out if done.returncode == 0 else printable(done.stderr.decode("utf-8", "replace"), 200)


def _csv(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.split(",")] for line in text.splitlines() if line.strip()]


def _yes(value: str) -> str:
    return {"yes": "1", "no": "0"}.get(value.lower(), "")


def _count(value: str) -> str:
    return value if value.isdecimal() else ""  # "[N/A]" (no ECC), "[Not Supported]": unknown, not zero


def parse_gpus(ecc_csv: str, remap_csv: str) -> list[dict[str, str]]:
    """nvidia-smi's ``--query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total`` and
    ``--query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure`` (csv, noheader, nounits) as
    one row per GPU; values that are not what the fields hold are dropped, never echoed."""
    remap = {row[0].lower(): row for row in _csv(remap_csv) if len(row) == 3}
    gpus = []
    for row in _csv(ecc_csv):
        if len(row) != 3 or not row[0].isdecimal() or not re.fullmatch(r"[0-9A-Fa-f:.]{1,32}", row[1]):
            continue
        r = remap.get(row[1].lower(), ["", "", ""])
        gpus.append({"gpu": row[0], "pci_bus_id": row[1], "ecc_uncorrected": _count(row[2]),
                     "remap_pending": _yes(r[1]), "remap_failure": _yes(r[2])})  # fmt: skip
    return gpus


def parse_xids(text: str) -> dict[tuple[str, str], int]:
    """Count the kernel's ``NVRM: Xid (PCI:0000:3b:00): 79, pid=…`` lines by (PCI address, Xid)."""
    counts: dict[tuple[str, str], int] = {}
    for line in text.splitlines():
        m = _XID.search(line)
        if m is not None:
            key = (m.group(1).lower(), str(int(m.group(2))))
            counts[key] = counts.get(key, 0) + 1
    return counts


def gpu_health(smi: str, xid_source: str) -> GpuHealth:
    """One look at the GPUs (``smi``: nvidia-smi, '' = none) and at the Xid events (``xid_source``, '' = none)."""
    h = GpuHealth(note="off")
    ecc_query = [
        smi,
        "--query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total",
        "--format=csv,noheader,nounits",
    ]
    rc, ecc = run_bounded(ecc_query) if smi else (0, "")
    if not smi:
        pass
    elif rc != 0:
        h.note = f"nvidia-smi: {ecc or f'exit {rc}'}"
    else:
        rc, remap = run_bounded([smi, "--query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure",
                                 "--format=csv,noheader"])  # fmt: skip
        h.known, h.gpus, h.note = True, parse_gpus(ecc, remap if rc == 0 else ""), "ok"
    if xid_source:
        rc, text = run_bounded(["journalctl", "--boot", "--no-pager", "--output=cat", "--grep=NVRM: Xid",
                                *XID_MATCHES[xid_source]])  # fmt: skip
        # journalctl --grep exits 1 when nothing matches.
        h.xid_known = rc in (0, 1) and (rc == 0 or "No entries" in text or not text.strip())
        h.xids = parse_xids(text) if rc == 0 else {}
        h.xid_note = f"{len(h.xids)} Xid kind(s)" if rc == 0 else f"journalctl exit {rc}: {printable(text, 200)}"
    return h


class Sentinel:
    def __init__(self, args: argparse.Namespace) -> None:
        self.url = urllib.parse.urlsplit(args.vllm_url)
        self.judge = Judge(args.stall_sec)
        self.interval = args.interval
        self.cordon_file = Path(args.cordon_file) if args.cordon_file else None
        log = Path(args.state_dir) / "watchdog.jsonl" if args.state_dir else None
        self.watchdog = Watchdog(args.unit, args.watchdog_sec, log)
        self.watchdog.load()
        self.stall_s = args.stall_sec
        self.verdict = Verdict()
        self.lock = threading.Lock()
        self.nvidia_smi, self.xid_source, self.gpu_interval = args.nvidia_smi, args.xid_source, args.gpu_interval
        self.gpu = GpuHealth(note="off" if not args.nvidia_smi else "not sampled yet")

    def watch_gpus(self) -> None:
        """Every ``gpu_interval`` s: nvidia-smi's fault counters and the kernel's Xid events (a thread: a slow
        nvidia-smi never delays the readiness samples)."""
        while True:
            health = gpu_health(self.nvidia_smi, self.xid_source)
            with self.lock:
                self.gpu = health
            time.sleep(self.gpu_interval)

    def step(self) -> Verdict:
        v = self.judge.judge(sample(self.url), read_cordon(self.cordon_file))
        previous = self.verdict.state
        with self.lock:
            self.verdict = v
        if v.state != previous:
            print(f"{previous} -> {v.state}: {v.reason}", flush=True)
        self.watchdog.observe(v)
        return v

    def run(self) -> None:
        while True:
            started = time.monotonic()
            self.step()
            time.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    def current(self) -> Verdict:
        with self.lock:
            v = Verdict(**asdict(self.verdict))
        if v.state not in ("starting", "cordoned") and time.monotonic() - v.sampled_at > STALE_AFTER_S:
            v.state, v.reason = "down", f"no fresh sample for {STALE_AFTER_S:g} s (the server answers too slowly)"
        return v

    def metrics(self) -> str:
        v = self.current()
        n = "NaN" if v.in_flight is None else str(v.in_flight)
        rows = [
            ("vllm_fleet_engine_ready", "gauge", "1 when the server answers, moves and is not cordoned.", int(v.ready)),
            ("vllm_fleet_engine_in_flight", "gauge", "Requests in flight in the API server (GET /load).", n),
            ("vllm_fleet_engine_stalled_seconds", "gauge",
             "Seconds with requests in flight and no engine progress.", f"{v.stalled_s:g}"),
            ("vllm_fleet_engine_wedged", "gauge",
             f"1 when requests are in flight and the engine has not moved for {self.stall_s:g} s or more.",
             int(v.state == "wedged")),
            ("vllm_fleet_engine_progress_known", "gauge",
             "1 when /metrics has the engine's progress series (else a wedge cannot be seen).",
             int(v.progress_known)),
            ("vllm_fleet_node_cordoned", "gauge", "1 when a person cordoned the node.", int(v.cordoned)),
            ("vllm_fleet_watchdog_seconds", "gauge", "Wedge time after which the watchdog restarts vLLM (0 = off).",
             f"{self.watchdog.after_s:g}"),
            ("vllm_fleet_watchdog_restarts_total", "counter", "Restarts of vLLM by the watchdog (kept on disk).",
             self.watchdog.restarts),
        ]  # fmt: skip
        out = []
        for name, kind, help_, value in rows:
            out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(out + self._gpu_metrics()) + "\n"

    def _gpu_metrics(self) -> list[str]:
        with self.lock:
            g = self.gpu
        out = [
            "# HELP vllm_fleet_gpu_health_known 1 when nvidia-smi answered the last GPU health query.",
            "# TYPE vllm_fleet_gpu_health_known gauge",
            f"vllm_fleet_gpu_health_known {int(g.known)}",
        ]
        series = [
            ("vllm_fleet_gpu_ecc_uncorrected_volatile", "ecc_uncorrected",
             "Uncorrected ECC errors since the driver loaded (nvidia-smi ecc.errors.uncorrected.volatile.total)."),
            ("vllm_fleet_gpu_row_remap_pending", "remap_pending",
             "1 when a row remap is pending: the GPU needs a reset (nvidia-smi remapped_rows.pending)."),
            ("vllm_fleet_gpu_row_remap_failure", "remap_failure",
             "1 when row remapping failed: the GPU needs service (nvidia-smi remapped_rows.failure)."),
        ]  # fmt: skip
        for name, key, help_ in series:
            out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
            out += [f'{name}{{gpu="{d["gpu"]}",pci_bus_id="{d["pci_bus_id"]}"}} {d[key]}' for d in g.gpus if d[key]]
        out += [
            "# HELP vllm_fleet_gpu_xid_known 1 when the kernel log could be read for Xid events.",
            "# TYPE vllm_fleet_gpu_xid_known gauge",
            f"vllm_fleet_gpu_xid_known {int(g.xid_known)}",
            "# HELP vllm_fleet_gpu_xid_errors_total Xid events of the NVIDIA driver in the kernel log since boot.",
            "# TYPE vllm_fleet_gpu_xid_errors_total counter",
        ]
        out += [
            f'vllm_fleet_gpu_xid_errors_total{{pci="{pci}",xid="{xid}"}} {n}'
            for (pci, xid), n in sorted(g.xids.items())
        ]
        return out


def handler(sentinel: Sentinel) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = 5
        server_version = "vllm-sentinel"
        sys_version = ""

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/ready":
                v = sentinel.current()
                self._send(200 if v.ready else 503, "text/plain", f"{v.state}: {v.reason}\n")
            elif path == "/metrics":
                self._send(200, "text/plain; version=0.0.4", sentinel.metrics())
            elif path == "/state":
                with sentinel.lock:
                    gpu = {"known": sentinel.gpu.known, "note": sentinel.gpu.note, "gpus": sentinel.gpu.gpus,
                           "xid_known": sentinel.gpu.xid_known, "xid_note": sentinel.gpu.xid_note,
                           "xids": {f"{pci} xid {xid}": n for (pci, xid), n in sentinel.gpu.xids.items()}}  # fmt: skip
                data = asdict(sentinel.current()) | {"watchdog_restarts": sentinel.watchdog.restarts, "gpu": gpu}
                self._send(200, "application/json", json.dumps(data) + "\n")
            else:
                self._send(404, "text/plain", "not found: /ready, /metrics, /state\n")

        def _send(self, status: int, kind: str, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a check a second would flood the journal

    return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vllm-sentinel", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--vllm-url", required=True, help="the server's base URL on this node, e.g. http://127.0.0.1:8000")
    p.add_argument("--listen", default="0.0.0.0:9180", help="address:port to answer /ready, /metrics, /state on")
    p.add_argument("--stall-sec", type=float, default=6.0, help="in flight and no progress this long = wedged")
    p.add_argument("--watchdog-sec", type=float, default=0.0, help="restart vLLM wedged this long (0 = never)")
    p.add_argument("--unit", default="vllm-main.service", help="the vLLM unit the watchdog restarts")
    p.add_argument("--state-dir", default="", help="where the watchdog's record is kept")
    p.add_argument("--cordon-file", default="", help="a file whose presence takes the node out")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two samples")
    p.add_argument("--nvidia-smi", default="", help="nvidia-smi to query for GPU faults ('' = no GPU health)")
    p.add_argument("--gpu-interval", type=float, default=30.0, help="seconds between two GPU health queries")
    p.add_argument("--xid-source", default="", choices=["", *XID_MATCHES], help="journal entries read for Xid events")
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if not port.isdecimal() or not 0 < int(port) < 65536 or args.stall_sec <= 0 or args.interval <= 0:
        p.error("--listen needs address:port (1-65535); --stall-sec and --interval must be > 0")
    sentinel = Sentinel(args)
    address = host.strip("[]") or "0.0.0.0"  # noqa: S104 - the router and Prometheus reach it (--listen narrows it)

    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

    server = Server((address, int(port)), handler(sentinel))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    if args.nvidia_smi or args.xid_source:
        threading.Thread(target=sentinel.watch_gpus, daemon=True).start()
    print(f"watching {args.vllm_url} (stall {args.stall_sec:g} s, watchdog "
          f"{f'{args.watchdog_sec:g} s' if args.watchdog_sec > 0 else 'off'}); answering on {args.listen}",
          flush=True)  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sentinel.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
