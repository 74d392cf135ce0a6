"""The lab's Prometheus: Debian's server on the controller, scraping the lab's nodes with what
``vllm-fleet monitoring`` generates for the lab fleet, installed by the users' own playbook.

``<lab>/prometheus/generated``  ``vllm-fleet monitoring``'s directory for the fleet (targets, rules, dashboards)
``<lab>/prometheus/etc``        what ``playbooks/monitoring.yml`` installed from it (every file promtool-checked)
``<lab>/prometheus/data``       the TSDB;  ``prometheus.pid``, ``prometheus.log``

The controller runs no systemd (a container, CI), so the role runs with ``prometheus_server_manage_service:
false`` on the controller itself (a local connection), and this module starts the server the way the lab starts
HAProxy: a detached process with a pid file, listening on the lab bridge (``http://<bridge>:9090``). A second
``up`` installs the new files and reloads the running server (``/-/reload``); ``lab down`` stops it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from vllm_fleet.deploy.ansible import data_yaml, run_local_playbook
from vllm_fleet.fleet.plan import FleetPlan
from vllm_fleet.lab import config
from vllm_fleet.lab.state import LabState
from vllm_fleet.lab.system import LabError
from vllm_fleet.monitoring import fleet_nodes, scopes_of, write_monitoring

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def _binary() -> str:
    found = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None)
    if found is None:
        raise LabError("prometheus is not installed (Debian package `prometheus`; scripts/setup installs it)")
    return found


def _pid(pid_file: Path) -> int | None:
    """The running server's pid from ``pid_file``, None when it is gone (or is another program now)."""
    try:
        pid = int(pid_file.read_text().strip())
        exe = Path(f"/proc/{pid}/exe").resolve().name
    except (OSError, ValueError):
        return None
    return pid if exe == "prometheus" else None


def install_config(state: LabState, plan: FleetPlan) -> Path:
    """Generate the lab fleet's monitoring and install it with ``playbooks/monitoring.yml``; the config dir."""
    base = config.prometheus_dir(state.state_dir)
    generated, etc = base / "generated", base / "etc"
    nodes = fleet_nodes(plan)
    write_monitoring(generated, scopes_of(nodes), nodes)
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,
        "prometheus_server_source_dir": str(generated),
        "prometheus_server_config_dir": str(etc),
        "prometheus_server_install": False,  # Debian's package is on the controller already (scripts/setup)
        "prometheus_server_manage_service": False,  # no systemd here: started below
    }
    base.mkdir(parents=True, exist_ok=True)
    inventory = base / "inventory.yml"
    inventory.write_text(data_yaml({"all": {"children": {"monitoring": {"hosts": {"lab-controller": host}}}}}))
    # Only what the play needs reaches it (ansible.playbook_env): none of the secrets `vllm-fleet up` holds.
    proc = run_local_playbook("monitoring.yml", inventory)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise LabError(f"playbooks/monitoring.yml failed on the controller:\n{tail}")
    return etc


def _wait_ready(url: str, pid: int, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-10:]) if log.is_file() else ""
    raise LabError(f"the lab's prometheus did not become ready at {url}: {tail}")


def prometheus_up(state: LabState, plan: FleetPlan) -> str:
    """Install the lab fleet's monitoring and run (or reload) the lab's Prometheus; its URL."""
    etc = install_config(state, plan)
    base = config.prometheus_dir(state.state_dir)
    pid_file, log = base / "prometheus.pid", base / "prometheus.log"
    net = config.lab_net()
    url = net.prometheus_url
    running = _pid(pid_file)
    if running is not None:
        reloaded = httpx.post(f"{url}/-/reload", timeout=30)
        if reloaded.status_code != 200:
            raise LabError(f"the lab's prometheus refused the new configuration: {reloaded.text.strip()}")
        return url
    argv = [
        _binary(),
        f"--config.file={etc / 'prometheus.yml'}",
        f"--storage.tsdb.path={base / 'data'}",
        f"--web.listen-address={net.bridge_ip}:{config.PROMETHEUS_PORT}",
        "--web.enable-lifecycle",  # /-/reload after the next `up`
        "--storage.tsdb.retention.time=2d",
    ]
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    pid_file.write_text(f"{proc.pid}\n")
    _wait_ready(url, proc.pid, log)
    return url


def prometheus_down(state_dir: Path) -> bool:
    """Stop the lab's Prometheus (SIGTERM, SIGKILL after 10 s); True when one was running."""
    pid_file = config.prometheus_dir(state_dir) / "prometheus.pid"
    pid = _pid(pid_file)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _pid(pid_file) is not None and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)
        if _pid(pid_file) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return pid is not None
