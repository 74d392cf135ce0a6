"""Bounded reads of what a node sends: every HTTP answer, stream line and SSH output has a deadline and a size cap.

A node is untrusted (docs/security.md, "Nodes"): a broken or compromised one may drip one byte a second, send a
gigabyte, never end a stream or a line, redirect elsewhere, or print bytes that are not UTF-8. Every read here has

- a **total deadline** (connect, headers and the whole body together, not per read: ``asyncio.timeout`` around the
  request, which cancels the socket read itself);
- a **size cap** per answer (``/metrics`` larger than the JSON endpoints; checked against ``Content-Length`` before
  reading and against the bytes read while reading) and per stream line;
- **no redirects** (a 3xx is the answer, never followed) and no compression (``Accept-Encoding: identity``; a
  compressed answer is refused rather than inflated);
- **bytes, decoded leniently**: ``surrogateescape`` keeps every byte (the evidence bundle stores them exactly), and
  what is shown is escaped by ``node_text``.

Exceeding a bound raises ``NodeReadError`` naming the bound, so the caller reports that host and goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

MiB = 1024 * 1024
_T = TypeVar("_T")


@dataclass(frozen=True)
class ReadBounds:
    """The bounds of reading from one node; the defaults fit a real GPU node (a 70B model's ``/metrics`` with
    every histogram is well under 1 MiB; 32 MiB leaves room for many engines and adapters)."""

    request_s: float = 30.0
    """One request: connect, headers and the whole body."""
    json_bytes: int = 4 * MiB
    """``/version``, ``/v1/models``, ``/health``, a completion: any answer but ``/metrics``."""
    metrics_bytes: int = 32 * MiB
    """A ``/metrics`` scrape."""
    line_bytes: int = 1 * MiB
    """One line of a streamed completion (a server-sent event)."""
    stream_s: float = 600.0
    """One whole streamed completion, first byte to last."""
    ssh_s: float = 120.0
    """One host's read-only SSH collection script, connect to exit."""
    ssh_bytes: int = 16 * MiB
    """What that script prints (it sends the unit, config and apt files base64)."""

    def __post_init__(self) -> None:
        for name in ("request_s", "stream_s", "ssh_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"read bound {name}: {value!r} is not a positive finite number of seconds")
        for name in ("json_bytes", "metrics_bytes", "line_bytes", "ssh_bytes"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"read bound {name}: {value!r} is not a positive number of bytes")

    def body_bytes(self, path: str) -> int:
        return self.metrics_bytes if path.split("?", 1)[0].rstrip("/").endswith("/metrics") else self.json_bytes


DEFAULT_BOUNDS = ReadBounds()


class NodeReadError(Exception):
    """A read that failed: ``bound`` names the bound it exceeded (None: refused, reset, not HTTP...)."""

    def __init__(self, message: str, bound: str | None = None) -> None:
        super().__init__(message)
        self.bound = bound


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = ""

    @property
    def text(self) -> str:
        """Every byte kept (``surrogateescape``): an invalid byte is one lone surrogate, shown escaped."""
        return self.body.decode("utf-8", "surrogateescape")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body)


def _mib(n: int) -> str:
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n} bytes"


def check_url(base_url: str) -> httpx.URL:
    """``base_url`` as a URL to a node; ValueError (one line, the fix) when it is not ``http(s)://host[:port]``."""
    try:
        url = httpx.URL(base_url)
        port = url.port
    except (httpx.InvalidURL, TypeError, ValueError) as err:
        raise ValueError(f"{base_url!r} is not a URL ({err}); give http://host:port") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"{base_url!r} is not an http(s)://host[:port] URL; give e.g. http://10.0.0.5:8000")
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{base_url!r}: port {port} is out of range 1-65535")
    return url


def client(
    base_url: str, headers: Mapping[str, str] | None = None, bounds: ReadBounds = DEFAULT_BOUNDS
) -> httpx.AsyncClient:
    """An HTTP client for one node: no redirects followed, no compression, the request deadline as every timeout
    (the total deadline is ``asyncio.timeout`` in ``get``/``stream_lines``). ValueError for a URL that is not one."""
    return httpx.AsyncClient(
        base_url=check_url(base_url),
        headers={"Accept-Encoding": "identity", **(headers or {})},
        timeout=httpx.Timeout(bounds.request_s),
        follow_redirects=False,
    )


async def _body(response: httpx.Response, what: str, cap: int) -> bytes:
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise NodeReadError(f"{what}: answered {encoding}-compressed though asked for identity", "compression")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise NodeReadError(f"{what}: answer of {declared} bytes is larger than the {_mib(cap)} bound", "size")
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > cap:
            raise NodeReadError(f"{what}: answer larger than the {_mib(cap)} bound", "size")
    return bytes(body)


