#!/usr/bin/env python3
"""Extract the config semantics argparse does not show, from real vLLM releases.

Companion of ``tools/extract_vllm_flags.py`` and ``tools/extract_vllm_metrics.py``: it reuses their cache of the
release sources (``${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}/vllm-src/py/<version>.zip``; a missing zip is
downloaded as the flag extractor does) and, by default, the version list of ``vllm_fleet/vllm/data/engine_args.json``
(the three tables cover the same releases; tools/onboard_vllm_release.py extends them together), and reads the
source *statically* (``ast``; vLLM is never
imported). Per release it records:

- ``speculative_keys``: the keys ``--speculative-config`` accepts (``SpeculativeConfig``'s init fields), with the
  deprecated ones and the ones the release refuses whenever set;
- ``speculative_methods``: the ``method`` values (the ``SpeculativeMethod`` Literal, its aliases resolved);
- ``block_size_default``: the KV-cache block size when ``--block-size`` is not given, and where it comes from;
- ``gpu_memory_utilization_default``: the declared default, and how a None default is resolved;
- ``extensible_kv_cache``: the extensible KV cache option, its default and where it is decided.

A construct the reader cannot decide stops it with an error naming the release, file and construct: nothing is
guessed. The reading is the library ``vllm_fleet.vllm.extract.config_semantics``; this script is its command line.

Output: ``vllm_fleet/vllm/data/config_semantics.json`` (its ``notes`` say what each item records).

Usage::

    python3 tools/extract_vllm_config.py                 # every version of the flag table
    python3 tools/extract_vllm_config.py --min 0.30.0 --dry-run
    python3 tools/extract_vllm_config.py --offline       # cache only, never the network

Dependencies: the standard library, and ``packaging`` (the reading API resolves versions as the flag table does).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from vllm_fleet.vllm.extract import releases  # noqa: E402 - after the repository is on the path
from vllm_fleet.vllm.extract.config_semantics import (  # noqa: E402
    ReleaseConfig,
    UndecidableConstruct,
    build_table,
    extract_version,
    print_report,
)
from vllm_fleet.vllm.extract.pysource import ReleaseSource  # noqa: E402

DATA_DIR = REPO_ROOT / "vllm_fleet" / "vllm" / "data"
DEFAULT_OUT = DATA_DIR / "config_semantics.json"
FLAG_TABLE = DATA_DIR / "engine_args.json"


def flag_table_versions() -> list[str]:
    return releases.table_versions(FLAG_TABLE)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min", help="first vLLM version (default: the flag table's first)")
    ap.add_argument("--max", help="last vLLM version (default: the flag table's last)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSON (default %(default)s)")
    ap.add_argument("--offline", action="store_true", help="use only the cache, no network")
    ap.add_argument("--dry-run", action="store_true", help="do not write the JSON")
    opts = ap.parse_args(argv)

    t0 = time.monotonic()
    cache = releases.cache_root()
    index: dict[str, Any] | None = None
    results: list[ReleaseConfig] = []
    for version in releases.between(flag_table_versions(), opts.min, opts.max):
        t1 = time.monotonic()
        zpath, index = releases.source_zip(version, cache, opts.offline, index)
        try:
            res = extract_version(ReleaseSource.from_zip(version, zpath))
        except UndecidableConstruct as exc:
            releases.log(f"error: {exc}")
            return 2
        results.append(res)
        keys = len(res.items["speculative_keys"]["value"])
        releases.log(f"{version:<12} {keys:>3} speculative keys  {time.monotonic() - t1:5.2f}s")
    if not results:
        releases.log("no versions selected")
        return 1
    table = build_table(results)
    releases.write_table(opts.out, table, dry_run=opts.dry_run)
    print_report(table, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
