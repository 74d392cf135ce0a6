"""Plain `pulumi up` — the CLI a user types, not the wrapper — with the real engine, on a stack written exactly as
docs/pulumi.md shows (the fleet in `Pulumi.<stack>.yaml`, a pinned `host_key` per host, the secrets set with
`pulumi config set --secret`), against the lab: converge + smoke gate per host, no-op re-run, a profile change
that touches one host (its `pulumi up` killed with SIGKILL mid-rollout and run again after `pulumi cancel`), a failing
batch that stops the rollout, no secret in state or logs, destroy."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.converge.rollout_helpers import router
from tests.fixtures_lab import STAMP
from vllm_fleet.deploy.ansible import PlaybookResult
from vllm_fleet.lab.stack import lab_fleet
from vllm_fleet.probes.smoke import wait_healthy

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
UNIT = "vllm-main.service"
JOURNAL = "/var/lib/vllm-fleet/main.rollout.json"


def ssh(site: Any, ip: str, command: str) -> str:
    import subprocess

    from vllm_fleet.lab.ssh import ssh_argv

    argv = ssh_argv(ip, Path(site.state.ssh_key), Path(site.state.known_hosts), command)
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def engine() -> Any:
    from vllm_fleet.deploy.engine import ensure_engine

    return ensure_engine()


def _with_stack(args: tuple[str, ...], stack: str) -> list[str]:
    """``--stack`` before a ``--`` that ends the options (``config set --secret NAME -- VALUE``)."""
    if "--" in args:
        i = args.index("--")
        return [*args[:i], "--stack", stack, *args[i:]]
    return [*args, "--stack", stack]


class Cli:
    """The `pulumi` CLI on one stack, as a user runs it (the engine's PATH, PULUMI_HOME, backend, passphrase)."""

    def __init__(self, engine: Any, stack: str) -> None:
        self.engine, self.stack = engine, stack
        self.file = ROOT / f"Pulumi.{stack}.yaml"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.engine.env()}
        proc = subprocess.run(
            ["pulumi", "--non-interactive", *_with_stack(args, self.stack)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(
                f"pulumi {' '.join(args[:2])} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )
        return proc

    def start(self, *args: str) -> subprocess.Popen[str]:
        """``pulumi <args>`` started, not waited for (to be killed mid-run)."""
        return subprocess.Popen(
            ["pulumi", "--non-interactive", *_with_stack(args, self.stack)], cwd=ROOT,
            env={**os.environ, **self.engine.env()}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def write_fleet(self, fleet: dict[str, Any]) -> None:
        """The fleet as YAML in the stack file, beside what `pulumi stack init` and `config set` wrote."""
        data = yaml.safe_load(self.file.read_text()) or {}
        data.setdefault("config", {})["vllm-fleet:fleet"] = fleet
        self.file.write_text(yaml.safe_dump(data, sort_keys=False))

    def up(self, log: list[str], check: bool = True) -> dict[str, int]:
        proc = self.run("up", "--yes", "--skip-preview", "--color", "never", check=check)
        log += [proc.stdout, proc.stderr]
        if proc.returncode != 0:
            return {"failed": 1}
        history = json.loads(self.run("stack", "history", "--json", "--show-secrets=false").stdout)
        return dict(history[0].get("resourceChanges") or {})


class Steps:
    """Each step's wall time, printed at the end (where this test's time goes)."""

    def __init__(self) -> None:
        self.last, self.times = time.monotonic(), dict[str, float]()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.times[name], self.last = now - self.last, now

    def __str__(self) -> str:
        return ", ".join(f"{name} {seconds:.0f} s" for name, seconds in self.times.items())


def descendants(pid: int) -> list[int]:
    """Every process started under ``pid``, in any session (ansible-runner gives ansible-playbook its own)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                status = (proc / "status").read_text()
            except OSError:
                continue
            ppid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), 0)
            children.setdefault(ppid, []).append(int(proc.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def crash(proc: subprocess.Popen[str]) -> None:
    """The controller dying mid-run: `pulumi` and everything it started stopped at once, then SIGKILLed."""
    tree = [proc.pid, *descendants(proc.pid)]
    for pid in tree:  # frozen first, so nothing starts a child between the listing and the kill
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    for pid in [*tree, *(d for p in tree for d in descendants(p))]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def main_pid(site: Any, ip: str) -> str:
    return ssh(site, ip, f"systemctl show -p MainPID --value {UNIT}").strip()


def journal(site: Any, ip: str) -> dict[str, Any]:
    text = ssh(site, ip, f"cat {JOURNAL} 2>/dev/null || true")
    return json.loads(text) if text.strip() else {}


@pytest.fixture(scope="module")
def lab_stack(engine: Any, site: Any, first_converge: PlaybookResult) -> Iterator[Cli]:
    cli = Cli(engine, f"e2e-{secrets.token_hex(3)}")
    cli.run("stack", "init", "--secrets-provider", "passphrase")
    try:
        yield cli
    finally:
        cli.run("stack", "rm", "--force", "--yes", check=False)
        cli.file.unlink(missing_ok=True)


def test_pulumi_lifecycle(lab_stack: Cli, site: Any, engine: Any, capsys: pytest.CaptureFixture[str]) -> None:
    cli = lab_stack
    steps = Steps()
    api_key = "sk-lab-" + secrets.token_hex(16)
    fleet = lab_fleet(site.state, site.model_dir)
    assert all(h["host_key"].startswith("ssh-ed25519 ") for h in fleet["hosts"])  # pinned, as the docs show
    # Batches: the canary alone, then the other two at once (a first up on serving hosts rolls them as a rollout).
    # With rollout.analysis the canary is judged against the other two over a 5 s window before they start (no
    # warm-up: on an idle lab there is nothing to warm, and the analysis is inconclusive either way).
    fleet["rollout"] = {"batch_size": 2, "analysis": {"window_s": 5, "warmup_s": 0}}
    # The secrets exactly as docs/pulumi.md says: `pulumi config set --secret <name> -- <value>`.
    cli.run("config", "set", "--secret", "sshPrivateKey", "--", Path(site.state.ssh_key).read_text())
    cli.run("config", "set", "--secret", "apiKey", "--", api_key)
    cli.write_fleet(fleet)
    stack_file = cli.file.read_text()
    assert "knownHostsFile" not in stack_file and api_key not in stack_file  # nothing the docs do not show
    log: list[str] = []

    # 1. First `pulumi up`: every host converged and smoke-gated, ending serving (now behind the API key). The
    #    canary has no record of a full converge: it gets one, which records it. The others' records (the lab's
    #    first converge wrote the digest this program computes) match: only their servers are rolled.
    stamp = f"stat -c '%Y %s' {STAMP} 2>/dev/null || echo none"
    canary, *others = site.state.hosts
    assert ssh(site, canary.ip, stamp).strip() == "none"
    recorded = {h.name: ssh(site, h.ip, stamp) for h in others}
    assert all(r.split()[1] == "65" for r in recorded.values()), recorded  # a sha256 and a newline
    first = cli.up(log)
    assert ssh(site, canary.ip, stamp).split()[1] == "65"  # the full converge recorded itself
    assert {h.name: ssh(site, h.ip, stamp) for h in others} == recorded  # no full converge on the others
    assert first.get("create", 0) > 0, first
    # The canary's analysis ran (under the program's command, in its converge) on an idle lab: too few requests to
    # judge, so inconclusive and promoted, with the figures of both sides in its journal.
    analysis = journal(site, canary.ip).get("analysis") or {}
    assert analysis.get("decision") == "inconclusive", analysis
    assert analysis["figures"]["baseline"]["requests"] == 0 and "too few finished requests" in analysis["reasons"][0]
    nodes = json.loads(cli.run("stack", "output", "nodes", "--json").stdout)
    assert [n["host"] for n in nodes] == [h.name for h in site.state.hosts]
    for n in nodes:
        assert httpx.get(f"{n['endpoint']}/v1/models", timeout=10).status_code == 401  # key required
        ok = httpx.get(f"{n['endpoint']}/v1/models", headers={"Authorization": f"Bearer {api_key}"}, timeout=10)
        assert ok.status_code == 200

    steps.done("first up")
    # 2. No-op: nothing changes, no Ansible runs.
    again = cli.up(log)
    assert set(again) == {"same"}, again

    steps.done("no-op up")
    # 3. A profile change on one host re-converges only that host, and only its server: the host's record of its
    #    last full converge (the driver, toolkit and vLLM install) matches, so those are skipped, not re-checked.
    #    That `pulumi up` is killed with SIGKILL (with everything it started: ansible-playbook too) once the host
    #    runs its new server, out of the router, as a controller crash would: the next `up` is refused by the lock
    #    the dead run left, `pulumi cancel` removes it, and the `up` after that finishes the rollout without a
    #    second restart of that host and puts it back in the router. No other host is touched.
    first_host, second, third = site.state.hosts
    full_converge = ssh(site, second.ip, stamp)
    untouched = {h.name: main_pid(site, h.ip) for h in (first_host, third)}
    pid0 = main_pid(site, second.ip)
    fleet["hosts"][1]["overrides"] = {"scheduler": {"max_num_seqs": 6}}
    cli.write_fleet(fleet)
    run = cli.start("up", "--yes", "--skip-preview", "--color", "never")
    deadline, killed = time.monotonic() + 600, dict[str, Any]()
    while time.monotonic() < deadline and run.poll() is None:
        state = journal(site, second.ip)
        pid = main_pid(site, second.ip)
        if state.get("phase") == "restarting" and pid not in ("0", pid0):
            crash(run)
            killed = {"pid": pid, "journal": journal(site, second.ip)}
            break
        time.sleep(0.3)
    assert killed, f"the up was never seen restarting {second.name}: {run.communicate()[0][-3000:]}"
    assert killed["journal"]["phase"] == "restarting"
    assert router(site).state(second.name).admin == "drain"  # killed while out of the router
    locked = cli.run("up", "--yes", "--skip-preview", "--color", "never", check=False)
    assert locked.returncode != 0 and "pulumi cancel" in locked.stderr + locked.stdout, locked.stderr[-2000:]
    assert main_pid(site, second.ip) == killed["pid"]  # the refused run touched nothing
    cli.run("cancel", "--yes")
    # The killed run's new server is still starting: once it answers, the resumed `up` sees the same serving hosts
    # (and so the same canary baseline) as the killed one. Were it still starting, that host would be no baseline
    # host for this run, and the canary's converge would run again (a no-op on the canary: same config, no restart).
    wait_healthy(f"http://{second.ip}:8000", {}, time.monotonic() + 300)
    resumed = cli.up(log)
    assert resumed.get("update", 0) in (1, 2), resumed  # that host's converge (and its smoke gate), nothing else
    assert main_pid(site, second.ip) == killed["pid"]  # the restart that happened was verified, not repeated
    after = journal(site, second.ip)
    assert after["phase"] == "done" and after["target"] == killed["journal"]["target"]
    assert "max-num-seqs: 6" in ssh(site, second.ip, "cat /etc/vllm/main.yaml")
    assert ssh(site, second.ip, stamp) == full_converge  # no full converge ran: only the server was rolled
    back = router(site).state(second.name)
    assert (back.admin, back.operational) == ("ready", "up")  # no host left drained
    assert {h.name: main_pid(site, h.ip) for h in (first_host, third)} == untouched  # the others not restarted
    assert "max-num-seqs: 8" in ssh(site, first_host.ip, "cat /etc/vllm/main.yaml")
    assert set(cli.up(log)) == {"same"}  # state and hosts agree: nothing left pending

    steps.done("one host killed and resumed")
    # 4. A bad profile on the first batch (the canary) fails the update; the next batch is not touched; the node
    #    keeps serving.
    before_pid = ssh(site, first_host.ip, f"systemctl show -p MainPID --value {UNIT}").strip()
    #    The planner takes a model path it cannot see (the weights are the host's); the host has no such model, so
    #    the release's own config check refuses it there, before any restart.
    fleet["hosts"][0]["overrides"] = {"model": {"path": "/opt/vllm-fleet/models/not-staged"}}
    fleet["hosts"][1]["overrides"] = {"scheduler": {"max_num_seqs": 5}}
    cli.write_fleet(fleet)
    cli.run("preview", "--color", "never")  # the fault is the host's: the plan is valid (a refused plan fails here)
    assert cli.up(log, check=False) == {"failed": 1}
    assert f"{first_host.name}-converge" in log[-2] + log[-1]  # the first batch's converge failed the update
    assert "max-num-seqs: 8" in ssh(site, first_host.ip, "cat /etc/vllm/main.yaml")  # last-known-good restored
    assert "max-num-seqs: 6" in ssh(site, second.ip, "cat /etc/vllm/main.yaml")  # later batch not rolled
    ok = httpx.get(f"{nodes[0]['endpoint']}/health", timeout=10)
    assert ok.status_code == 200
    assert ssh(site, first_host.ip, f"systemctl is-active {UNIT}").strip() == "active"
    assert before_pid  # it was serving before

    steps.done("a failing first batch")
    # 5. No secret in plain text: the state files the backend keeps (current, history, backups) and everything
    #    the engine printed or logged, and the stack file in the project.
    state_text = (
        "".join(
            p.read_text(errors="ignore")
            for p in Path(engine.backend, ".pulumi").rglob("*")
            if p.is_file() and cli.stack in str(p)
        )
        + cli.file.read_text()
    )
    assert '"ciphertext"' in state_text  # the secrets are there, encrypted
    key_text = Path(site.state.ssh_key).read_text().strip()
    key_body = key_text.splitlines()[1]
    logs = "\n".join(log) + "".join(
        p.read_text(errors="ignore") for p in Path(engine.home, "logs").rglob("*") if p.is_file()
    )
    for haystack in (state_text, logs):
        assert api_key not in haystack
        assert key_body not in haystack

    steps.done("secrets")
    # 6. Destroy: services stopped and disabled, nothing of the node's config left; disks untouched.
    fleet["hosts"][0]["overrides"] = {}
    cli.write_fleet(fleet)
    cli.run("destroy", "--yes", "--skip-preview", "--color", "never")
    for h in site.state.hosts:
        assert ssh(site, h.ip, f"systemctl is-active {UNIT} || true").strip() in ("inactive", "unknown")
        assert ssh(site, h.ip, "test -e /etc/vllm/main.yaml && echo present || echo gone").strip() == "gone"
    steps.done("destroy")
    with capsys.disabled():
        print(f"\nPulumi lifecycle: {steps}")
