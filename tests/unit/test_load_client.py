"""The rollout tests' load client against a real local HTTP server: what it sends, what it counts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from vllm_fleet.rollout.load import LoadClient


class _Completions(BaseHTTPRequestHandler):
    prompts: ClassVar[list[str]] = []
    fail_every: ClassVar[int] = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).prompts.append(body["prompt"])
        status = 503 if self.fail_every and len(self.prompts) % self.fail_every == 0 else 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"choices": [{"text": "ok"}]}')

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Completions]]]:
    handler = type("Handler", (_Completions,), {"prompts": [], "fail_every": 0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def _run(url: str, seconds: float, **options: object) -> LoadClient:
    with LoadClient(url, "m", pause=0.01, prompt=" the text", **options) as load:  # type: ignore[arg-type]
        deadline = time.monotonic() + seconds
        while load.report.sent < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
    return load


def test_a_worker_repeats_its_prompt_unless_asked_for_distinct_ones(server: tuple[str, type[_Completions]]) -> None:
    url, handler = server
    _run(url, 10)
    assert len(handler.prompts) >= 5 and set(handler.prompts) == {"Request from worker 0: the text"}
    handler.prompts.clear()
    _run(url, 10, distinct=True)
    sent = handler.prompts
    assert len(sent) >= 5 and len(set(sent)) == len(sent)  # no two alike: no prefix-cache hit between them
    assert sent[:2] == ["Request 1 from worker 0: the text", "Request 2 from worker 0: the text"]


def test_every_request_is_counted_and_each_failure_kept(server: tuple[str, type[_Completions]]) -> None:
    url, handler = server
    handler.fail_every = 3
    load = _run(url, 10)
    report = load.report
    assert report.sent == report.ok + len(report.failed) and report.sent == len(handler.prompts)
    assert len(report.failed) == len(handler.prompts) // 3 and all("HTTP 503" in f for f in report.failed)
