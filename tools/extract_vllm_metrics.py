#!/usr/bin/env python3
"""Extract the Prometheus metric families vLLM exposes, from real vLLM releases.

Companion of ``tools/extract_vllm_flags.py``: it reuses that script's cache of the release sources
(``${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}/vllm-src/py/<version>.zip``, one zip of ``vllm/**.py`` per
release; a missing zip is downloaded as the flag extractor does) and the same version list (that of
``vllm_fleet/vllm/data/engine_args.json``), and reads the source *statically* (``ast``; vLLM is never imported).

Every call that constructs a ``prometheus_client`` metric with a ``vllm:`` name is found in every module of the
release; its arguments are evaluated, and the conditions under which it runs (enclosing ``if``\\ s, early
``return`` guards, the condition under which the helper class that defines it is instantiated by the stat
logger) are evaluated against vLLM's defaults (no speculative config, no LoRA, no KV connector,
``--show-hidden-metrics-for-version`` unset, ...) to classify each family as ``always`` or as conditional on a
feature. The reading is the library ``vllm_fleet.vllm.extract`` (``metric_*`` modules); this script is its
command line.

Output: ``vllm_fleet/vllm/data/metrics.json`` (see ``metrics_notes.md`` next to it).

Usage::

    python3 tools/extract_vllm_metrics.py                 # every version of the flag table
    python3 tools/extract_vllm_metrics.py --min 0.20.0 --dry-run
    python3 tools/extract_vllm_metrics.py --offline       # cache only, never the network

Dependencies: the standard library only.
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
from vllm_fleet.vllm.extract.metric_table import ReleaseMetrics, extract_version, make_table, print_report  # noqa: E402
from vllm_fleet.vllm.extract.pysource import ReleaseSource  # noqa: E402

DATA_DIR = REPO_ROOT / "vllm_fleet" / "vllm" / "data"
DEFAULT_OUT = DATA_DIR / "metrics.json"
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
    ap.add_argument("--no-concerns", action="store_true", help="skip the curated concern table (partial ranges)")
    opts = ap.parse_args(argv)

    t0 = time.monotonic()
    cache = releases.cache_root()
    index: dict[str, Any] | None = None
    results: list[ReleaseMetrics] = []
    for version in releases.between(flag_table_versions(), opts.min, opts.max):
        t1 = time.monotonic()
        zpath, index = releases.source_zip(version, cache, opts.offline, index)
        res = extract_version(ReleaseSource.from_zip(version, zpath))
        results.append(res)
        releases.log(f"{version:<12} {len(res.families):>4} families  {time.monotonic() - t1:5.2f}s")
    if not results:
        releases.log("no versions selected")
        return 1
    full = [r.version for r in results] == flag_table_versions()
    if not full and not opts.no_concerns:
        releases.log("partial version range: the curated concern table is not validated nor written")
    table = make_table(results, full=full, concerns=not opts.no_concerns)
    releases.write_table(opts.out, table, dry_run=opts.dry_run)
    print_report(table, results, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
