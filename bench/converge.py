#!/usr/bin/env python3
"""Lab timings: lab-up time, first-converge time and no-op-converge time (site.yml, real hosts, real vLLM).

    sudo .venv/bin/python bench/converge.py [--hosts 2] [--keep]

Prints seconds for each phase and the no-op / first ratio. Tears the lab down unless --keep.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from vllm_fleet.deploy.ansible import InventoryHost, run_playbook
from vllm_fleet.lab.site import site_down, site_up
from vllm_fleet.lab.stack import lab_role_vars


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    site_down()
    t0 = time.monotonic()
    site = site_up(args.hosts, log=lambda _m: None)
    t_up = time.monotonic() - t0
    hosts = [InventoryHost(h.name, h.ip, host_key=h.host_key) for h in site.state.hosts]
    extravars = {**lab_role_vars(site.state, site.model_dir), "vllm_fleet_profile": "cpu-lab"}
    key = Path(site.state.ssh_key).read_text()

    def converge() -> tuple[float, int]:
        start = time.monotonic()
        result = run_playbook("site.yml", hosts, extravars, private_key=key, quiet=True)  # fmt: skip
        if not result.ok:
            raise SystemExit(f"converge failed: {result.stats}")
        return time.monotonic() - start, result.count("changed")

    t_first, changed_first = converge()
    t_noop, changed_noop = converge()
    print(f"hosts:              {args.hosts}")
    print(f"lab up (+ mirror):  {t_up:7.1f} s")
    print(f"first converge:     {t_first:7.1f} s  ({changed_first} changed tasks)")
    print(f"no-op converge:     {t_noop:7.1f} s  ({changed_noop} changed tasks)")
    print(f"no-op / first:      {t_noop / t_first:7.3f}")
    if not args.keep:
        site_down(log=lambda _m: None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
