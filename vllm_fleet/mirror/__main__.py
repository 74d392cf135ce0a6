"""``python -m vllm_fleet.mirror build|start|stop|status``: the lab mirror from the shell.

* ``build``: build or refresh the mirror under ``${VLLM_FLEET_CACHE:-~/.cache/vllm-fleet}/mirror``.
* ``start [--address A] [--port P]``: build, then serve it detached (default: the lab bridge,
  172.31.254.1:8765, i.e. ``lab_mirror_url``); ``--address 127.0.0.1`` for local use.
* ``status``: whether it runs, and the keyring URL, ``deb`` line and pip index a host needs.
* ``stop``: stop the server.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from vllm_fleet.lab import config as lab_config
from vllm_fleet.mirror import MirrorError
from vllm_fleet.mirror.apt_repo import HOST_KEYRING_PATH, KEYRING_NAME, sources_line
from vllm_fleet.mirror.build import MirrorBuild, build_mirror, mirror_root
from vllm_fleet.mirror.server import ServerStatus, start, status, stop


def _build(args: argparse.Namespace) -> MirrorBuild:
    t0 = time.monotonic()
    built = build_mirror(bootstrap=not args.no_bootstrap)
    what = [p for p, flag in (("apt", built.apt_rebuilt), ("wheels", built.wheels_rebuilt)) if flag]
    print(
        f"mirror: {built.root} ready in {time.monotonic() - t0:.1f}s "
        f"(rebuilt: {', '.join(what) or 'nothing'}; key {built.fingerprint}; {len(built.projects)} Python projects)"
    )
    return built


def _describe(st: ServerStatus) -> None:
    if not st.running or st.url is None:
        print(f"mirror server: not running (log: {st.log})")
        return
    print(f"mirror server: running, pid {st.pid}, {st.url}/ serving {st.root} (log: {st.log})")
    print(f"  keyring: {st.url}/keys/{KEYRING_NAME}  -> install as {HOST_KEYRING_PATH}")
    print(f"  apt:     {sources_line(st.url)}")
    print(f"  pip:     pip install --index-url {st.url}/simple/ PACKAGE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_fleet.mirror", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build or refresh the mirror under the cache")
    b.add_argument("--no-bootstrap", action="store_true", help="do not download pip/setuptools/wheel")
    s = sub.add_parser("start", help="build (unless --no-build), then serve it detached")
    s.add_argument("--address", default=lab_config.lab_net().bridge_ip, help="[default: the lab bridge, %(default)s]")
    s.add_argument("--port", type=int, default=lab_config.MIRROR_PORT, help="[default: %(default)s]")
    s.add_argument("--root", type=Path, default=None, help="serve this directory instead of the built mirror")
    s.add_argument("--no-build", action="store_true")
    s.add_argument("--no-bootstrap", action="store_true")
    sub.add_parser("stop", help="stop the server")
    sub.add_parser("status", help="is the server running, and the lines a host needs")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "build":
            _build(args)
        elif args.cmd == "start":
            root = args.root
            if root is None:
                root = mirror_root() if args.no_build else _build(args).root
            _describe(start(root, args.address, args.port, state_dir=lab_config.mirror_state_dir()))
        elif args.cmd == "stop":
            stopped = stop(state_dir=lab_config.mirror_state_dir())
            print("mirror server: stopped" if stopped else "mirror server: was not running")
        else:
            _describe(status(state_dir=lab_config.mirror_state_dir()))
    except MirrorError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
