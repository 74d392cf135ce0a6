#!/usr/bin/python
"""vllm_service's view of an instance before a converge decides on a restart, read in one task."""

from __future__ import annotations

import json
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: vllm_service_state
short_description: Read what an instance was last started healthy with, its rollout journal and its process start
description:
  - Reads, without changing anything, the deployment stamp the instance was last started healthy with, its rollout
    journal (where its last rollout got to) and when its running process started (systemd's
    ExecMainStartTimestamp), which the role's restart decision compares.
options:
  stamp_path: {description: The file holding the last healthy deployment stamp., type: path, required: true}
  journal_path: {description: The instance's rollout journal (JSON)., type: path, required: true}
  unit: {description: The systemd unit of the instance., type: str, required: true}
"""

RETURN = r"""
deployed: {description: The last healthy deployment stamp ("" when none)., type: str, returned: always}
journal: {description: The rollout journal ({} when none or unreadable)., type: dict, returned: always}
process_started:
  description: When the running process started (UNIX time; 0 when not running).
  type: float
  returned: always
"""

MAX_BYTES = 65536
"""Both files are a few hundred bytes: anything larger is not ours and is not read whole."""


def read_text(path: str) -> str:
    try:
        with Path(path).open(encoding="utf-8", errors="replace") as fh:
            return fh.read(MAX_BYTES)
    except OSError:
        return ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "stamp_path": {"type": "path", "required": True},
            "journal_path": {"type": "path", "required": True},
            "unit": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    journal: object = {}
    text = read_text(p["journal_path"]).strip()
    if text:
        try:
            journal = json.loads(text)
        except ValueError:
            module.warn(f"{p['journal_path']} is not JSON: read as no journal")
    if not isinstance(journal, dict):
        journal = {}
    rc, out, _ = module.run_command(
        ["systemctl", "show", p["unit"], "-p", "ExecMainStartTimestamp", "--timestamp=unix", "--value"]
    )
    try:
        started = float(out.strip().lstrip("@")) if rc == 0 and out.strip() else 0.0
    except ValueError:
        started = 0.0
    module.exit_json(
        changed=False, deployed=read_text(p["stamp_path"]).strip(), journal=journal, process_started=started
    )


if __name__ == "__main__":
    main()
