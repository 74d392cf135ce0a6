"""Serve the mirror root over HTTP from a detached process: ``start`` / ``stop`` / ``status``.

A threaded :mod:`http.server` in its own session (``start_new_session``), re-parented to PID 1
once the caller exits, so it outlives the Python process (and shell) that started it. It does
not use ``systemd-run``: the controller often has no systemd as PID 1 (containers, CI), so the
mirror, like the lab supervisor, does not depend on it.

State lives in ``<cache>/mirror/server/`` (or any ``state_dir``): ``server.json`` (pid, root,
address, port; written by the server once it is listening) and ``server.log``. Everything is
idempotent: ``start`` with the same root/address/port returns the running server, with other
settings it restarts it; ``stop`` on a stopped server is a no-op.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType

from vllm_fleet.mirror import MirrorError
from vllm_fleet.project.paths import cache_dir, project_root

STATE_FILE = "server.json"
LOG_FILE = "server.log"
MODULE = "vllm_fleet.mirror.server"


def default_state_dir() -> Path:
    return cache_dir() / "mirror" / "server"


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    pid: int | None = None
    root: str | None = None
    address: str | None = None
    port: int | None = None
    log: str | None = None

    @property
    def url(self) -> str | None:
        if self.address is None or self.port is None:
            return None
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}"


# ---------------------------------------------------------------- the server process


class _Handler(SimpleHTTPRequestHandler):
    server_version = "vllm-fleet-mirror/1"

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.address_string()} [{self.log_date_time_string()}] {format % args}\n")
        sys.stderr.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _server_class(address: str) -> type[_Server]:
    if ":" not in address:
        return _Server
    return type("_Server6", (_Server,), {"address_family": socket.AF_INET6})


def serve(root: Path, address: str, port: int, state_dir: Path) -> None:
    """Serve ``root`` until SIGTERM/SIGINT (blocking); write the state file once listening."""
    handler = functools.partial(_Handler, directory=str(root))
    httpd = _server_class(address)((address, port), handler)
    state = state_dir / STATE_FILE

    def _stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    info = ServerStatus(True, os.getpid(), str(root), address, port, str(state_dir / LOG_FILE))
    tmp = state.with_name(f".{STATE_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(asdict(info)))
    tmp.replace(state)
    print(f"vllm-fleet mirror: serving {root} on {info.url} (pid {os.getpid()})", file=sys.stderr, flush=True)
    try:
        httpd.serve_forever(poll_interval=0.5)
    finally:
        httpd.server_close()
        with contextlib.suppress(OSError, ValueError):
            if json.loads(state.read_text()).get("pid") == os.getpid():
                state.unlink()
        print("vllm-fleet mirror: stopped", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- control


def _alive(pid: int, state_dir: Path) -> bool:
    """True if ``pid`` is a live (non-zombie) mirror server for ``state_dir`` (guards pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    return MODULE.encode() in cmdline and str(state_dir).encode() in cmdline


def _read_state(state_dir: Path) -> ServerStatus | None:
    try:
        data = json.loads((state_dir / STATE_FILE).read_text())
        return ServerStatus(**data)
    except (OSError, ValueError, TypeError):
        return None


def status(*, state_dir: Path | None = None) -> ServerStatus:
    """Whether the mirror server recorded in ``state_dir`` is running, and where."""
    state_dir = (default_state_dir() if state_dir is None else state_dir).resolve()
    st = _read_state(state_dir)
    if st is None or st.pid is None or not _alive(st.pid, state_dir):
        return ServerStatus(False, log=str(state_dir / LOG_FILE))
    return st


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop(*, state_dir: Path | None = None, timeout: float = 10.0) -> bool:
    """Stop the server (SIGTERM, then SIGKILL after ``timeout``); True if one was running."""
    state_dir = (default_state_dir() if state_dir is None else state_dir).resolve()
    st = status(state_dir=state_dir)
    if not st.running or st.pid is None:
        (state_dir / STATE_FILE).unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(st.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(st.pid, state_dir):
        _reap(st.pid)
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(st.pid, signal.SIGKILL)
            time.sleep(0.2)
            _reap(st.pid)
            break
        time.sleep(0.05)
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    return True


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start(
    root: Path,
    address: str,
    port: int,
    *,
    state_dir: Path | None = None,
    timeout: float = 15.0,
) -> ServerStatus:
    """Serve ``root`` on ``address:port`` from a detached process; return once it is listening."""
    state_dir = (default_state_dir() if state_dir is None else state_dir).resolve()
    root = root.resolve()
    if not root.is_dir():
        raise MirrorError(f"mirror root {root} does not exist (build the mirror first)")
    current = status(state_dir=state_dir)
    if current.running:
        if (current.root, current.address, current.port) == (str(root), address, port):
            return current
        stop(state_dir=state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    log = state_dir / LOG_FILE
    argv = [
        sys.executable, "-m", MODULE, "serve",
        "--root", str(root), "--address", address, "--port", str(port), "--state-dir", str(state_dir),
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(project_root()), os.environ.get("PYTHONPATH")])),
    }
    with log.open("ab") as logf:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, cwd="/", env=env, start_new_session=True
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = _read_state(state_dir)
        if st is not None and st.pid == proc.pid and _alive(proc.pid, state_dir):
            return st
        if proc.poll() is not None:
            raise MirrorError(
                f"the mirror server did not start on {address}:{port} (exit {proc.returncode}):\n{_log_tail(log)}"
            )
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    raise MirrorError(f"the mirror server did not start within {timeout:.0f}s; see {log}:\n{_log_tail(log)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="the mirror's HTTP server process")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve", help="serve in the foreground (what `start` runs, detached)")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--address", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--state-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    serve(args.root, args.address, args.port, args.state_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
