#!/usr/bin/env python3
"""Wait until a vLLM unit answers /health, and give up as soon as systemd says it crashed.

usage: wait_healthy.py URL UNIT RETRIES DELAY_S

Polling /health alone spends the whole retry budget (minutes) on a config that died at start-up; systemd knows
at once: the unit is `failed`, or it has been auto-restarted (NRestarts > 0) after the start we just made.
"""

import subprocess
import sys
import time
import urllib.request


def unit_state(unit: str) -> tuple[str, int]:
    out = subprocess.run(
        ["systemctl", "show", unit, "-p", "ActiveState", "-p", "NRestarts"], capture_output=True, text=True
    ).stdout
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return props.get("ActiveState", "unknown"), int(props.get("NRestarts") or 0)


def main(url: str, unit: str, retries: int, delay: float) -> int:
    last = "no answer"
    for attempt in range(1, retries + 1):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - the node's own health URL
                if r.status == 200:
                    print(f"healthy after {attempt} attempt(s)")
                    return 0
                last = f"HTTP {r.status}"
        except OSError as err:
            last = str(err)
        state, restarts = unit_state(unit)
        if state == "failed" or restarts > 0:
            print(f"{unit} is {state} after {restarts} automatic restart(s): it crashed instead of becoming healthy")
            return 1
        time.sleep(delay)
    print(f"{url} not healthy after {retries} attempts: {last}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
