"""What a host's converge is doing right now (draining, restarting, smoke test …), for the live progress display.

The engine sees a host's converge as one step: the drain, restart, health wait and smoke test all happen inside
one `ansible-playbook` run. ``PhaseWriter`` is that run's ansible-runner event handler: from each task's start it
names the activity (by the role and task file the task comes from, the roles' own structure) and, when it changes,
writes it to ``<dir>/<host>.json`` (atomically: written aside, then renamed). The display (``rollout/live.py``)
reads the directory. The directory comes from ``VLLM_FLEET_PHASE_DIR``, which `vllm-fleet up` sets for the
engine and so for the converge commands it runs; without it (plain `pulumi up`) nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from vllm_fleet.deploy.ansible import HOST_NAME

PHASE_DIR_ENV = "VLLM_FLEET_PHASE_DIR"

ROLE_ACTIVITY = {
    "preflight": "preflight",
    "nvidia_repo": "installing the NVIDIA driver",
    "nvidia_driver": "installing the NVIDIA driver",
    "cuda_toolkit": "installing CUDA",
    "vllm": "installing vLLM",
}
"""Roles that are one activity each."""

TASK_FILE_ACTIVITY = {
    ("vllm", "wait.yml"): "waiting for the vLLM install (background)",
}
"""Task files of those roles that are an activity of their own: site.yml waits for the background pip install
from inside the NVIDIA driver's reboot hook and before the server, minutes in which no role installs anything."""

SERVICE_ACTIVITY = {
    "main.yml": "writing the config (checked by the installed vLLM)",
    "drain.yml": "draining",
    "health.yml": "restarting, waiting for health",
    "smoke.yml": "smoke test",
    "canary.yml": "canary analysis: serving beside the hosts on the old config",
    "rollback.yml": "rolling back to the last-known-good",
}
"""vllm_service's task files (and the playbook's smoke hook, ``playbooks/tasks/smoke.yml``) by what they do. The
others (journal, router, stamp, restart's bookkeeping) keep the activity in progress."""


def activity_of(event: Mapping[str, Any]) -> str | None:
    """The activity a task start announces (an ansible-runner ``runner_on_start`` event), or None to keep the
    current one."""
    if event.get("event") != "runner_on_start":
        return None
    data = event.get("event_data") or {}
    role = str(data.get("role") or "")
    task_file = PurePosixPath(str(data.get("task_path") or "").rpartition(":")[0]).name
    if (role, task_file) in TASK_FILE_ACTIVITY:
        return TASK_FILE_ACTIVITY[(role, task_file)]
    if role in ROLE_ACTIVITY:
        return ROLE_ACTIVITY[role]
    if role == "vllm_service" or (not role and task_file == "smoke.yml"):
        return SERVICE_ACTIVITY.get(task_file)
    return None


def _path(directory: Path, host: str) -> Path:
    if not HOST_NAME.match(host):
        raise ValueError(f"host {host!r}: not an inventory host name")
    return directory / f"{host}.json"


class PhaseWriter:
    """ansible-runner's ``event_handler`` for one host's converge: writes its activity when it changes."""

    def __init__(self, directory: Path, host: str, clock: Callable[[], float] = time.time) -> None:
        self.path = _path(directory, host)
        self.clock = clock
        self.activity: str | None = None

    def __call__(self, event: dict[str, Any]) -> bool:
        activity = activity_of(event)
        if activity is not None and activity != self.activity:
            self.activity = activity
            self._write({"activity": activity, "since": self.clock()})
        return True  # ansible-runner keeps the event as usual

    def _write(self, record: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(record, fh)
            Path(tmp).replace(self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def writer_from_env(host: str, env: Mapping[str, str] | None = None) -> PhaseWriter | None:
    """The converge's writer when `vllm-fleet up` asked for one (a directory that exists), else None."""
    value = (os.environ if env is None else env).get(PHASE_DIR_ENV, "")
    return PhaseWriter(Path(value), host) if value and Path(value).is_dir() else None


def read_activities(directory: Path) -> dict[str, tuple[str, float]]:
    """Each host's current activity and since when (a file being replaced, or not JSON, is skipped this time)."""
    found: dict[str, tuple[str, float]] = {}
    for path in directory.glob("*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            found[path.stem] = (str(record["activity"]), float(record["since"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


@contextlib.contextmanager
def converge_activities() -> Iterator[Path]:
    """A fresh directory for this run's activities, named in ``PHASE_DIR_ENV`` for the engine (and so for the
    converges it starts) until the run ends; then removed and the variable restored."""
    before = os.environ.get(PHASE_DIR_ENV)
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-activities-") as directory:
        os.environ[PHASE_DIR_ENV] = directory
        try:
            yield Path(directory)
        finally:
            if before is None:
                os.environ.pop(PHASE_DIR_ENV, None)
            else:
                os.environ[PHASE_DIR_ENV] = before
