"""The node-side sentinel (roles/vllm_service/files/vllm_sentinel.py): its judgment of samples, its bounds on what a
server sends, its watchdog's kill, and the real program against a real HTTP server playing a vLLM whose engine
stops (tests/hostile_node.py plays the broken ones).

The lab test that stops a real engine under load is tests/converge/test_wedge.py."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.hostile_node import ESCAPES, HostileNode, free_port
from vllm_fleet.project.paths import project_root
from vllm_fleet.vllm.metrics_table import families_for, known_versions

SCRIPT = project_root() / "roles" / "vllm_service" / "files" / "vllm_sentinel.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_sentinel", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_sentinel"] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


sentinel = _load()
METRICS = 'vllm:generation_tokens_total{{model_name="m"}} {tokens}\nvllm:num_requests_running{{model_name="m"}} 1\n'


def sample(at: float, tokens: int | None, in_flight: int = 1, error: str | None = None) -> Any:
    progress = None if tokens is None else sentinel.parse_progress(METRICS.format(tokens=tokens))
    return sentinel.Sample(at=at, error=error, in_flight=in_flight, progress=progress)


def test_busy_and_idle_are_not_wedged_a_still_engine_with_work_is() -> None:
    judge = sentinel.Judge(stall_s=6)
    assert judge.judge(sample(0, 10)).state == "ready"
    assert judge.judge(sample(5, 11)).state == "ready"  # moving
    assert judge.judge(sample(10.9, 11)).state == "ready"  # still for 5.9 s: not yet
    v = judge.judge(sample(11, 11))
    assert (v.state, v.stalled_s) == ("wedged", 6)
    assert "1 request(s) in flight and no engine progress for 6 s" in v.reason
    assert judge.judge(sample(12, 12)).state == "ready"  # it moved again (SIGCONT)
    assert judge.judge(sample(30, 12, in_flight=0)).state == "ready"  # idle for long: nothing to wait for
    assert judge.judge(sample(35, 12, in_flight=3)).stalled_s == 5  # the clock starts when work arrives


def test_an_unknown_release_stays_ready_and_says_so_a_down_server_is_down() -> None:
    judge = sentinel.Judge(stall_s=1)
    v = judge.judge(sample(0, None, in_flight=4))
    v = judge.judge(sample(100, None, in_flight=4))
    assert (v.state, v.progress_known) == ("ready", False)
    assert "progress unknown" in v.reason
    down = judge.judge(sample(101, None, error="vLLM not serving: /health: HTTP 503"))
    assert (down.state, down.ready) == ("down", False)
    cordoned = judge.judge(sample(102, 5), cordon="GPU 3 row remap failure")
    assert (cordoned.state, cordoned.reason) == ("cordoned", "cordoned: GPU 3 row remap failure")


def test_progress_parsing_takes_numbers_only_and_ignores_everything_else() -> None:
    text = (
        "# HELP vllm:generation_tokens_total x\n"
        'vllm:generation_tokens_total{model_name="a b"} 1.5e3\n'
        "vllm:prompt_tokens_total NaN\n"
        "vllm:num_requests_running __import__('os')\n"
        f'vllm:iteration_tokens_total_count{{x="{ESCAPES.replace(chr(13), "")}"}} 7\n'
        "vllm:something_else_total 99\n"
        "http_requests_total 5\n"
    )
    got = dict(sentinel.parse_progress(text))
    assert got['vllm:generation_tokens_total{model_name="a b"}'] == 1500.0
    assert got["vllm:prompt_tokens_total"] == -1.0
    assert len(got) == 3 and not any("something_else" in k or "running" in k for k in got)
    assert sentinel.parse_progress("http_requests_total 5\n") is None


@pytest.mark.parametrize(
    "body",
    [b"[]", b'{"server_load": -1}', b'{"server_load": true}', b'{"server_load": "3"}', b"\xff", b"{"],
)
def test_load_must_be_a_whole_number(body: bytes) -> None:
    with pytest.raises(sentinel.ReadError):
        sentinel.parse_load(body)


def test_progress_series_are_vllm_series() -> None:
    """Every name the sentinel watches is a sample of vLLM's metric table, and every supported release has the
    token counters (a release without any would make the sentinel fail open, not take nodes out)."""
    known: set[str] = set()
    for version in known_versions():
        names = {s for family in families_for(version).values() for s in family.samples}
        known |= names
        assert {"vllm:generation_tokens_total", "vllm:prompt_tokens_total"} <= names, version
    assert set(sentinel.PROGRESS) <= known, set(sentinel.PROGRESS) - known


def test_cordon_reason_is_shown_as_data(tmp_path: Path) -> None:
    f = tmp_path / "main.cordon"
    assert sentinel.read_cordon(f) is None
    f.write_bytes(ESCAPES.encode() + b"\n second line\n" + b"x" * 10_000)
    reason = sentinel.read_cordon(f)
    assert reason is not None and "\x1b" not in reason and "\x00" not in reason and len(reason) <= 200
    f.write_text("\n")
    assert sentinel.read_cordon(f) == "no reason given"


def test_the_watchdog_kills_the_units_processes_once_per_wedge(tmp_path: Path) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        proc = tmp_path / "proc"
        for pid, cgroup in ((victim.pid, "vllm-main.service"), (bystander.pid, "vllm-other.service")):
            (proc / str(pid)).mkdir(parents=True)
            (proc / str(pid) / "cgroup").write_text(f"0::/system.slice/{cgroup}\n")
        assert sentinel.unit_pids("vllm-main.service", proc) == [victim.pid]

        dog = sentinel.Watchdog("vllm-main.service", 30, tmp_path / "watchdog.jsonl")
        wedged = sentinel.Verdict(state="wedged", reason="2 request(s) ...", in_flight=2, stalled_s=29)
        assert dog.observe(wedged) is None  # not long enough
        wedged.stalled_s = 30
        original = sentinel.unit_pids
        sentinel.unit_pids = lambda unit: original(unit, proc)
        try:
            record = dog.observe(wedged)
            assert dog.observe(wedged) is None  # once per wedge
        finally:
            sentinel.unit_pids = original
        assert record is not None and record["killed"] == [victim.pid]
        assert victim.wait(timeout=5) == -9 and bystander.poll() is None
        assert json.loads((tmp_path / "watchdog.jsonl").read_text())["in_flight"] == 2
        again = sentinel.Watchdog("vllm-main.service", 30, tmp_path / "watchdog.jsonl")
        again.load()
        assert again.restarts == 1  # the counter survives the sentinel's restart
        dog.observe(sentinel.Verdict(state="ready"))
        assert dog.armed  # seen ready: the next wedge may be restarted again
        assert sentinel.Watchdog("u", 0, None).observe(wedged) is None  # off
    finally:
        for p in (victim, bystander):
            p.kill()
            p.wait()


class _Engine:
    """What the scripted node serves: a vLLM whose engine can be stopped (its counters freeze with work in flight)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.in_flight = 0
        self.running = True
        self.health = 200


