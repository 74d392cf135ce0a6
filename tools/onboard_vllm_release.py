#!/usr/bin/env python3
"""Onboard a vLLM release: extract it, regenerate every table, and say what changed since the newest one before.

One command for what used to be several (docs/vllm-versions.md, "Onboarding a release")::

    python3 tools/onboard_vllm_release.py            # the newest final release on PyPI
    python3 tools/onboard_vllm_release.py 0.34.0     # a given one
    python3 tools/onboard_vllm_release.py --offline  # the cache only (the release's zip must be there)

Steps:
1. The release's ``vllm/**.py`` is downloaded (sdist, or a wheel read by range requests) into the cache.
2. The release and the table's newest are read by the three static readers (flags, metric families, config
   semantics). A construct the readers cannot decide in the new release that they did not meet in the previous
   one fails the onboarding here, before any table is written: nothing is guessed.
3. The three tables are regenerated over the whole range, the new release included
   (``tools/extract_vllm_flags.py --max``, ``tools/extract_vllm_metrics.py``, ``tools/extract_vllm_config.py``).
4. A human-readable diff against the previous newest: flags added, removed, deprecated, respelled, their choices;
   metric families; config semantics (speculative keys and methods, block size and memory defaults).

"Newest" is read from the table everywhere (``vllm_fleet.vllm.flags.newest``): no tool, test or doc keeps it.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from vllm_fleet.vllm.extract import config_semantics, flag_table, metric_table, releases  # noqa: E402
from vllm_fleet.vllm.extract.pysource import ReleaseSource  # noqa: E402
from vllm_fleet.vllm.extract.release_diff import (  # noqa: E402
    flag_changes,
    metric_changes,
    new_warnings,
    semantics_changes,
)

DATA = REPO_ROOT / "vllm_fleet" / "vllm" / "data"
TABLES = {
    "flags": DATA / "engine_args.json",
    "metrics": DATA / "metrics.json",
    "config": DATA / "config_semantics.json",
}
TOOLS = REPO_ROOT / "tools"


def newest_on_pypi(index: dict[str, object]) -> str:
    found = [
        v
        for v, files in index["releases"].items()  # type: ignore[attr-defined]
        if releases.is_final_release(v) and files and not all(f.get("yanked") for f in files)
    ]
    return max(found, key=releases.version_key)


def undecided(version: str, zpath: Path) -> list[str]:
    """What the flag and metric readers could not decide in one release (the config reader raises instead)."""
    flags = flag_table.extract_version(ReleaseSource.from_zip(version, zpath))
    metrics = metric_table.extract_version(ReleaseSource.from_zip(version, zpath))
    config_semantics.extract_version(ReleaseSource.from_zip(version, zpath))
    return [f"flags: {w}" for w in flags.warnings] + [f"metrics: {w}" for w in metrics.warnings]


def run_tool(script: str, *args: str) -> None:
    cmd = [sys.executable, str(TOOLS / script), *args]
    releases.log("$ " + " ".join(cmd[1:]))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("version", nargs="?", help="the release (default: the newest final release on PyPI)")
    ap.add_argument("--offline", action="store_true", help="use only the cache, no network")
    opts = ap.parse_args(argv)

    t0 = time.monotonic()
    cache = releases.cache_root()
    index = releases.load_index(cache, opts.offline)
    version = opts.version or newest_on_pypi(index)
    previous = json.loads(TABLES["flags"].read_text())["versions"][-1]
    if releases.version_key(version) < releases.version_key(previous):
        releases.log(f"vLLM {version} is older than the table's newest ({previous}): nothing to onboard")
        return 2
    art = releases.pick_artefact(version, index["releases"].get(version, []))
    if art is None:
        releases.log(f"vLLM {version}: no artefact on PyPI")
        return 2
    new_zip = releases.ensure_sources(art, cache, opts.offline)
    old_zip, _ = releases.source_zip(previous, cache, opts.offline, index)
    if version != previous:
        try:
            fresh = new_warnings(undecided(previous, old_zip), undecided(version, new_zip))
        except config_semantics.UndecidableConstruct as err:
            releases.log(f"onboarding of {version} stopped, no table written: {err}")
            return 1
        if fresh:
            releases.log(f"onboarding of {version} stopped, no table written: constructs the readers cannot decide")
            for line in fresh:
                releases.log(f"  {line}")
            releases.log("teach the reader (vllm_fleet/vllm/extract/) these constructs, then run this again")
            return 1

    before = {name: json.loads(path.read_text()) for name, path in TABLES.items() if path.exists()}
    run_tool("extract_vllm_flags.py", "--max", version, *(["--offline"] if opts.offline else []))
    run_tool("extract_vllm_metrics.py", "--offline")
    run_tool("extract_vllm_config.py", "--offline")
    after = {name: json.loads(path.read_text()) for name, path in TABLES.items()}

    print(f"vLLM {version} onboarded (previous newest {previous}) in {time.monotonic() - t0:.0f} s")
    if version == previous:
        print("the table's newest release again: tables regenerated, nothing to compare")
        return 0
    sections = (
        ("flags", flag_changes(after["flags"], previous, version)),
        ("metric families", metric_changes(after["metrics"], previous, version)),
        ("config semantics", semantics_changes(after["config"], previous, version)),
    )
    for title, lines in sections:
        print(f"\n{title} ({previous} -> {version}): {len(lines) or 'no'} change(s)")
        for line in lines:
            print(f"  {line}")
    changed = [name for name in TABLES if before.get(name) != after[name]]
    print(f"\ntables rewritten: {', '.join(str(TABLES[n].relative_to(REPO_ROOT)) for n in changed) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
