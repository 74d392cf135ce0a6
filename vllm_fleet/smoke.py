"""`vllm-fleet smoke`: health, model, a small probe load and the /metrics checks of a live node."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from xml.etree import ElementTree as ET

import httpx

from vllm_fleet.planner import Plan, plan
from vllm_fleet.profile import DecodeProfile
from vllm_fleet.smoke_checks import Check, check_metrics, parse_scrape

PASS, FAIL, CANNOT_CHECK = 0, 1, 2
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
        return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def served_name(profile: DecodeProfile) -> str:
    return profile.model.served_model_name or profile.model.serve_model


def wait_healthy(client: httpx.Client, deadline: float) -> str | None:
    """None once /health answers 200, else the last error when the deadline passes."""
    last = "no answer"
    while True:
        try:
            r = client.get("/health", timeout=5)
            if r.status_code == 200:
                return None
            last = f"/health answered {r.status_code}"
        except httpx.HTTPError as err:
            last = f"{type(err).__name__}: {err}"
        if time.monotonic() >= deadline:
            return last
        time.sleep(1)


async def _probe(url: str, headers: dict[str, str], model: str, requests: int, max_tokens: int) -> list[str]:
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as client:

        async def one(i: int) -> str:
            body = {
                "model": model,
                "prompt": PROBE_PROMPTS[i % len(PROBE_PROMPTS)],
                "max_tokens": max_tokens,
                "temperature": 0,
            }
            r = await client.post("/v1/completions", json=body)
            r.raise_for_status()
            return str(r.json()["choices"][0]["text"])

        return list(await asyncio.gather(*(one(i) for i in range(requests))))


def smoke(
    url: str,
    profile: DecodeProfile,
    *,
    timeout_s: float = 120,
    requests: int = 4,
    max_tokens: int = 32,
    api_key: str | None = None,
) -> SmokeResult:
    result = SmokeResult(url=url, profile=profile.name)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=url, headers=headers) as client:
        problem = wait_healthy(client, time.monotonic() + timeout_s)
        if problem:
            result.reason = f"{url} not healthy within {timeout_s:g} s: {problem}"
            return result
        try:
            models = [m["id"] for m in client.get("/v1/models", timeout=10).raise_for_status().json()["data"]]
            before = parse_scrape(client.get("/metrics", timeout=10).raise_for_status().text)
        except (httpx.HTTPError, KeyError, ValueError) as err:
            result.reason = f"{url}: cannot read /v1/models or /metrics: {err}"
            return result
        want = served_name(profile)
        result.checks.append(
            Check("model", "pass" if want in models else "fail", f"serves {models}; profile wants {want!r}")
        )
        if want not in models:
            return result
        try:
            texts = asyncio.run(_probe(url, headers, want, requests, max_tokens))
        except httpx.HTTPError as err:
            result.checks.append(Check("probe", "fail", f"completions failed: {err}"))
            return result
        result.checks.append(Check("probe", "pass", f"{len(texts)} concurrent completions of {max_tokens} tokens"))
        try:
            after = parse_scrape(client.get("/metrics", timeout=10).raise_for_status().text)
        except httpx.HTTPError as err:
            result.reason = f"{url}: /metrics failed after the probe: {err}"
            return result
    result.checks.extend(check_metrics(profile, after, before, plan=_plan_or_none(profile)))
    return result


def _plan_or_none(profile: DecodeProfile) -> Plan | None:
    try:
        return plan(profile)
    except KeyError:
        return None