async def get(
    http: httpx.AsyncClient,
    path: str,
    bounds: ReadBounds = DEFAULT_BOUNDS,
    *,
    method: str = "GET",
    body: Any = None,
    deadline_s: float | None = None,
) -> Answer:
    """One whole answer within ``deadline_s`` (default: the request bound) and the path's size bound."""
    deadline = bounds.request_s if deadline_s is None else deadline_s
    what = f"{method} {path}"
    try:
        async with asyncio.timeout(deadline):
            async with http.stream(method, path, json=body) as response:
                content = await _body(response, what, bounds.body_bytes(path))
                return Answer(response.status_code, content, response.headers.get("content-type", ""))
    except TimeoutError:
        raise NodeReadError(
            f"{what}: no whole answer within {deadline:g} s (the request deadline)", "deadline"
        ) from None
    except (httpx.HTTPError, httpx.InvalidURL) as err:
        raise NodeReadError(f"{what}: {type(err).__name__}: {err or 'no answer'}") from None


async def stream_lines(response: httpx.Response, bounds: ReadBounds = DEFAULT_BOUNDS) -> AsyncIterator[bytes]:
    """The lines of a streamed answer (without their end), each at most ``line_bytes`` long. The caller bounds the
    whole stream's time (``stream_s``)."""
    pending = bytearray()
    async for chunk in response.aiter_raw():
        pending += chunk
        while (end := pending.find(b"\n")) >= 0:
            line = bytes(pending[:end]).rstrip(b"\r")
            del pending[: end + 1]
            yield line
        if len(pending) > bounds.line_bytes:
            raise NodeReadError(f"a stream line longer than the {_mib(bounds.line_bytes)} bound", "line")
    if pending:
        yield bytes(pending)


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """``coro`` run to its end on an event loop of its own, from synchronous code (any thread). Unlike plain
    ``asyncio.run`` it leaves the thread's current event loop as it was: a caller that asks for it later (the Pulumi
    SDK does) still finds it."""
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(coro)


def get_all(
    base_url: str,
    paths: Sequence[str],
    headers: Mapping[str, str] | None = None,
    bounds: ReadBounds = DEFAULT_BOUNDS,
) -> dict[str, Answer | NodeReadError]:
    """Several paths of one node, read concurrently, from synchronous code; each path's answer or its error."""

    async def main() -> dict[str, Answer | NodeReadError]:
        async with client(base_url, headers, bounds) as http:

            async def one(path: str) -> Answer | NodeReadError:
                try:
                    return await get(http, path, bounds)
                except NodeReadError as err:
                    return err

            return dict(zip(paths, await asyncio.gather(*(one(p) for p in paths)), strict=True))

    return run_sync(main())


def get_one(
    base_url: str, path: str, headers: Mapping[str, str] | None = None, bounds: ReadBounds = DEFAULT_BOUNDS
) -> Answer:
    """One path of one node from synchronous code; NodeReadError when it cannot be read within the bounds."""
    answer = get_all(base_url, [path], headers, bounds)[path]
    if isinstance(answer, NodeReadError):
        raise answer
    return answer


@dataclass(frozen=True)
class Output:
    returncode: int
    stdout: bytes
    stderr: bytes


async def _capped(stream: asyncio.StreamReader | None, cap: int, what: str) -> bytes:
    out = bytearray()
    if stream is None:
        return b""
    while chunk := await stream.read(64 * 1024):
        out += chunk
        if len(out) > cap:
            raise NodeReadError(f"{what}: more than the {_mib(cap)} bound", "size")
    return bytes(out)


async def run_bounded(
    argv: Sequence[str],
    *,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    deadline_s: float,
    max_bytes: int,
    what: str,
) -> Output:
    """Run ``argv`` (ssh, typically) with ``stdin``: its output as bytes, within ``deadline_s`` and ``max_bytes``.

    The command runs in a session of its own; past a bound, that whole session is killed (it is ours) and
    NodeReadError names the bound."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    readers = [
        asyncio.ensure_future(_capped(proc.stdout, max_bytes, what)),
        asyncio.ensure_future(_capped(proc.stderr, 64 * 1024, f"{what} (stderr)")),
    ]
    try:
        async with asyncio.timeout(deadline_s):
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
                proc.stdin.close()
            stdout, stderr = await asyncio.gather(*readers)
            return Output(await proc.wait(), stdout, stderr)
    except TimeoutError:
        raise NodeReadError(f"{what}: not done within {deadline_s:g} s (the SSH deadline)", "deadline") from None
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        # The pipes must reach their end for the process to be reaped; what is left in them is thrown away.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await asyncio.gather(_discard(proc.stdout), _discard(proc.stderr))
                await proc.wait()


async def _discard(stream: asyncio.StreamReader | None) -> None:
    while stream is not None and await stream.read(64 * 1024):
        pass
