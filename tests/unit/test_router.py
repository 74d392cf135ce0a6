"""The router hook against a real HAProxy (Debian's 2.6) in front of two tiny HTTP backends; no mocks."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vllm_fleet.cli.commands import app
from vllm_fleet.rollout.router import (
    CommandRouter,
    HAProxyRouter,
    RouterError,
    haproxy_binary,
    haproxy_config,
    start_haproxy,
    stop_haproxy,
)

try:
    HAPROXY: str | None = haproxy_binary()
except RouterError:
    HAPROXY = None
requires_haproxy = pytest.mark.skipif(HAPROXY is None, reason="no haproxy: apt-get install haproxy")

HOSTILE_NAMES = ["b\nset server vllm/a state maint", "b;set server vllm/a state maint", "b;x", "", "a" * 64, "b c"]


def _backend(name: str) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1: GET /health answers 200, any other GET or POST its own name."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"ok" if self.path == "/health" else name.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.do_GET()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Callable[[], bool], timeout: float = 8.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (a daemon's parent may be a reaper that never reaps)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] in "ZX"


def _pid(state_dir: Path) -> int:
    return int((state_dir / "haproxy.pid").read_text().split()[0])


@dataclass
class Lab:
    router: HAProxyRouter
    state_dir: Path
    servers: list[tuple[str, str, int]]
    bind: str
    url: str

    def answers(self, n: int = 8) -> set[str]:
        """Who answered ``n`` fresh requests through the frontend."""
        seen = set()
        for _ in range(n):
            with urllib.request.urlopen(self.url, timeout=5) as resp:
                seen.add(resp.read().decode())
        return seen

    def wait_up(self, *names: str) -> None:
        """Until the health checks have these servers up (a drained one reads DRAIN)."""

        def up(name: str) -> Callable[[], bool]:
            return lambda: self.router.state(name).status in ("UP", "DRAIN")

        for name in names:
            _wait(f"{name} UP", up(name))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if HAPROXY is None:
        pytest.skip("no haproxy: apt-get install haproxy")
    a, b = _backend("a"), _backend("b")
    servers = [("a", "127.0.0.1", a.server_address[1]), ("b", "127.0.0.1", b.server_address[1])]
    state_dir = tmp_path_factory.mktemp("haproxy")
    port = _free_port()
    bind = f"127.0.0.1:{port}"
    try:
        router = start_haproxy(state_dir, servers, bind=bind)
        lab = Lab(router, state_dir, servers, bind, f"http://127.0.0.1:{port}/")
        lab.wait_up("a", "b")
        yield lab
    finally:
        stop_haproxy(state_dir)
        a.shutdown()
        b.shutdown()


@requires_haproxy
def test_drain_then_ready(lab: Lab) -> None:
    assert lab.router.servers() == ["a", "b"]
    assert lab.answers() == {"a", "b"}
    assert lab.router.state("b").admin == "ready"

    lab.router.drain("b")
    state = lab.router.state("b")
    assert (state.admin, state.operational, state.status) == ("drain", "up", "DRAIN")
    assert lab.answers(12) == {"a"}

    lab.router.ready("b")
    assert lab.router.state("b").admin == "ready"
    lab.wait_up("b")
    assert lab.answers() == {"a", "b"}


@requires_haproxy
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_server_name_is_refused_before_sending(lab: Lab, name: str) -> None:
    with pytest.raises(RouterError, match=r"router server name .*: only letters, digits, \. _ -"):
        lab.router.drain(name)
    with pytest.raises(RouterError, match="router server name"):
        lab.router.ready(name)
    assert [s.admin for s in lab.router.states()] == ["ready", "ready"]


@requires_haproxy
def test_unknown_server_or_backend_names_haproxys_reply(lab: Lab) -> None:
    with pytest.raises(RouterError, match=r"vllm/nope: No such server\.$"):
        lab.router.drain("nope")
    with pytest.raises(RouterError, match=r"other/a: No such backend\.$"):
        HAProxyRouter(lab.router.socket, "other").ready("a")
    with pytest.raises(RouterError, match="no server 'nope'"):
        lab.router.state("nope")
    with pytest.raises(RouterError, match=r"No such proxy|Can't find backend"):
        HAProxyRouter(lab.router.socket, "other").states()


@requires_haproxy
def test_reload_keeps_drain_unless_the_server_moved(lab: Lab) -> None:
    (a_port, b_port) = (lab.servers[0][2], lab.servers[1][2])
    first = _pid(lab.state_dir)
    lab.router.drain("b")

    start_haproxy(lab.state_dir, lab.servers, bind=lab.bind)
    assert _pid(lab.state_dir) == first  # the same config: no reload, nothing changes
    assert lab.router.state("b").admin == "drain"

    start_haproxy(lab.state_dir, [*lab.servers, ("c", "127.0.0.1", a_port)], bind=lab.bind)  # a new server
    second = _pid(lab.state_dir)
    assert second != first
    _wait("the old haproxy to finish", lambda: _gone(first))
    assert lab.router.state("b").admin == "drain"
    assert lab.answers() <= {"a", "c"}

    # HAProxy 2.6 would take b's old port from the state file: b moved, so it starts afresh (ready, new port).
    start_haproxy(lab.state_dir, [lab.servers[0], ("b", "127.0.0.1", a_port)], bind=lab.bind)
    assert lab.router.state("b").admin == "ready"
    lab.wait_up("b")
    assert lab.answers() == {"a"}

    start_haproxy(lab.state_dir, lab.servers, bind=lab.bind)
    lab.wait_up("a", "b")
    assert (lab.router.state("b").admin, b_port) == ("ready", lab.servers[1][2])
    assert lab.answers() == {"a", "b"}


@requires_haproxy
def test_cli(lab: Lab) -> None:
    runner = CliRunner()
    prefix = ["router", "--haproxy-socket", str(lab.router.socket)]
    result = runner.invoke(app, [*prefix, "drain", "b"])
    assert (result.exit_code, result.output) == (0, "vllm/b: drain (idle: 0 sessions)\n")
    result = runner.invoke(app, [*prefix, "status", "b"])
    assert result.exit_code == 0 and "drain" in result.output
    result = runner.invoke(app, [*prefix, "ready", "b"])
    assert (result.exit_code, result.output) == (0, "vllm/b: ready\n")
    result = runner.invoke(app, [*prefix, "status"])
    assert result.exit_code == 0 and " a " in result.output and " b " in result.output
    result = runner.invoke(app, [*prefix, "drain", "nope"])
    assert result.exit_code == 2 and "No such server." in result.output
    result = runner.invoke(app, ["router", "drain", "b"])
    assert result.exit_code == 2 and "--haproxy-socket" in result.output
    assert lab.router.state("b").admin == "ready"


@requires_haproxy
def test_stop_leaves_no_process(tmp_path_factory: pytest.TempPathFactory) -> None:
    state_dir = tmp_path_factory.mktemp("haproxy-stop")
    backend = _backend("a")
    try:
        router = start_haproxy(
            state_dir, [("a", "127.0.0.1", backend.server_address[1])], bind=f"127.0.0.1:{_free_port()}"
        )
        pid = _pid(state_dir)
        assert not _gone(pid)
        assert "Name: HAProxy" in router.command("show info")
        stop_haproxy(state_dir)
        assert _gone(pid)
        assert not (state_dir / "haproxy.pid").exists() and not (state_dir / "haproxy.sock").exists()
        stop_haproxy(state_dir)  # not running: no error
        with pytest.raises(RouterError, match="HAProxy runtime API at"):
            router.command("show info")
    finally:
        stop_haproxy(state_dir)
        backend.shutdown()


def test_config(tmp_path: Path) -> None:
    cfg = haproxy_config(
        [("a", "10.0.0.5", 8000), ("node-2.example", "node-2.example.internal", 8001), ("v6", "fd00::5", 8002)],
        bind="172.31.254.1:8080",
        socket=tmp_path / "haproxy.sock",
    )
    lines = [line.strip() for line in cfg.splitlines()]
    assert f"stats socket {tmp_path / 'haproxy.sock'} mode 600 level admin" in lines
    assert "daemon" not in lines
    for want in ("mode http", "timeout connect 5s", "timeout client 300s", "timeout server 300s", "retries 3",
                 "option httpchk GET /health", "http-check expect status 200", "option redispatch",
                 "retry-on conn-failure empty-response", "option http-buffer-request", "bind 172.31.254.1:8080",
                 "default_backend vllm",
                 "backend vllm", "balance leastconn"):  # fmt: skip
        assert want in lines, want
    assert "server a 10.0.0.5:8000 check inter 2s fall 2 rise 1" in lines
    assert "server node-2.example node-2.example.internal:8001 check inter 2s fall 2 rise 1" in lines
    assert "server v6 [fd00::5]:8002 check inter 2s fall 2 rise 1" in lines


@pytest.mark.parametrize(
    ("servers", "bind", "error"),
    [
        ([("a", "127.0.0.1\n    server x 10.9.9.9:80", 80)], "127.0.0.1:8080", "not an IP address or a DNS name"),
        ([("a", "10.0.0.1 backup", 80)], "127.0.0.1:8080", "not an IP address or a DNS name"),
        ([("a", "10.0.0.1#", 80)], "127.0.0.1:8080", "not an IP address or a DNS name"),
        ([("a", "-x.example", 80)], "127.0.0.1:8080", "not an IP address or a DNS name"),
        ([("a\nlisten x", "10.0.0.1", 80)], "127.0.0.1:8080", "router server name"),
        ([("a", "10.0.0.1", 0)], "127.0.0.1:8080", "not in 1-65535"),
        ([("a", "10.0.0.1", "80\n")], "127.0.0.1:8080", "not a port number"),
        ([("a", "10.0.0.1", 80), ("a", "10.0.0.2", 80)], "127.0.0.1:8080", "twice"),
        ([("a", "10.0.0.1", 80)], "127.0.0.1:8080\n    bind :9", "HAProxy bind address"),
        ([("a", "10.0.0.1", 80)], "127.0.0.1 ssl:8080", "not an IP address or a DNS name"),
        ([("a", "10.0.0.1", 80)], "8080", "not host:port"),
    ],
)
def test_config_refuses_injection(tmp_path: Path, servers: list[tuple[str, str, int]], bind: str, error: str) -> None:
    with pytest.raises(RouterError, match=error):
        haproxy_config(servers, bind=bind, socket=tmp_path / "haproxy.sock")


def test_config_refuses_odd_socket_and_backend(tmp_path: Path) -> None:
    with pytest.raises(RouterError, match="HAProxy socket"):
        haproxy_config([], bind=":8080", socket=tmp_path / "a b.sock")
    with pytest.raises(RouterError, match="longer than"):
        haproxy_config([], bind=":8080", socket=tmp_path / ("x" * 100))
    with pytest.raises(RouterError, match="HAProxy backend name"):
        haproxy_config([], bind=":8080", socket=tmp_path / "s", backend="vllm\nlisten")
    with pytest.raises(RouterError, match="HAProxy backend name"):
        HAProxyRouter(tmp_path / "s", "vllm;x")


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "router.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_command_router(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    router = CommandRouter([str(_script(tmp_path, f"printf '%s\\n' \"$*\" >> {calls}\n")), "--socket", "s"])
    router.drain("node-1")
    router.ready("node-1")
    for name in HOSTILE_NAMES:
        with pytest.raises(RouterError, match="router server name"):
            router.drain(name)
    assert calls.read_text().splitlines() == ["--socket s drain node-1", "--socket s ready node-1"]


def test_command_router_failure(tmp_path: Path) -> None:
    router = CommandRouter(
        [str(_script(tmp_path, "echo noise >&2\necho 'backend vllm: no such server' >&2\nexit 1\n"))]
    )
    with pytest.raises(RouterError, match=r"exited 1: noise\nbackend vllm: no such server$"):
        router.drain("node-1")
    with pytest.raises(RouterError, match="No such file or directory"):
        CommandRouter([str(tmp_path / "missing")]).ready("node-1")


def test_config_with_sentinels_checks_ready_on_their_port(tmp_path: Path) -> None:
    cfg = haproxy_config([("a", "10.0.0.5", 8000)], bind=":8080", socket=tmp_path / "s", sentinel_port=9180)
    lines = [line.strip() for line in cfg.splitlines()]
    assert "option httpchk GET /ready" in lines and "option httpchk GET /health" not in lines
    assert "server a 10.0.0.5:8000 check port 9180 inter 1s fall 2 rise 2" in lines
    with pytest.raises(RouterError, match="not in 1-65535"):
        haproxy_config([("a", "10.0.0.5", 8000)], bind=":8080", socket=tmp_path / "s", sentinel_port=0)


@requires_haproxy
def test_a_node_whose_sentinel_says_wedged_leaves_and_rejoins(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Real HAProxy, a real backend and the real sentinel program (roles/vllm_service/files/vllm_sentinel.py) in
    front of a real HTTP server playing vLLM: work in flight and its counters stopped, HAProxy takes the server out
    although the server answers; the counters move again, it is back; a cordon file takes it out too."""
    from tests.unit.test_sentinel import SCRIPT, _Engine, _engine_server

    state_dir = tmp_path_factory.mktemp("haproxy-sentinel")
    backend, engine = _backend("a"), _Engine()
    vllm = _engine_server(engine)
    port, cordon = _free_port(), state_dir / "cordon"
    argv = [sys.executable, "-I", str(SCRIPT), "--vllm-url", f"http://127.0.0.1:{vllm.server_address[1]}",
            "--listen", f"127.0.0.1:{port}", "--stall-sec", "2", "--interval", "0.2",
            "--cordon-file", str(cordon)]  # fmt: skip
    sentinel = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        router = start_haproxy(
            state_dir, [("a", "127.0.0.1", backend.server_address[1])], bind=f"127.0.0.1:{_free_port()}",
            sentinel_port=port,
        )  # fmt: skip
        router.wait_serving("a", 20)
        engine.in_flight, engine.running = 2, False  # wedged: work in flight, nothing moves
        stopped = time.monotonic()
        router.wait("a", lambda s: s.operational == "down", "down", 20)
        assert time.monotonic() - stopped < 2 + 4  # the stall time, then two failed checks a second apart
        engine.running = True
        router.wait_serving("a", 20)
        cordon.write_text("maintenance\n")
        router.wait("a", lambda s: s.operational == "down", "down", 20)
        cordon.unlink()
        router.wait_serving("a", 20)
    finally:
        stop_haproxy(state_dir)
        sentinel.terminate()
        sentinel.wait(timeout=10)
        vllm.shutdown()
        backend.shutdown()


