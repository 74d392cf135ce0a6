#!/usr/bin/env python3
"""`pulumi preview` of generated fleets (10, 200, 1000 hosts) vs an engine-floor program of the same shape.

    .venv/bin/python bench/fleet_scale.py [--hosts 10,200,1000] [--rounds 2] [--no-ckpt] [--profile DIR]

Each fleet is a stack config like Pulumi.example.yaml: the 4 built-in GPU profiles in turn (two with per-host
overrides), the example's role_vars, ``batch_size: 10``, a valid pinned ed25519 host_key per host, addresses in
198.18.0.0/15 (RFC 2544's benchmarking net, never routed) so no host is reached: each counts as new. The fleet is
inline in the stack config while it fits the 128 KiB config variable (≈ 560 hosts), else in a fleet file the
stack names (``vllm-fleet:fleetFile``). The floor is a Python program on the same CLI, language host, provider
and venv that registers the same resources in the same order — the API key's version command (the key from the
stack's config), and per host one ComponentResource with 3 `pulumi_command` local commands (the default `command`
provider), preflight → converge → smoke, hosts in waves of ``provision_parallel`` each after
the last wave's gates (every host is new, as in the program) — with small inputs and nothing else. The order is
the rollout's and costs the engine the most: each link waits for a step, and each step checkpoints the snapshot.

For each: wall time of `pulumi preview` (the best of ``--rounds``, after a cold run that fills the plan cache),
and the peak memory of the whole process tree (the sum of VmRSS of `pulumi` and its descendants, sampled every
20 ms; the `pulumi` CLI's own peak beside it). Prints the ratios; goal at 200 hosts: ≤ 1.5× time, ≤ 2× memory.
With ``--no-ckpt`` the program is also previewed with PULUMI_SKIP_CHECKPOINTS=true: the engine (3.274)
serialises and re-encrypts the whole snapshot after every step even in a preview, which costs O(steps × secret
state) — why the program keeps its secrets once per stack (docs/scale.md).
``--profile DIR`` also runs the program under cProfile inside the language host (DIR/<n>.prof).
Everything lives in a temporary directory: its own file:// backend and plan cache; nothing of the checkout's.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vllm_fleet.deploy.engine import ensure_engine
from vllm_fleet.fleet.spec import RolloutSpec
from vllm_fleet.project.paths import project_root

PROFILES: list[tuple[str, str, dict[str, Any]]] = [
    ("rtx4090", "rtx4090-qwen2.5-7b-spec", {"max_num_seqs": 16}),
    ("rtx4090", "rtx4090-qwen2.5-7b-awq-fp8kv", {}),
    ("l40", "l40-qwen2.5-14b-spec", {"max_num_seqs": 4, "max_num_batched_tokens": 16384}),
    ("h100-sxm", "h100-sxm-llama3.1-8b-eagle3", {}),
]

FLOOR_PROGRAM = '''"""The engine's floor: vllm-fleet's resource shape and ordering, small inputs."""
import pulumi

from pulumi_command.local import Command as LocalCommand


class Node(pulumi.ComponentResource):
    def __init__(self, name: str, after: list[pulumi.Resource]) -> None:
        super().__init__("floor:index:Node", name, None, pulumi.ResourceOptions(depends_on=after))
        child = pulumi.ResourceOptions(parent=self)
        preflight = LocalCommand(f"{name}-preflight", create="true", opts=child)
        after_preflight = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[preflight]))
        converge = LocalCommand(f"{name}-converge", create="true", opts=after_preflight)
        after_converge = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[converge]))
        self.gate = LocalCommand(f"{name}-smoke", create="true", opts=after_converge)
        self.register_outputs({})


cfg = pulumi.Config()
api_key = cfg.require_secret("apiKey")
LocalCommand("api-key-version", create="true", environment={"K": api_key})
# The program's order for new hosts: waves of `provision_parallel`, each after the last one's gates.
hosts, wave_size = cfg.require_int("hosts"), cfg.require_int("wave")
wave: list[pulumi.Resource] = []
for start in range(0, hosts, wave_size):
    wave = [Node(f"h{i}", wave).gate for i in range(start, min(hosts, start + wave_size))]
'''


def resources_of(n: int) -> int:
    """Resources a preview of n hosts creates: the stack, the API key's version command, and per host a component
    with its preflight, converge and smoke commands (the default `command` provider is not counted)."""
    return 2 + 4 * n


CONFIG_LIMIT = 128 * 1024 - 1024
"""The language host gets the stack config in one environment variable (PULUMI_CONFIG); Linux refuses one over
128 KiB (MAX_ARG_STRLEN: `fork/exec …/python: argument list too long`), the rest of the config counted in."""

PROFILED_MAIN = """import cProfile
import os

from vllm_fleet.pulumi.program import run

