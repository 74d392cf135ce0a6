"""Which hosts are serving now: those the rollout must protect (drain, canary, batches); the others are new
(or down) and have nothing to protect, so they are provisioned in parallel.

"Serving" is what a client sees: ``GET <endpoint>/health`` answers 200 (vLLM answers it without the API key).
All hosts are asked at once with a short timeout, so a fleet of hundreds costs about one timeout, not one each.

A serving host a person cordoned (playbooks/cordon.yml) says so on its sentinel's ``GET /state``: the program
leaves it as it is (docs/rollouts.md#cordon) until it is uncordoned.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

import httpx

from vllm_fleet.trust.node_reads import NodeReadError, get

PROBE_TIMEOUT_S = 2.0
"""One host's budget: a serving vLLM answers /health in milliseconds."""
MAX_CONNECTIONS = 256
REASON_MAX = 200
"""A cordon's reason, as the program shows it: printable ASCII, at most this long (the node wrote it)."""
_T = TypeVar("_T")


def _ask_all(urls: list[str], timeout_s: float, judge: Callable[[int, bytes], _T], silent: _T) -> list[_T]:
    """``judge(status, body)`` of ``GET url`` for every url at once, ``silent`` where none came back whole within
    ``timeout_s`` (bounded as every read from a node: vllm_fleet.trust.node_reads). Runs its own event loop in a
    thread: the caller (the Pulumi program) may already be inside one."""

    async def all_of() -> list[_T]:
        limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=timeout_s, limits=limits, trust_env=False) as client:

            async def one(url: str) -> _T:
                try:
                    answer = await get(client, url, deadline_s=timeout_s)
                except NodeReadError:
                    return silent
                return judge(answer.status, answer.body)

            return list(await asyncio.gather(*(one(u) for u in urls)))

    return _in_thread(all_of)


def _in_thread(make: Callable[[], Coroutine[Any, Any, list[_T]]]) -> list[_T]:
    result: list[list[_T]] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(asyncio.run(make()))
        except Exception as e:  # handed to the caller, which picks the cautious answer
            error.append(e)

    thread = threading.Thread(target=run, name="node-probe")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def serving_endpoints(endpoints: Iterable[str], timeout_s: float = PROBE_TIMEOUT_S) -> set[str]:
    """The endpoints (``http://host:port``) whose /health answers 200 now."""
    wanted = list(dict.fromkeys(endpoints))
    try:
        result = _ask_all([f"{e}/health" for e in wanted], timeout_s, lambda status, _body: status == 200, False)
    except Exception:  # the probe itself broke: count every host as serving, the cautious order
        result = [True] * len(wanted)
    return {e for e, ok in zip(wanted, result, strict=True) if ok}


def _cordon_reason(status: int, body: bytes) -> str | None:
    """The reason of a cordon from a sentinel's /state answer (None: not cordoned, or not a sentinel's answer)."""
    try:
        state = json.loads(body) if status == 200 else None
    except ValueError:
        return None
    if not isinstance(state, dict) or state.get("cordoned") is not True:
        return None
    reason = str(state.get("reason") or "").removeprefix("cordoned: ")
    return "".join(c if " " <= c <= "~" else "?" for c in reason)[:REASON_MAX] or "no reason given"


def cordoned_nodes(sentinels: dict[str, str], timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, str]:
    """Of ``{name: sentinel base URL}``, the nodes a person cordoned, each with its reason. A sentinel that does not
    answer counts as not cordoned: the node is rolled, as before it had a sentinel."""
    names = list(sentinels)
    try:
        reasons = _ask_all([f"{sentinels[n]}/state" for n in names], timeout_s, _cordon_reason, None)
    except Exception:
        return {}
    return {n: r for n, r in zip(names, reasons, strict=True) if r is not None}
