"""The tests' converged lab, started before the serial run needs it.

    python -m tests.lab_prestart RESULT.json

scripts/test runs this in the background while set-up's lint and the parallel run go (the lab's start and first
converge are ~5-7 min, most of it waiting on hosts, not on the controller's cores); the session fixtures
(tests/fixtures_lab.py: `site`, `first_converge`, `second_converge`) then adopt the lab it left instead of starting
one. It does what those fixtures do (`start_site`, `converge_first`, `converge_again`) and writes RESULT.json last:
each converge's ``{"rc", "status", "stats"}`` under "first" and "second", or ``{"error": ...}``. The lab stays up
either way: the serial run's `site` fixture takes it down at its end, and scripts/test does when it stops before.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

os.environ["VLLM_FLEET_LAB_NET"] = "test"  # as tests/conftest.py: the tests' lab, never the main job's

from tests.fixtures_lab import converge_again, converge_first, lab_available, start_site


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.unlink(missing_ok=True)
    data: dict[str, object]
    try:
        reason = lab_available()
        if reason:
            raise RuntimeError(reason)
        site = start_site()
        first = converge_first(site)
        data = {"first": {"rc": first.rc, "status": first.status, "stats": first.stats}}
        if first.ok:
            second = converge_again(site)
            data["second"] = {"rc": second.rc, "status": second.status, "stats": second.stats}
    except BaseException as exc:  # whatever stopped it is the result the tests report
        traceback.print_exc()
        data = {"error": f"{type(exc).__name__}: {exc}"}
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(out)  # the result appears whole
    return 0 if "error" not in data else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
