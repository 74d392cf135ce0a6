"""A file-backend lock left by a killed `pulumi up` is found (its process is gone); live or foreign ones stay."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

from vllm_fleet.deploy.engine import stale_locks


def test_only_locks_of_dead_local_processes_are_stale(tmp_path: Path) -> None:
    locks = tmp_path / ".pulumi" / "locks" / "organization" / "vllm-fleet" / "lab"
    locks.mkdir(parents=True)
    gone = subprocess.Popen(["true"])  # its pid is free again once it exited
    gone.wait()
    me = socket.gethostname()
    for name, pid, host in (("dead", gone.pid, me), ("live", os.getpid(), me), ("other", gone.pid, "elsewhere")):
        (locks / f"{name}.json").write_text(json.dumps({"pid": pid, "username": "root", "hostname": host}))
    (locks / "broken.json").write_text("{")
    assert [p.name for p in stale_locks(tmp_path, "vllm-fleet", "lab")] == ["dead.json"]
    assert stale_locks(tmp_path, "vllm-fleet", "other-stack") == []
