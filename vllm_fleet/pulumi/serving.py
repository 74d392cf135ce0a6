"""Which hosts are serving now: those the rollout must protect (drain, canary, batches); the others are new
(or down) and have nothing to protect, so they are provisioned in parallel.

"Serving" is what a client sees: ``GET <endpoint>/health`` answers 200 (vLLM answers it without the API key).
All hosts are asked at once with a short timeout, so a fleet of hundreds costs about one timeout, not one each.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

import httpx

from vllm_fleet.trust.node_reads import NodeReadError, get

PROBE_TIMEOUT_S = 2.0
"""One host's budget: a serving vLLM answers /health in milliseconds."""
MAX_CONNECTIONS = 256


async def _probe_all(endpoints: list[str], timeout_s: float) -> list[bool]:
    limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits, trust_env=False) as client:

        async def one(endpoint: str) -> bool:
            try:  # bounded as every read from a node (node_reads): the whole answer within timeout_s
                return (await get(client, f"{endpoint}/health", deadline_s=timeout_s)).status == 200
            except NodeReadError:
                return False

        return list(await asyncio.gather(*(one(e) for e in endpoints)))


def serving_endpoints(endpoints: Iterable[str], timeout_s: float = PROBE_TIMEOUT_S) -> set[str]:
    """The endpoints (``http://host:port``) whose /health answers 200 now.

    Runs its own event loop in a thread: the caller (the Pulumi program) may already be inside one."""
    wanted = list(dict.fromkeys(endpoints))
    result: list[bool] = []

    def run() -> None:
        try:
            result.extend(asyncio.run(_probe_all(wanted, timeout_s)))
        except Exception:  # the probe itself broke: count every host as serving, the cautious order
            result[:] = [True] * len(wanted)

    thread = threading.Thread(target=run, name="serving-probe")
    thread.start()
    thread.join()
    return {e for e, ok in zip(wanted, result, strict=True) if ok}
