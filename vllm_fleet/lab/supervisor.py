"""One tiny supervisor per lab host: a detached ``/bin/sh`` loop around ``systemd-nspawn``.

Why not ``systemd-run``: the controller often has no systemd as PID 1 (containers, CI
sandboxes), so the lab does not depend on it. Instead the supervisor

1. moves itself into the host's own cgroup (``vfleet/<host>`` in every systemd hierarchy),
   so nspawn (``--keep-unit --register=no``) and the whole container tree live there;
2. runs nspawn in the host's pre-made network namespace and waits for it;
3. starts it again when it exits with 133, which is how nspawn reports a reboot request
   from the container (``systemctl reboot``, Ansible's ``reboot`` module); any other exit,
   or a ``stop`` file in the host dir, ends the loop.

It is started with ``setsid --fork``, so it has no parent but PID 1 and survives the Python
process (and the shell) that launched it. ``lab down`` writes the stop file, sends SIGTERM to
nspawn (which powers the container off cleanly), then kills whatever is left in the cgroup.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
from pathlib import Path

from vllm_fleet.lab.system import LabError, run, write_file

REBOOT_EXIT_CODE = 133
SCRIPT = "supervisor.sh"
PIDFILE = "supervisor.pid"
NSPAWN_PIDFILE = "nspawn.pid"
STOPFILE = "stop"
BOOTS = "boots"


def nspawn_argv(machine: str, directory: Path, netns_path: Path) -> list[str]:
    return [
        "systemd-nspawn",
        "--boot",
        "--keep-unit",
        "--register=no",
        f"--machine={machine}",
        f"--directory={directory}",
        f"--network-namespace-path={netns_path}",
        "--resolv-conf=off",
        "--timezone=off",
        "--link-journal=no",
        "--console=read-only",
        "--quiet",
    ]


def render_script(host_dir: Path, cgroup_dirs: list[Path], nspawn: list[str]) -> str:
    """The supervisor loop (pure: returns the script text)."""
    q = shlex.quote
    join_cgroups = "\n".join(
        f'echo $$ > {q(str(d / "cgroup.procs"))} || {{ echo "cannot join cgroup {d}"; exit 1; }}' for d in cgroup_dirs
    )
    return f"""#!/bin/sh
# vllm-fleet lab supervisor (generated): keeps systemd-nspawn up across reboots (exit {REBOOT_EXIT_CODE}).
set -u
HOSTDIR={q(str(host_dir))}
{join_cgroups}
echo $$ > "$HOSTDIR/{PIDFILE}"
rc=0
while :; do
  {shlex.join(nspawn)} &
  echo $! > "$HOSTDIR/{NSPAWN_PIDFILE}"
  echo "$(date -u +%FT%TZ)" >> "$HOSTDIR/{BOOTS}"
  wait $!
  rc=$?
  rm -f "$HOSTDIR/{NSPAWN_PIDFILE}"
  echo "vllm-fleet-lab: systemd-nspawn exited $rc at $(date -u +%FT%TZ)"
  [ -e "$HOSTDIR/{STOPFILE}" ] && break
  [ "$rc" -eq {REBOOT_EXIT_CODE} ] || break
done
rm -f "$HOSTDIR/{PIDFILE}"
echo "vllm-fleet-lab: supervisor done (last exit $rc)"
"""


def launch_argv(script: Path, log: Path) -> list[str]:
    """``setsid --fork``: a new session whose parent exits at once, so the loop is re-parented
    to PID 1 and outlives the caller; its output (the container console) goes to ``log``."""
    inner = f"exec /bin/sh {shlex.quote(str(script))} >>{shlex.quote(str(log))} 2>&1 </dev/null"
    return ["setsid", "--fork", "/bin/sh", "-c", inner]


def launch(host_dir: Path, script: str, log: Path, timeout: float = 10.0) -> int:
    """Write and start the supervisor, detached; return its pid once it is in its cgroup."""
    path = host_dir / SCRIPT
    write_file(path, script, mode=0o755)
    for stale in (PIDFILE, NSPAWN_PIDFILE, STOPFILE):
        (host_dir / stale).unlink(missing_ok=True)
    run(launch_argv(path, log))
    return wait_for_pid(host_dir, timeout)


def wait_for_pid(host_dir: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    pidfile = host_dir / PIDFILE
    while time.monotonic() < deadline:
        pid = read_pid(pidfile)
        if pid is not None:
            return pid
        time.sleep(0.02)
    raise LabError(f"the supervisor in {host_dir} did not start (see {host_dir / 'console.log'})")


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def is_supervisor(pid: int | None, host_dir: Path) -> bool:
    """True if ``pid`` is alive and is this host's supervisor (guards against pid reuse)."""
    if pid is None:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(host_dir / SCRIPT).encode() in cmdline


def nspawn_pid(host_dir: Path) -> int | None:
    return read_pid(host_dir / NSPAWN_PIDFILE)


def boots(host_dir: Path) -> int:
    try:
        return len((host_dir / BOOTS).read_text().splitlines())
    except OSError:
        return 0


def request_stop(host_dir: Path, supervisor_pid: int | None, timeout: float = 30.0) -> bool:
    """Ask the container to power off (SIGTERM to nspawn) and the loop to end; True if it did."""
    write_file(host_dir / STOPFILE, "")
    pid = nspawn_pid(host_dir)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_supervisor(supervisor_pid, host_dir):
            return True
        time.sleep(0.05)
    return False
