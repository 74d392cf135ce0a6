#!/usr/bin/env python3
"""Extract the `vllm serve` argument table from real vLLM releases on PyPI.

For every vLLM release in a version range this script downloads the release
artefact from PyPI (the sdist; the x86_64 wheel when a release has no sdist),
caches it outside the repository, and reads the Python source *statically*
(``ast``; vLLM is never imported, no CUDA needed).  Starting from
``vllm/entrypoints/cli/serve.py`` (``ServeSubcommand.subparser_init``) it
abstractly interprets the argparse-building code -- ``make_arg_parser``,
``FrontendArgs.add_cli_args``, ``EngineArgs.add_cli_args``,
``AsyncEngineArgs.add_cli_args`` -- including the dataclass-driven
``get_kwargs(SomeConfig)`` helper of newer releases, whose per-field rules are
re-implemented with the feature switches detected in each release's own
source.  The result is written to ``vllm_fleet/vllm/data/engine_args.json``.

The reading itself is the library ``vllm_fleet.vllm.extract`` (``flag_*``
modules); this script is its command line.

Usage::

    python3 tools/extract_vllm_flags.py            # the table's own range: 0.8.2 .. its newest release
    python3 tools/extract_vllm_flags.py --minors-only --max 0.20.0
    python3 tools/extract_vllm_flags.py --offline  # cache only, never the network

Cache: ``${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}/vllm-src/``
(``dist/`` holds the downloaded sdists, ``py/`` one zip of the ``vllm/**.py``
sources per version, which is all the analysis reads).

Dependencies: the standard library only (PyYAML is not needed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from vllm_fleet.vllm.extract import releases  # noqa: E402 - after the repository is on the path
from vllm_fleet.vllm.extract.flag_table import ReleaseFlags, build_table, extract_version, print_report  # noqa: E402
from vllm_fleet.vllm.extract.pysource import ReleaseSource  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "vllm_fleet" / "vllm" / "data" / "engine_args.json"
DEFAULT_MIN = "0.8.2"


def table_newest(path: Path = DEFAULT_OUT) -> str:
    """The newest release the committed table holds: re-running keeps the range, onboarding widens it
    (tools/onboard_vllm_release.py). No release is named here by hand."""
    versions: list[str] = json.loads(path.read_text())["versions"]
    return versions[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min", default=DEFAULT_MIN, help="first vLLM version (default %(default)s)")
    ap.add_argument("--max", help="last vLLM version (default: the committed table's newest)")
    ap.add_argument("--minors-only", action="store_true", help="only x.y.0 releases (plus --min)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSON (default %(default)s)")
    ap.add_argument("--offline", action="store_true", help="use only the cache, no network")
    ap.add_argument("--dry-run", action="store_true", help="do not write the JSON")
    opts = ap.parse_args(argv)

    t0 = time.monotonic()
    cache = releases.cache_root()
    index = releases.load_index(cache, opts.offline)
    arts = releases.select_versions(index, opts.min, opts.max or table_newest(), opts.minors_only)
    if not arts:
        releases.log("no versions selected")
        return 1
    results: list[ReleaseFlags] = []
    for art in arts:
        t1 = time.monotonic()
        zpath = releases.ensure_sources(art, cache, opts.offline)
        res = extract_version(ReleaseSource.from_zip(art.version, zpath))
        results.append(res)
        releases.log(f"{art.version:<12} {len(res.args):>4} args  {time.monotonic() - t1:5.1f}s  {art.filename}")
    table = build_table(results)
    releases.write_table(opts.out, table, dry_run=opts.dry_run)
    print_report(table, results, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
