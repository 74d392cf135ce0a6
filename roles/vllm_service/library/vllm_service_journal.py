#!/usr/bin/python
"""vllm_service's rollout journal: one task per phase (the time, this run's timeline and the file at once)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: vllm_service_journal
short_description: Record where this instance's rollout got to, and when
description:
  - Writes the instance's rollout journal (JSON, mode 0600, replaced atomically) before each step of a rollout,
    so that a run killed at any point and run again knows whether the host is still out of the router and whether
    its restart already happened.
  - C(times) is this run's timeline (phase to UNIX time); the module returns it with this phase added, for the
    next phase's call.
options:
  path: {description: The journal file., type: path, required: true}
  phase: {description: "drained, restarting, done, rolled-back or failed.", type: str, required: true}
  target: {description: The deployment stamp this rollout brings the instance to., type: str, required: true}
  profile: {description: The decode profile's name., type: str, default: ""}
  vllm_version: {description: The vLLM release the instance runs., type: str, default: ""}
  times: {description: This run's earlier phases and their times (the last call's C(times))., type: dict, default: {}}
  analysis:
    description: The canary analysis of this rollout (decision, reasons, figures), when one ran.
    type: dict
    default: {}
"""

RETURN = r"""
at: {description: When this phase was entered (UNIX time)., type: float, returned: always}
times: {description: This run's timeline with this phase added., type: dict, returned: always}
"""

PHASES = ("drained", "restarting", "done", "rolled-back", "failed")


def write_atomically(path: Path, text: str) -> None:
    """Written aside (0600 from the start: mkstemp), then renamed over the journal: never a half-written one."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=".journal.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "phase": {"type": "str", "required": True, "choices": list(PHASES)},
            "target": {"type": "str", "required": True},
            "profile": {"type": "str", "default": ""},
            "vllm_version": {"type": "str", "default": ""},
            "times": {"type": "dict", "default": {}},
            "analysis": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    now = time.time()
    times = {str(k): float(v) for k, v in (p["times"] or {}).items()}
    times[p["phase"]] = now
    record = {
        "phase": p["phase"], "target": p["target"], "at": now, "profile": p["profile"],
        "vllm_version": p["vllm_version"], "times": times,
    }  # fmt: skip
    if p["analysis"]:
        record["analysis"] = p["analysis"]
    if not module.check_mode:
        write_atomically(Path(p["path"]), json.dumps(record) + "\n")
    module.exit_json(changed=not module.check_mode, at=now, times=times)


if __name__ == "__main__":
    main()
