"""A hostile node for the tests: a real server on loopback playing a broken or compromised vLLM node.

Not a mock of vLLM: a real TCP/HTTP server whose answers are what a misbehaving node can really send. Each
behaviour is a path prefix, so one server plays them all: ``http://127.0.0.1:PORT/<behaviour>`` is the base URL
of a node that behaves so (``/drip/version``, ``/flood/metrics``, ...). Behaviours:

- ``drip``: headers, then one byte every ``DRIP_S`` seconds, forever (until the client goes);
- ``flood``: an endless body (chunked), or with ``Content-Length`` of 1 GiB for ``flood-declared``;
- ``lies``: a well-formed node that lies: another version and model, a negative counter;
- ``escapes``: terminal escape sequences, Rich markup and bytes that are not UTF-8 in every answer;
- ``hang``: a completion stream that sends two events, then nothing, forever;
- ``noline``: a completion stream that never sends a newline;
- ``redirect``: 302 to another host;
- ``shapes``: ``/v1/models`` answering ``[]``, an HTML page for anything else.

``DripServer`` is the SSH side (and any raw socket, e.g. HAProxy's stats socket): it accepts, then sends one byte
every ``DRIP_S`` seconds and never finishes.
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

DRIP_S = 0.5
BEHAVIOURS = frozenset({"drip", "flood", "flood-declared", "lies", "escapes", "hang", "noline", "redirect", "shapes"})
ESCAPES = "\x1b[31mRED\x1b[0m \x1b]0;pwned\x07 [/x] [bold]b[/bold] \r\x08\x00"
NOT_UTF8 = b"\xff\xfe\xc3("


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HostileNode

    def log_message(self, format: str, *args: object) -> None:
        return

    def _send(
        self, status: int, body: bytes, ctype: str = "application/json", extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _drip(self) -> None:
        def drops() -> Iterator[bytes]:
            while True:
                yield b"x"
                if self.server.stopping.wait(DRIP_S):
                    return

        self._chunked(drops())

    def _chunked(self, chunks: Iterator[bytes], ctype: str = "text/plain") -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with contextlib.suppress(OSError):
            for chunk in chunks:
                if self.server.stopping.is_set():
                    return
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()

    def _endless(self, piece: bytes) -> Iterator[bytes]:
        while True:
            yield piece

    def _hang(self) -> Iterator[bytes]:
        event = {"choices": [{"text": "a", "index": 0}]}
        yield b"data: " + json.dumps(event).encode() + b"\n\n"
        yield b"data: " + json.dumps(event).encode() + b"\n\n"
        while not self.server.stopping.wait(DRIP_S):
            pass
        return

    def do_POST(self) -> None:
        self.server.requests.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(min(length, 1 << 20))
        self.do_GET()

    def do_GET(self) -> None:
        if self.command == "GET":
            self.server.requests.append(self.path)
        behaviour, _, rest = self.path.lstrip("/").partition("/")
        rest = "/" + rest
        if behaviour not in BEHAVIOURS and self.server.default:  # a node that behaves so on every path
            behaviour, rest = self.server.default, self.path
        if behaviour == "drip":
            return self._drip()
        if behaviour == "flood":
            return self._chunked(self._endless(b"vllm:x 1\n" * 8192))
        if behaviour == "flood-declared":
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 30))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(b"x" * 65536)
            return None
        if behaviour == "redirect":
            return self._send(302, b"", extra={"Location": "http://192.0.2.1/elsewhere"})
        if behaviour == "hang":
            return self._chunked(self._hang(), "text/event-stream")
        if behaviour == "noline":
            return self._chunked(self._endless(b"data: " + b"y" * 65536), "text/event-stream")
        if behaviour == "shapes":
            if rest == "/v1/models":
                return self._send(200, b"[]")
            return self._send(200, b"<html><body>It works!</body></html>", "text/html")
        if behaviour == "escapes":
            text = ESCAPES.encode() + NOT_UTF8
            if rest == "/version":
                return self._send(200, b'{"version": "' + text.replace(b"\x00", b"") + b'"}')
            if rest == "/v1/models":
                model = json.dumps({"data": [{"id": ESCAPES}]}).encode()
                return self._send(200, model)
            return self._send(200, text, "text/plain")
        if behaviour == "lies":
            if rest == "/version":
                return self._send(200, b'{"version": "0.99.0"}')
            if rest == "/v1/models":
                return self._send(200, b'{"object": "list", "data": [{"id": "not-the-model"}]}')
            if rest == "/health":
                return self._send(200, b"")
            if rest == "/metrics":
                return self._send(200, b'vllm:generation_tokens_total{model_name="m"} -5\n', "text/plain")
        return self._send(404, b'{"error": "no such behaviour"}')


class _Running(socketserver.ThreadingMixIn):
    """A server that runs in a thread of its own between ``with`` and its end, each client in a daemon thread."""

    daemon_threads = True
    stopping: threading.Event
    byte = b"#"

    def start(self) -> None:
        self.stopping = threading.Event()
        threading.Thread(target=self.serve_forever, name=type(self).__name__, daemon=True).start()  # type: ignore[attr-defined]

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.shutdown()  # type: ignore[attr-defined]
        self.server_close()

    @property
    def port(self) -> int:
        return int(self.server_address[1])  # type: ignore[attr-defined]


class HostileNode(_Running, ThreadingHTTPServer):
    """The HTTP side, on 127.0.0.1 and a free port; ``url(behaviour)`` is the base URL of one kind of node, and
    ``default`` the behaviour of every other path (``HostileNode("drip")``: ``/version`` drips, as a node would)."""

    def __init__(self, default: str | None = None) -> None:
        if default is not None and default not in BEHAVIOURS:
            raise ValueError(f"no behaviour {default!r}: one of {sorted(BEHAVIOURS)}")
        super().__init__(("127.0.0.1", 0), _Handler)
        self.default = default
        self.requests: list[str] = []

    def url(self, behaviour: str) -> str:
        return f"http://127.0.0.1:{self.port}/{behaviour}"


class _DripHandler(socketserver.BaseRequestHandler):
    server: DripServer

    def handle(self) -> None:
        with contextlib.suppress(OSError):
            while not self.server.stopping.wait(DRIP_S):
                self.request.sendall(self.server.byte)


class DripServer(_Running, socketserver.TCPServer):
    """A raw TCP server (the SSH side of a hostile node) that drips one byte at a time and never finishes."""

    def __init__(self, byte: bytes = b"S") -> None:
        super().__init__(("127.0.0.1", 0), _DripHandler)
        self.byte = byte


class DripUnixServer(_Running, socketserver.UnixStreamServer):
    """The same on a UNIX socket: an HAProxy stats socket that answers one byte at a time, forever."""

    def __init__(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        super().__init__(str(path), _DripHandler)


def free_port() -> int:
    """A loopback port nothing listens on (closed right after it is found)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