cProfile.run("run()", os.environ["VLLM_FLEET_BENCH_PROFILE"])
"""


def host_key(i: int) -> str:
    """A well-formed ssh-ed25519 public key (wire format: the type, then 32 key bytes), unique per host."""
    kind = b"ssh-ed25519"
    key = i.to_bytes(32, "big")
    wire = len(kind).to_bytes(4, "big") + kind + len(key).to_bytes(4, "big") + key
    return f"ssh-ed25519 {base64.b64encode(wire).decode()}"


def fleet(n: int) -> dict[str, Any]:
    example = yaml.safe_load((project_root() / "Pulumi.example.yaml").read_text())["config"]["vllm-fleet:fleet"]
    hosts = []
    for i in range(n):
        hardware, profile, overrides = PROFILES[i % len(PROFILES)]
        host: dict[str, Any] = {
            "name": f"gpu-{i:04d}",
            "address": f"198.18.{i // 250}.{i % 250 + 1}",
            "host_key": host_key(i + 1),
            "hardware": hardware,
            "profile": profile,
        }
        if overrides:
            host["overrides"] = dict(overrides)
        hosts.append(host)
    return {"rollout": {"batch_size": 10}, "role_vars": example["role_vars"], "hosts": hosts}


@dataclass
class Run:
    seconds: float
    tree_mb: float
    cli_mb: float
    out: str
    cpu_s: float = 0.0
    """User + system CPU of `pulumi` and every process it waited for (language host, plugins): steadier than the
    wall time on a shared, loaded machine."""


def _rss_kb(pid: int) -> tuple[int, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace")
    except OSError:
        return 0, ""
    name, rss = "", 0
    for line in text.splitlines():
        if line.startswith("Name:"):
            name = line.split()[1]
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return rss, name


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text(encoding="ascii").split()]
    except OSError:
        pass
    return out


def measured(argv: list[str], cwd: Path, env: dict[str, str]) -> Run:
    """Run ``argv``; wall time and the peak RSS of its process tree (summed) and of the root process."""
    peak = {"tree": 0, "root": 0}
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            todo, total = [proc.pid], 0
            while todo:
                pid = todo.pop()
                rss, _name = _rss_kb(pid)
                total += rss
                if pid == proc.pid:
                    peak["root"] = max(peak["root"], rss)
                todo += _children(pid)
            peak["tree"] = max(peak["tree"], total)
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    _pid, status, usage = os.wait4(proc.pid, 0)  # the rusage counts the children pulumi waited for
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - start
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed in {cwd}:\n{out[-4000:]}")
    return Run(elapsed, peak["tree"] / 1024, peak["root"] / 1024, out, usage.ru_utime + usage.ru_stime)


class Bench:
    def __init__(self, tmp: Path, profile_dir: Path | None) -> None:
        engine = ensure_engine(lambda _m: None)
        self.tmp = tmp
        self.profile_dir = profile_dir
        (tmp / "state").mkdir()
        self.env = {
            **os.environ,
            **engine.env(),
            "PULUMI_BACKEND_URL": f"file://{tmp / 'state'}",
            "VLLM_FLEET_CACHE": str(tmp / "cache"),
        }
        passphrase = tmp / "passphrase"
        passphrase.write_text("bench")
        self.env["PULUMI_CONFIG_PASSPHRASE_FILE"] = str(passphrase)
        venv = Path(sys.executable).parent.parent
        runtime = {"name": "python", "options": {"toolchain": "pip", "virtualenv": str(venv)}}
        self.program = tmp / "program"
        self.floor = tmp / "floor"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "id")], check=True)
        self.ssh_key = (tmp / "id").read_text()
        for d, name in ((self.program, "vllm-fleet"), (self.floor, "vllm-fleet-floor")):
            d.mkdir()
            (d / "Pulumi.yaml").write_text(yaml.safe_dump({"name": name, "runtime": runtime}))
        shutil.copy(project_root() / "__main__.py", self.program / "__main__.py")
        (self.floor / "__main__.py").write_text(FLOOR_PROGRAM)

    def pulumi(self, cwd: Path, *args: str, stdin: str | None = None) -> None:
        subprocess.run(
            ["pulumi", *args], cwd=cwd, env=self.env, check=True, capture_output=True, text=True, input=stdin
        )

    def stack(self, cwd: Path, name: str, config: dict[str, Any], secret: dict[str, str]) -> None:
        self.pulumi(cwd, "stack", "init", name, "--secrets-provider", "passphrase")
        path = cwd / f"Pulumi.{name}.yaml"
        data = yaml.safe_load(path.read_text()) or {}
        data["config"] = config
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        for key, value in secret.items():
            self.pulumi(cwd, "config", "set", "--secret", "--stack", name, key, stdin=value)

    def preview(self, cwd: Path, name: str, extra: dict[str, str] | None = None) -> Run:
        argv = ["pulumi", "preview", "--stack", name, "--non-interactive", "--color", "never"]
        return measured(argv, cwd, {**self.env, **(extra or {})})

    def measure(self, n: int, rounds: int, no_ckpt: bool) -> dict[str, Any]:
        name = f"scale-{n}"
        spec = fleet(n)
        config: dict[str, Any] = {"vllm-fleet:smoke": True}
        if len(json.dumps(spec)) > CONFIG_LIMIT:  # over the config variable: a fleet file the stack names
            (self.program / f"fleet-{n}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
            config["vllm-fleet:fleetFile"] = f"fleet-{n}.yaml"
        else:
            config["vllm-fleet:fleet"] = spec
        secrets = {"sshPrivateKey": self.ssh_key, "apiKey": "k" * 48}
        self.stack(self.program, name, config, {f"vllm-fleet:{k}": v for k, v in secrets.items()})
        floor_config = {"vllm-fleet-floor:hosts": n, "vllm-fleet-floor:wave": RolloutSpec().provision_parallel}
        self.stack(self.floor, name, floor_config, {f"vllm-fleet-floor:{k}": v for k, v in secrets.items()})
        skip = {"PULUMI_SKIP_CHECKPOINTS": "true"}
        cold = self.preview(self.program, name, skip)  # fills the plan cache

        # Rounds alternate program and floor, so a change of the machine's load falls on both; the best of each.
        runs: list[tuple[Run, Run]] = [
            (self.preview(self.program, name), self.preview(self.floor, name)) for _ in range(rounds)
        ]
        program = min((p for p, _ in runs), key=lambda r: r.seconds)
        floor = min((f for _, f in runs), key=lambda r: r.seconds)
        skipped = self.preview(self.program, name, skip) if no_ckpt else None
        resources = resources_of(n)
        for run in (program, skipped, floor):
            if run and f"{resources} to create" not in run.out:
                raise SystemExit(f"preview of {n} hosts: expected {resources} creates:\n{run.out[-2000:]}")
        if self.profile_dir:
            self.profile_dir.mkdir(parents=True, exist_ok=True)
            prof = self.profile_dir / f"{n}.prof"
            (self.program / "__main__.py").write_text(PROFILED_MAIN)
            try:
                self.preview(self.program, name, {"VLLM_FLEET_BENCH_PROFILE": str(prof)})
            finally:
                shutil.copy(project_root() / "__main__.py", self.program / "__main__.py")
        return {
            "hosts": n,
            "resources": resources,
            "cold": cold,
            "program": program,
            "skip": skipped,
            "floor": floor,
            "fleet_file": "vllm-fleet:fleetFile" in config,
        }


def _cell(run: Run | None) -> str:
    return f"{run.seconds:>9.2f} {run.tree_mb:>5.0f} {run.cli_mb:>6.0f}" if run else f"{'':>9} {'':>5} {'':>6}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", default="10,200,1000", help="comma-separated fleet sizes")
    ap.add_argument("--rounds", type=int, default=2, help="timed previews of each (the best is shown)")
    ap.add_argument("--profile", type=Path, help="also write cProfile output of the program to this dir")
    ap.add_argument("--no-ckpt", action="store_true", help="also preview with PULUMI_SKIP_CHECKPOINTS=true")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.hosts.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-scale-") as tmp:
        bench = Bench(Path(tmp), args.profile)
        print(
            f"{'hosts':>5} {'res':>5} | {'program s':>9} {'MB':>5} {'cli MB':>6} | {'floor s':>9} {'MB':>5} "
            f"{'cli MB':>6} | {'time':>6} {'memory':>6} {'cpu':>6} | {'no-ckpt s':>9} {'MB':>5} {'cli MB':>6} | fleet",
            flush=True,
        )
        for n in sizes:
            r = bench.measure(n, args.rounds, args.no_ckpt)
            p, k, f = r["program"], r["skip"], r["floor"]
            row: dict[str, Any] = {
                "hosts": n,
                "resources": r["resources"],
                "fleet_file": r["fleet_file"],
                "program_cold_s": round(r["cold"].seconds, 2),
                "time_ratio": round(p.seconds / f.seconds, 2),
                "memory_ratio": round(p.tree_mb / f.tree_mb, 2),
                "cpu_ratio": round(p.cpu_s / f.cpu_s, 2),
            }
            for key, run in (("program", p), ("no_checkpoints", k), ("floor", f)):
                if run:
                    row |= {f"{key}_s": round(run.seconds, 2), f"{key}_mb": round(run.tree_mb)}
                    row[f"{key}_cpu_s"] = round(run.cpu_s, 2)
                    row[f"{key}_cli_mb"] = round(run.cli_mb)
            print(
                f"{n:>5} {r['resources']:>5} | {_cell(p)} | {_cell(f)} | {p.seconds / f.seconds:>5.2f}× "
                f"{p.tree_mb / f.tree_mb:>5.2f}× {p.cpu_s / f.cpu_s:>5.2f}× | {_cell(k)} | "
                f"{'file' if r['fleet_file'] else 'inline'}",
                flush=True,
            )
            rows.append(row)
    print("goal at 200 hosts: time ≤ 1.5×, memory ≤ 2× the floor's (MB: the process tree, pulumi + language host")
    print("+ plugins; cli MB: `pulumi` alone; cpu: user+system seconds of the whole tree, the steadier figure on a")
    print("loaded machine). fleet: inline in the stack config, or a fleet file it names")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
