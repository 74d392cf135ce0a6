"""The node being tuned, through the same paths as a rollout: the router hook to take it out and put it back,
`playbooks/rollout.yml` to apply a candidate (the config checked by the installed vLLM, the rollout journal, the
restart, health and smoke, the last good config restored when it does not come up), and the streamed-completion
client to measure it. Every read of the node is bounded (``trust.node_reads``)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vllm_fleet.catalog import load_model
from vllm_fleet.deploy.ansible import InventoryHost, run_playbook
from vllm_fleet.fleet.plan import ConvergeInput, FleetError, FleetPlan, NodeSpec
from vllm_fleet.fleet.role_vars import extravars, sentinel_port
from vllm_fleet.fleet.spec import plan_fleet
from vllm_fleet.probes.smoke import served_name
from vllm_fleet.probes.stream_client import StreamTiming, closed_loop
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.trust.node_reads import DEFAULT_BOUNDS, NodeReadError, ReadBounds, get_one, run_sync
from vllm_fleet.trust.node_text import printable
from vllm_fleet.tune.workload import Workload

READY_BOUNDS = ReadBounds(request_s=5.0)
ROUTER_TIMEOUT_S = 660
"""The router hook waits for the host to drain (its own bound is 600 s in a rollout)."""


class TuneError(ValueError):
    """Bad input or a fleet that cannot be tuned, said before any host is touched."""


@dataclass
class Target:
    """A host of a fleet spec (a stack config's ``vllm-fleet:fleet``) and the secrets to reach it."""

    host: str
    fleet: dict[str, Any]
    ssh_key: str | None = None
    api_key: str | None = None


@dataclass
class Node:
    plan: FleetPlan
    spec: NodeSpec
    target: Target
    log: Callable[[str], None] = print
    failures: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, target: Target, log: Callable[[str], None] = print) -> Node:
        try:
            plan = plan_fleet(target.fleet)
        except FleetError as err:
            raise TuneError(f"the fleet cannot be planned: {err}") from None
        by_name = {n.name: n for n in plan.nodes}
        if target.host not in by_name:
            names = ", ".join(sorted(by_name)) or "(none)"
            raise TuneError(f"HOST {printable(target.host)!r} is not in the fleet; its hosts are {names}")
        return cls(plan, by_name[target.host], target, log)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def router_command(self) -> list[str]:
        cmd = self.plan.role_vars.get("vllm_service_router_command") or []
        return [str(c) for c in cmd]

    def _ready_url(self, n: NodeSpec) -> tuple[str, str]:
        port = sentinel_port(self.plan.role_vars)
        return (f"http://{n.address}:{port}", "/ready") if port else (n.endpoint, "/health")

    def others_serving(self) -> list[str]:
        """The fleet's other hosts that answer ready now (their sentinel's /ready, else vLLM's /health)."""
        out = []
        for n in self.plan.nodes:
            if n.name == self.name:
                continue
            base, path = self._ready_url(n)
            try:
                if get_one(base, path, bounds=READY_BOUNDS).status == 200:
                    out.append(n.name)
            except NodeReadError:
                continue
        return out

    def router(self, action: str) -> str | None:
        """Tell the router ``drain`` or ``ready`` for this host (the fleet's router hook); an error text or None."""
        if not self.router_command:
            return None
        argv = [*self.router_command, action, self.name]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=ROUTER_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"the router hook ({argv[0]} … {action}) failed: {err}"
        if proc.returncode != 0:
            return (
                f"the router hook ({action}) exited {proc.returncode}: {printable((proc.stderr or proc.stdout)[-400:])}"
            )
        return None

    def _input_for(self, profile_file: Path | None) -> ConvergeInput:
        """The converge input of this host with ``profile_file`` (None: the fleet's own profile for it)."""
        if profile_file is None:
            return ConvergeInput.of(self.spec, self.plan.role_vars)
        fleet = dict(self.target.fleet)
        fleet["hosts"] = [
            {k: v for k, v in h.items() if k != "overrides"} | {"profile": str(profile_file)}
            if isinstance(h, dict) and h.get("name") == self.name
            else h
            for h in fleet.get("hosts", [])
        ]
        try:
            plan = plan_fleet(fleet)
        except FleetError as err:
            raise TuneError(f"the candidate cannot be planned: {err}") from None
        spec = next(n for n in plan.nodes if n.name == self.name)
        return ConvergeInput.of(spec, plan.role_vars)

    def apply(self, profile_file: Path | None) -> str | None:
        """Converge the server to the profile in ``profile_file`` (None: the fleet's own) with rollout.yml on this
        host alone, the router hook and the canary analysis off (the host stays out of the router); the failed
        tasks' messages (the installed vLLM's own error among them), or None when it serves the config."""
        node = self._input_for(profile_file)
        variables = extravars(node) | {"vllm_service_router_command": [], "vllm_fleet_canary_command": []}
        failures: list[str] = []

        def on_event(event: dict[str, Any]) -> bool:
            if event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
                data = event.get("event_data") or {}
                res = data.get("res") or {}
                if not (isinstance(res, dict) and res.get("_ansible_ignore_errors")) and not data.get("ignore_errors"):
                    msg = res.get("msg") if isinstance(res, dict) else None
                    failures.append(f"{data.get('task', '?')}: {printable(str(msg or res))[:1500]}")
            return True

        host = node.host
        target = InventoryHost(
            self.name,
            host["address"],
            host.get("ssh_user", "root"),
            host.get("ssh_port", 22),
            host_key=host.get("host_key"),
        )
        try:
            result = run_playbook(
                "rollout.yml",
                [target],
                variables,
                private_key=self.target.ssh_key,
                api_key=self.target.api_key,
                quiet=True,
                event_handler=on_event,
            )
        except (ValueError, RuntimeError, OSError) as err:  # a key ssh-agent refuses, a host without a pinned key
            return f"rollout.yml could not run: {printable(str(err))[:500]}"
        if result.ok:
            return None
        return "; ".join(failures) or f"rollout.yml ended {result.status} (rc {result.rc})"

    def measure(
        self, profile: DecodeProfile, workload: Workload, repeat: int
    ) -> list[tuple[int, list[StreamTiming | str], float]]:
        """One repeat of the workload: warm-up requests (discarded), then each concurrency level in turn."""
        headers = {"Authorization": f"Bearer {self.target.api_key}"} if self.target.api_key else {}
        url = f"http://{self.spec.address}:{profile.frontend.port}"
        model = served_name(profile)
        vocab = load_model(profile.model.model).vocab_size
        bounds = DEFAULT_BOUNDS
        top = max(workload.concurrency)
        warm = workload.batch(vocab, workload.warmup_requests, f"warmup:{repeat}")
        run_sync(closed_loop(url, headers, model, top, warm, bounds, keep_errors=True))
        out = []
        for c in workload.concurrency:
            batch = workload.batch(vocab, workload.requests_at(c), f"{repeat}:{c}")
            results, wall = run_sync(closed_loop(url, headers, model, c, batch, bounds, keep_errors=True))
            out.append((c, results, wall))
        return out


def write_profile(profile: DecodeProfile, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(profile.model_dump(mode="json", exclude_none=True), sort_keys=False), encoding="utf-8"
    )
    return path