class _DyingServer:
    """A real server playing a vLLM killed under load (a test double: no vLLM here can be killed on cue): it answers
    health checks, holds every POST it is sent without answering, and on ``kill()`` closes its port and resets
    every held connection, as the kernel does for a SIGKILLed process."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.held: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # killed
            conn.settimeout(5)
            try:
                data = conn.recv(65536)
            except OSError:
                conn.close()
                continue
            if data.startswith(b"GET"):
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                conn.close()
                continue
            with self.lock:
                self.held.append(conn)

    def kill(self) -> int:
        self.sock.close()
        with self.lock:
            held, self.held = self.held, []
        for conn in held:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
        return len(held)


@requires_haproxy
def test_a_request_in_flight_on_a_server_that_dies_is_sent_again_to_another(tmp_path: Path) -> None:
    """What a watchdog's kill does to the requests on a wedged node: they had no answer, so the router sends them
    to another node instead of passing the reset to the client."""
    dying, good = _DyingServer(), _backend("good")
    port = _free_port()
    servers = [("dying", "127.0.0.1", dying.port), ("good", "127.0.0.1", good.server_address[1])]
    start_haproxy(tmp_path, servers, bind=f"127.0.0.1:{port}")
    results: list[int | str] = []

    def post() -> None:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=b'{"prompt": "x"}')
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                results.append(resp.status)
        except Exception as e:  # the failure this test is about, whatever form it takes
            results.append(f"{type(e).__name__}: {e}")

    try:
        _wait("both servers up", lambda: all(HAProxyRouter(tmp_path / "haproxy.sock").state(n).status == "UP"
                                             for n in ("dying", "good")))  # fmt: skip
        clients = []
        while not dying.held:  # leastconn: a request goes to the idle one, until one is held there
            clients.append(threading.Thread(target=post))
            clients[-1].start()
            _wait("the request answered or held", lambda: len(results) + len(dying.held) >= len(clients))
            assert len(clients) < 20, results
        assert dying.kill() >= 1
        for c in clients:
            c.join(30)
        assert results == [200] * len(clients), results
    finally:
        stop_haproxy(tmp_path)
        good.shutdown()