def _engine_server(engine: _Engine) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            if engine.running:
                engine.tokens += 1
            body = {
                "/health": b"",
                "/load": json.dumps({"server_load": engine.in_flight}).encode(),
                "/metrics": METRICS.format(tokens=engine.tokens).encode(),
            }.get(self.path)
            status = engine.health if self.path == "/health" else 200 if body is not None else 404
            self.send_response(status)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def run_sentinel(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(url: str, *extra: str) -> str:
        port = free_port()
        argv = [sys.executable, "-I", str(SCRIPT), "--vllm-url", url, "--listen", f"127.0.0.1:{port}",
                "--stall-sec", "2", "--interval", "0.2", "--state-dir", str(tmp_path), *extra]  # fmt: skip
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{base}/state", timeout=1)
                return base
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError("the sentinel did not answer")

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def _wait_ready(base: str, want: int, timeout: float = 10, state: str = "") -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(f"{base}/ready", timeout=2)
        if (r.status_code == want and r.text.startswith(state)) or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_the_real_sentinel_takes_a_stopped_engine_out_and_back(run_sentinel: Any, tmp_path: Path) -> None:
    engine = _Engine()
    server = _engine_server(engine)
    try:
        base = run_sentinel(f"http://127.0.0.1:{server.server_address[1]}", "--cordon-file", str(tmp_path / "c"))
        assert _wait_ready(base, 200).text.startswith("ready: 0 request(s)")
        engine.in_flight, engine.running = 3, False  # SIGSTOP: work in flight, the counters freeze
        stopped = time.monotonic()
        r = _wait_ready(base, 503)
        assert r.status_code == 503 and r.text.startswith("wedged: 3 request(s) in flight"), r.text
        assert 2 - 0.5 <= time.monotonic() - stopped < 6  # stall 2 s from the last moving sample (0.2 s apart)
        metrics = httpx.get(f"{base}/metrics", timeout=2).text
        assert "vllm_fleet_engine_wedged 1" in metrics and "vllm_fleet_engine_in_flight 3" in metrics
        engine.running = True  # SIGCONT
        assert _wait_ready(base, 200).status_code == 200
        (tmp_path / "c").write_text("disk errors on nvme0\n")
        assert _wait_ready(base, 503).text == "cordoned: cordoned: disk errors on nvme0\n"
        (tmp_path / "c").unlink()
        assert _wait_ready(base, 200).status_code == 200
        engine.health = 503  # the engine died: vLLM's /health says so
        assert _wait_ready(base, 503).text.startswith("down: vLLM not serving: /health: HTTP 503")
        assert httpx.get(f"{base}/nothing", timeout=2).status_code == 404
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("behaviour", "why"), [("drip", r"no whole answer within|timed out"), ("flood", "larger than")]
)
def test_a_hostile_server_cannot_hold_or_flood_the_sentinel(run_sentinel: Any, behaviour: str, why: str) -> None:
    with HostileNode() as node:
        base = run_sentinel(node.url(behaviour))
        r = _wait_ready(base, 503, state="down")
        state = httpx.get(f"{base}/state", timeout=2).json()
        assert r.status_code == 503 and state["state"] == "down" and re.search(why, state["reason"]), state


