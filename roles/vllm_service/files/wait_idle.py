#!/usr/bin/env python3
"""Wait until a vLLM server taken out of the router has no request left: running + waiting = 0.

usage: wait_idle.py METRICS_URL TIMEOUT_S

Prints one JSON line: {"idle": bool, "waited_s": float, "running": n, "waiting": n, "note": str}. Exit 0 either
way (the caller decides what a timeout means: vLLM's --shutdown-timeout still lets the rest finish); exit 2 on a
bad argument. A server that does not answer has nothing in flight that a drain could save.
"""

import json
import re
import sys
import time
import urllib.request

SERIES = re.compile(r"^vllm:num_requests_(running|waiting)(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.M)


def in_flight(url: str) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - the node's own metrics URL
            text = r.read().decode("utf-8", "replace")
    except OSError:
        return None
    out = {"running": 0.0, "waiting": 0.0}
    for kind, value in SERIES.findall(text):
        out[kind] += float(value)
    return out


def main(url: str, timeout: float) -> int:
    start = time.monotonic()
    while True:
        now = in_flight(url)
        waited = round(time.monotonic() - start, 1)
        if now is None:
            note = "the server does not answer: nothing in flight to protect"
            print(json.dumps({"idle": True, "waited_s": waited, "running": 0, "waiting": 0, "note": note}))
            return 0
        if now["running"] + now["waiting"] == 0:
            print(json.dumps({"idle": True, "waited_s": waited, **now, "note": "no request in flight"}))
            return 0
        if waited >= timeout:
            note = f"still busy after {timeout:g} s: vLLM's shutdown-timeout lets the rest finish"
            print(json.dumps({"idle": False, "waited_s": waited, **now, "note": note}))
            return 0
        time.sleep(0.5)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.splitlines()[2] if __doc__ else 2)
    sys.exit(main(sys.argv[1], float(sys.argv[2])))
