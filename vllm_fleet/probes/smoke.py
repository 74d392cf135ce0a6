"""`vllm-fleet smoke`: health, model, a small probe load and the /metrics checks of a live node."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from xml.etree import ElementTree as ET

from vllm_fleet.probes.smoke_checks import Check, Scrape, check_metrics, parse_scrape
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.planner import Plan, plan
from vllm_fleet.trust.node_reads import (
    DEFAULT_BOUNDS,
    Answer,
    NodeReadError,
    ReadBounds,
    check_url,
    get,
    get_one,
    run_sync,
)
from vllm_fleet.trust.node_reads import client as node_client

PASS, FAIL, CANNOT_CHECK = 0, 1, 2
PROBE_S = 120.0
"""One probe completion, whole."""
PROBE_PROMPTS = (
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "One, two, three, four, five, six, seven, eight,",
    "vLLM serves large language models with paged attention and continuous batching;",
    "A sovereign deployment keeps data on premises, so the operators",
)


@dataclass
class SmokeResult:
    url: str
    profile: str
    checks: list[Check] = field(default_factory=list)
    reason: str | None = None
    """Why the node could not be checked (exit 2)."""

    @property
    def exit_code(self) -> int:
        if self.reason is not None:
            return CANNOT_CHECK
        return FAIL if any(c.status == "fail" for c in self.checks) else PASS

    def to_dict(self) -> dict[str, object]:
        return {
            "url": self.url,
            "profile": self.profile,
            "result": {PASS: "pass", FAIL: "fail", CANNOT_CHECK: "could not check"}[self.exit_code],
            "reason": self.reason,
            "checks": [c.__dict__ for c in self.checks],
        }

    def junit(self) -> str:
        suite = ET.Element(
            "testsuite",
            name=f"vllm-fleet smoke {self.url}",
            tests=str(len(self.checks) or 1),
            failures=str(sum(c.status == "fail" for c in self.checks)),
            errors="1" if self.reason else "0",
            skipped=str(sum(c.status == "skip" for c in self.checks)),
        )
        if self.reason:
            case = ET.SubElement(suite, "testcase", classname=self.profile, name="reachable")
            ET.SubElement(case, "error", message=self.reason)
        for c in self.checks:
            case = ET.SubElement(suite, "testcase", classname=self.profile, name=c.name)
            if c.status == "fail":
                ET.SubElement(case, "failure", message=c.detail)
            elif c.status == "skip":
                ET.SubElement(case, "skipped", message=c.detail)
            else:
                ET.SubElement(case, "system-out").text = c.detail
        from vllm_fleet.trust.node_text import xml_safe_tree  # the url, reason and details hold what a node sent

        return ET.tostring(xml_safe_tree(suite), encoding="unicode", xml_declaration=True)


def served_name(profile: DecodeProfile) -> str:
    return profile.model.served_model_name or profile.model.serve_model


def wait_healthy(url: str, headers: dict[str, str], deadline: float, bounds: ReadBounds = DEFAULT_BOUNDS) -> str | None:
    """None once /health answers 200, else the last error when the deadline (monotonic) passes. Each try is
    bounded by what is left of the deadline, so a node that drips its answer cannot hold the wait past it."""
    last = "no answer"
    while (left := deadline - time.monotonic()) > 0:
        try:
            answer = get_one(url, "/health", headers, replace(bounds, request_s=max(min(5.0, left), 0.1)))
            if answer.status == 200:
                return None
            last = f"/health answered {answer.status}"
        except NodeReadError as err:
            last = str(err)
        time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))
    return last


def _models(answer: Answer) -> list[str]:
    """The model ids of an OpenAI ``/v1/models`` answer; ValueError naming what is wrong with it."""
    if answer.status != 200:
        raise ValueError(f"/v1/models answered {answer.status}")
    try:
        data = answer.json()
    except ValueError:
        raise ValueError(f"/v1/models answered {answer.content_type or 'something'} that is not JSON") from None
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in items):
        raise ValueError("/v1/models: not an OpenAI model list ({'data': [{'id': ...}, ...]})")
    return [m["id"] for m in items]


def _scrape(url: str, headers: dict[str, str], bounds: ReadBounds) -> Scrape:
    answer = get_one(url, "/metrics", headers, bounds)
    if answer.status != 200:
        raise ValueError(f"/metrics answered {answer.status}")
    return parse_scrape(answer.text)


async def _probe(
    url: str, headers: dict[str, str], model: str, requests: int, max_tokens: int, bounds: ReadBounds
) -> list[str]:
    async with node_client(url, headers, bounds) as http:

        async def one(i: int) -> str:
            body = {
                "model": model,
                "prompt": PROBE_PROMPTS[i % len(PROBE_PROMPTS)],
                "max_tokens": max_tokens,
                "temperature": 0,
            }
            answer = await get(http, "/v1/completions", bounds, method="POST", body=body, deadline_s=PROBE_S)
            if answer.status != 200:
                raise NodeReadError(f"/v1/completions answered {answer.status}: {answer.text[:200]}")
            try:
                return str(answer.json()["choices"][0]["text"])
            except (ValueError, KeyError, IndexError, TypeError):
                raise NodeReadError("/v1/completions: not an OpenAI completion") from None

        return list(await asyncio.gather(*(one(i) for i in range(requests))))


def smoke(
    url: str,
    profile: DecodeProfile,
    *,
    timeout_s: float = 120,
    requests: int = 4,
    max_tokens: int = 32,
    api_key: str | None = None,
    bounds: ReadBounds = DEFAULT_BOUNDS,
) -> SmokeResult:
    """``timeout_s``: how long to wait for /health; every read after it is bounded by ``bounds`` (node_reads)."""
    result = SmokeResult(url=url, profile=profile.name)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        check_url(url)  # a URL that is not one: refused before any wait
    except ValueError as err:
        result.reason = str(err)
        return result
    problem = wait_healthy(url, headers, time.monotonic() + timeout_s, bounds)
    if problem:
        result.reason = f"{url} not healthy within {timeout_s:g} s: {problem}"
        return result
    try:
        models = _models(get_one(url, "/v1/models", headers, bounds))
        before = _scrape(url, headers, bounds)
    except (NodeReadError, ValueError) as err:
        result.reason = f"{url}: cannot read /v1/models or /metrics: {err}"
        return result
    want = served_name(profile)
    result.checks.append(
        Check("model", "pass" if want in models else "fail", f"serves {models}; profile wants {want!r}")
    )
    if want not in models:
        return result
    try:
        texts = run_sync(_probe(url, headers, want, requests, max_tokens, bounds))
    except NodeReadError as err:
        result.checks.append(Check("probe", "fail", f"completions failed: {err}"))
        return result
    result.checks.append(Check("probe", "pass", f"{len(texts)} concurrent completions of {max_tokens} tokens"))
    try:
        after = _scrape(url, headers, bounds)
    except (NodeReadError, ValueError) as err:
        result.reason = f"{url}: /metrics failed after the probe: {err}"
        return result
    result.checks.extend(check_metrics(profile, after, before, plan=_plan_or_none(profile)))
    return result


def _plan_or_none(profile: DecodeProfile) -> Plan | None:
    try:
        return plan(profile)
    except KeyError:
        return None