XID_LINES = """\
NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
NVRM: Xid (PCI:0000:86:00): 94, pid=77, name=VLLM::EngineCore, Contained: SM (0x1). RST: No, D-RST: No
NVRM: Xid (PCI:0000:86:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address
NVRM: GPU at PCI:0000:3b:00: GPU-5eed0000
NVRM: Xid (PCI:\x1b[31mevil): 79, nope
"""


def test_xid_lines_are_counted_by_gpu_and_code() -> None:
    assert sentinel.parse_xids(XID_LINES) == {("0000:3b:00", "79"): 2, ("0000:86:00", "94"): 1, ("0000:86:00", "13"): 1}


def test_nvidia_smi_rows_keep_numbers_and_yes_no_only() -> None:
    ecc = "0, 00000000:3B:00.0, 2\n1, 00000000:3C:00.0, [N/A]\nx, evil, 1\n2, 00000000:3D:00.0\n"
    remap = "00000000:3B:00.0, No, Yes\n00000000:3C:00.0, [N/A], Maybe\n"
    assert sentinel.parse_gpus(ecc, remap) == [
        {
            "gpu": "0",
            "pci_bus_id": "00000000:3B:00.0",
            "ecc_uncorrected": "2",
            "remap_pending": "0",
            "remap_failure": "1",
        },
        {"gpu": "1", "pci_bus_id": "00000000:3C:00.0", "ecc_uncorrected": "", "remap_pending": "", "remap_failure": ""},
    ]


def test_the_lab_stand_in_nvidia_smi_plays_gpu_faults(tmp_path: Path) -> None:
    """The stand-in nvidia-smi the lab nodes install (tools/standin_debs/files/nvidia-smi.sh) answers the
    sentinel's two queries in nvidia-smi's format, with the faults its conf sets."""
    source = (project_root() / "tools/standin_debs/files/nvidia-smi.sh").read_text()
    conf = tmp_path / "nvidia-smi.conf"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(source.replace("@DRIVER_VERSION@", "580.95.05").replace("@DRIVER_CUDA_VERSION@", "13.0")
                   .replace("CONF=/etc/vllm-fleet-standin/nvidia-smi.conf", f"CONF={conf}"))  # fmt: skip
    smi.chmod(0o755)
    conf.write_text("GPU_COUNT=2\n")
    clean = sentinel.gpu_health(str(smi), "")
    assert clean.known and [g["ecc_uncorrected"] + g["remap_failure"] for g in clean.gpus] == ["00", "00"]
    conf.write_text("GPU_COUNT=2\nGPU_ECC_UNCORRECTED_1=4\nGPU_REMAP_FAILURE_1=Yes\nGPU_REMAP_PENDING=Yes\n")
    sick = sentinel.gpu_health(str(smi), "")
    assert sick.gpus[1] | {} == {"gpu": "1", "pci_bus_id": "00000000:02:00.0", "ecc_uncorrected": "4",
                                 "remap_pending": "1", "remap_failure": "1"}  # fmt: skip
    assert sick.gpus[0]["ecc_uncorrected"] == "0" and sick.gpus[0]["remap_pending"] == "1"
    missing = sentinel.gpu_health(str(tmp_path / "absent"), "")
    assert not missing.known and "absent" in missing.note
