"""The router hook of a rollout: take a vLLM node out of the load balancer before it restarts, put it back after.

A router is anything with ``drain(server)`` and ``ready(server)``: ``HAProxyRouter`` drives HAProxy's runtime
API over its UNIX stats socket, ``CommandRouter`` runs a user's command as ``<argv...> drain|ready <server>``
(what the Ansible role calls, e.g. ``vllm-fleet router --haproxy-socket S drain node1``).

``haproxy_config``, ``start_haproxy`` and ``stop_haproxy`` run the lab's HAProxy (Debian bookworm's 2.6).

Server names go into runtime-API commands, and names and addresses into haproxy.cfg: both are checked first,
since HAProxy takes ``;`` and a newline as command separators and the config is line-based.
"""

from __future__ import annotations

import contextlib
import csv
import io
import ipaddress
import os
import re
import shlex
import shutil
import signal
import socket as socketlib
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

SOCKET_TIMEOUT_S = 5.0
"""One runtime-API command: connect, send, the whole reply."""
REPLY_MAX_BYTES = 16 * 1024 * 1024
"""``show servers state`` of a large backend is a few hundred KiB."""
COMMAND_TIMEOUT_S = 60.0
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0

_NAME = re.compile(r"[A-Za-z0-9._-]{1,63}")
_DNS_NAME = re.compile(r"(?=.{1,253}$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")
_CFG_PATH = re.compile(r"/[A-Za-z0-9._/+-]*")
# sun_path holds 107 bytes; HAProxy binds "<path>.<pid>.tmp" first and renames it (pid up to 7 digits).
_SOCKET_PATH_MAX = 107 - len(".4194304.tmp")

# srv_admin_state bits of `show servers state` (HAProxy's SRV_ADMF_*): FMAINT IMAINT CMAINT RMAINT HMAINT, and
# FDRAIN IDRAIN. srv_op_state: 0 stopped (down); 1 starting, 2 running, 3 stopping are all taking traffic.
_ADMIN_MAINT = 0x01 | 0x02 | 0x04 | 0x20 | 0x40
_ADMIN_DRAIN = 0x08 | 0x10

AdminState = Literal["ready", "drain", "maint"]
Server = tuple[str, str, int]
"""A backend server: (name, address, port)."""


class RouterError(Exception):
    """The router refused or could not be reached; the message says which server and why."""


class Router(Protocol):
    """What a rollout needs from a load balancer."""

    def drain(self, server: str) -> None: ...

    def ready(self, server: str) -> None: ...


def check_name(name: str, what: str = "router server name") -> str:
    """``name`` when it is a safe HAProxy name (``[A-Za-z0-9._-]{1,63}``), else RouterError."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise RouterError(f"{what} {name!r}: only letters, digits, . _ - (1 to 63 of them)")
    return name


@dataclass(frozen=True)
class ServerState:
    """One backend server as HAProxy sees it."""

    name: str
    admin: AdminState
    operational: Literal["up", "down"]
    status: str
    """`show stat`'s status column: "UP", "DRAIN", "MAINT", "DOWN", or in transition e.g. "UP 1/2"."""
    scur: int
    """Current sessions (requests in flight, streaming ones included)."""


class HAProxyRouter:
    """HAProxy's runtime API on its stats socket (``level admin``): one command per connection."""

    def __init__(self, socket: Path, backend: str = "vllm") -> None:
        self.socket = Path(socket)
        self.backend = check_name(backend, "HAProxy backend name")

    def command(self, line: str) -> str:
        """Send one command, return HAProxy's whole reply (it closes the connection after answering)."""
        if "\n" in line or ";" in line:
            raise RouterError(f"one runtime-API command at a time: {line!r}")
        reply = bytearray()
        deadline = time.monotonic() + SOCKET_TIMEOUT_S  # the whole reply, not each read: a drip cannot hold us
        try:
            with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM) as sock:
                sock.settimeout(SOCKET_TIMEOUT_S)
                sock.connect(str(self.socket))
                sock.sendall(line.encode() + b"\n")
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise RouterError(f"HAProxy runtime API at {self.socket}: no whole reply within "
                                          f"{SOCKET_TIMEOUT_S:g} s")  # fmt: skip
                    sock.settimeout(left)
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
                    if len(reply) > REPLY_MAX_BYTES:
                        raise RouterError(
                            f"HAProxy runtime API at {self.socket}: a reply larger than {REPLY_MAX_BYTES} bytes"
                        )
        except TimeoutError:
            raise RouterError(
                f"HAProxy runtime API at {self.socket}: no whole reply within {SOCKET_TIMEOUT_S:g} s"
            ) from None
        except OSError as e:
            raise RouterError(f"HAProxy runtime API at {self.socket}: {e.strerror or e}") from None
        return reply.decode("utf-8", "replace")

    def drain(self, server: str) -> None:
        """No new requests to ``server``; those in flight finish."""
        self._set_state(server, "drain")

    def ready(self, server: str) -> None:
        """``server`` takes requests again (once its health check passes)."""
        self._set_state(server, "ready")

    def wait(self, server: str, until: Callable[[ServerState], bool], what: str, timeout: float) -> ServerState:
        """Poll ``server``'s state until ``until`` holds; RouterError naming ``what`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            now = self.state(server)
            if until(now):
                return now
            if time.monotonic() >= deadline:
                raise RouterError(
                    f"{self.backend}/{server}: not {what} after {timeout:g} s "
                    f"(admin {now.admin}, {now.status}, {now.scur} session(s))"
                )
            time.sleep(0.2)

    def wait_idle(self, server: str, timeout: float) -> ServerState:
        """After a drain: no session left through the router to ``server``."""
        return self.wait(server, lambda s: s.scur == 0, "idle", timeout)

    def wait_serving(self, server: str, timeout: float) -> ServerState:
        """After ``ready``: the health check passed, so the router sends it requests (before the next host
        leaves: a rollout must never have every host out at once)."""
        return self.wait(server, lambda s: s.admin == "ready" and s.operational == "up", "serving", timeout)

    def _set_state(self, server: str, state: AdminState) -> None:
        reply = self.command(f"set server {self.backend}/{check_name(server)} state {state}")
        if reply.strip():  # success is an empty line; errors read "No such server." or "No such backend."
            raise RouterError(f"HAProxy refused {state} of {self.backend}/{server}: {reply.strip()}")

    def servers(self) -> list[str]:
        """The backend's server names, in config order."""
        return [row["srv_name"] for row in self._servers_state()]

    def state(self, server: str) -> ServerState:
        """``server``'s admin and operational state and its current sessions."""
        check_name(server)
        for state in self.states():
            if state.name == server:
                return state
        raise RouterError(f"HAProxy backend {self.backend} has no server {server!r}")

    def states(self) -> list[ServerState]:
        """Every server of the backend."""
        stats = self._stats()
        return [_server_state(row, stats.get(row["srv_name"], {})) for row in self._servers_state()]

    def _servers_state(self) -> list[dict[str, str]]:
        return [row for row, _ in self._servers_state_lines()[1]]

    def _servers_state_lines(self) -> tuple[list[str], list[tuple[dict[str, str], str]]]:
        """`show servers state <backend>`: a version line, "# field ...", then one line per server.

        Returns those two head lines and each of the backend's servers as (fields, its line)."""
        reply = self.command(f"show servers state {self.backend}")
        lines = reply.splitlines()
        if len(lines) < 2 or not lines[1].startswith("# "):
            raise RouterError(f"HAProxy: show servers state {self.backend}: {reply.strip() or 'no reply'}")
        header = lines[1][2:].split()
        rows = [(dict(zip(header, line.split(), strict=False)), line) for line in lines[2:] if line.strip()]
        return lines[:2], [
            (row, line) for row, line in rows if row.get("be_name") == self.backend and "srv_name" in row
        ]

    def _stats(self) -> dict[str, dict[str, str]]:
        """`show stat <backend> 4 -1` (servers only): CSV with a "# " before its header."""
        reply = self.command(f"show stat {self.backend} 4 -1")
        if not reply.startswith("# "):
            raise RouterError(f"HAProxy: show stat {self.backend}: {reply.strip() or 'no reply'}")
        rows = csv.DictReader(io.StringIO(reply[2:]))
        return {row["svname"]: row for row in rows if row.get("pxname") == self.backend}


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        raise RouterError(f"HAProxy: not a number: {value!r}") from None


def _server_state(row: dict[str, str], stat: dict[str, str]) -> ServerState:
    bits = _int(row.get("srv_admin_state"))
    admin: AdminState = "maint" if bits & _ADMIN_MAINT else "drain" if bits & _ADMIN_DRAIN else "ready"
    return ServerState(
        name=row["srv_name"],
        admin=admin,
        operational="down" if _int(row.get("srv_op_state")) == 0 else "up",
        status=stat.get("status", ""),
        scur=_int(stat.get("scur")),
    )


class CommandRouter:
    """A user's command: ``<argv...> drain|ready <server>``, no shell; a non-zero exit is an error."""

    def __init__(self, argv: Sequence[str]) -> None:
        if not argv:
            raise RouterError("router command: empty")
        self.argv = list(argv)

    def drain(self, server: str) -> None:
        self._run("drain", server)

    def ready(self, server: str) -> None:
        self._run("ready", server)

    def _run(self, action: str, server: str) -> None:
        argv = [*self.argv, action, check_name(server)]
        try:
            # A session of its own, so a timeout stops the command's children too.
            with subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
            ) as proc:
                try:
                    stdout, stderr = proc.communicate(timeout=COMMAND_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate()
                    raise RouterError(
                        f"router command `{shlex.join(argv)}` did not finish in {COMMAND_TIMEOUT_S:.0f} s"
                    ) from None
        except OSError as e:
            raise RouterError(f"router command `{shlex.join(argv)}`: {e.strerror or e}") from None
        if proc.returncode != 0:
            tail = "\n".join((stderr.strip() or stdout.strip()).splitlines()[-5:])
            raise RouterError(f"router command `{shlex.join(argv)}` exited {proc.returncode}: {tail or 'no output'}")


def _host(host: str, what: str) -> str:
    """An IP address (IPv6 bracketed) or a DNS name, as haproxy.cfg writes it."""
    try:
        ip = ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        if _DNS_NAME.fullmatch(host) is None:
            raise RouterError(f"{what} {host!r}: not an IP address or a DNS name") from None
        return host
    return f"[{ip}]" if ip.version == 6 else str(ip)


def _port(port: int | str, what: str) -> int:
    if isinstance(port, bool) or not isinstance(port, int | str) or not str(port).isdecimal():
        raise RouterError(f"{what} port {port!r}: not a port number")
    if not 1 <= int(port) <= 65535:
        raise RouterError(f"{what} port {port!r}: not in 1-65535")
    return int(port)


def _bind(bind: str) -> str:
    """``host:port`` (``*:port`` or ``:port`` for every address, ``[v6]:port``) for the frontend."""
    host, sep, port = bind.rpartition(":")
    if not sep:
        raise RouterError(f"HAProxy bind {bind!r}: not host:port")
    where = "*" if host in ("", "*") else _host(host, "HAProxy bind address")
    return f"{where}:{_port(port, 'HAProxy bind')}"


def _cfg_path(path: Path, what: str) -> str:
    """An absolute path that haproxy.cfg takes as one word."""
    text = str(path)
    if _CFG_PATH.fullmatch(text) is None:
        raise RouterError(f"{what} {text!r}: an absolute path of letters, digits, . _ / + -")
    return text


def _socket_path(path: Path) -> str:
    text = _cfg_path(path, "HAProxy socket")
    if len(os.fsencode(text)) > _SOCKET_PATH_MAX:
        raise RouterError(f"HAProxy socket {text!r}: longer than {_SOCKET_PATH_MAX} bytes (a UNIX socket's limit)")
    return text


def haproxy_config(
    servers: Sequence[Server],
    *,
    bind: str,
    socket: Path,
    backend: str = "vllm",
    state_file: Path | None = None,
    sentinel_port: int | None = None,
) -> str:
    """A complete haproxy.cfg (HAProxy 2.6) for the lab: one frontend, one leastconn backend of vLLM nodes.

    No ``daemon``: ``start_haproxy`` runs it with ``-D -p``. ``state_file``: the server states (drain, maint)
    to carry over a reload (``start_haproxy`` writes it). ``sentinel_port``: the health check asks each node's
    sentinel (``GET /ready`` on that port: down, wedged or cordoned is 503) every second, two failures take the
    node out and two successes bring it back (a wedge leaves rotation within the sentinel's stall time + ~2 s);
    None: vLLM's own ``/health`` every 2 s, which stays 200 while the engine is wedged."""
    check_name(backend, "HAProxy backend name")
    check = (
        f"check port {_port(sentinel_port, 'sentinel')} inter 1s fall 2 rise 2"
        if sentinel_port is not None
        else "check inter 2s fall 2 rise 1"
    )
    check_path = "/ready" if sentinel_port is not None else "/health"
    lines = []
    seen: set[str] = set()
    for name, address, port in servers:
        check_name(name)
        if name in seen:
            raise RouterError(f"router server name {name!r}: twice in the backend")
        seen.add(name)
        where = f"{_host(address, f'server {name} address')}:{_port(port, f'server {name}')}"
        lines.append(f"    server {name} {where} {check}")
    state = [] if state_file is None else [f"    server-state-file {_cfg_path(state_file, 'HAProxy state file')}"]
    load_state = [] if state_file is None else ["    load-server-state-from-file global"]
    return "\n".join(
        [
            "# Written by vllm-fleet (vllm_fleet/rollout/router.py); runs as `haproxy -D -f <this> -p <pidfile>`.",
            "global",
            f"    stats socket {_socket_path(socket)} mode 600 level admin",
            "    stats timeout 30s",
            *state,
            "",
            "defaults",
            "    mode http",
            "    timeout connect 5s",
            "    # LLM responses stream for minutes.",
            "    timeout client 300s",
            "    timeout server 300s",
            "    timeout http-request 30s",
            "    timeout queue 60s",
            "    timeout check 5s",
            f"    option httpchk GET {check_path}",
            "    http-check expect status 200",
            "    retries 3",
            "    option redispatch",
            "    retry-on conn-failure empty-response",
            "    # The whole request before a server is chosen: a request in flight on a server that dies (a watchdog",
            "    # kill, a crash) and answered nothing is then sent again to another one (without it HAProxy 2.6",
            "    # answers 502: tests/unit/test_router.py).",
            "    option http-buffer-request",
            *load_state,
            "",
            f"frontend {backend}_in",
            f"    bind {_bind(bind)}",
            f"    default_backend {backend}",
            "",
            f"backend {backend}",
            "    balance leastconn",
            *lines,
            "",
        ]
    )


def haproxy_binary() -> str:
    """``haproxy`` from PATH, else /usr/sbin/haproxy (not in a user's PATH on Debian)."""
    found = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
    if found is None:
        raise RouterError("no haproxy in PATH or /usr/sbin: install Debian's haproxy (apt-get install haproxy)")
    return found


def _is_haproxy(pid: int) -> bool:
    """A live (not zombie) haproxy process: the pid of an old pid file may be gone or reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    comm, rest = stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 1 :].split()
    return comm == "haproxy" and bool(rest) and rest[0] not in ("Z", "X")


def _pids(pid_file: Path) -> list[int]:
    """The live haproxy processes of a pid file."""
    try:
        words = pid_file.read_text(encoding="utf-8").split()
    except OSError:
        return []
    return [int(w) for w in words if w.isdecimal() and _is_haproxy(int(w))]


def _paths(state_dir: Path) -> tuple[Path, Path, Path, Path]:
    """haproxy.cfg, haproxy.pid, haproxy.sock, haproxy.state in ``state_dir``."""
    return (
        state_dir / "haproxy.cfg",
        state_dir / "haproxy.pid",
        state_dir / "haproxy.sock",
        state_dir / "haproxy.state",
    )


def _carried_state(router: HAProxyRouter, servers: Sequence[Server]) -> str:
    """The running HAProxy's server states, for the servers the new config keeps on the same port.

    HAProxy 2.6 takes a server's port from the state file over the config's, so a server that moved is left
    out (it starts fresh)."""
    head, rows = router._servers_state_lines()
    ports = {name: str(port) for name, _, port in servers}
    kept = [line for row, line in rows if ports.get(row["srv_name"]) == row.get("srv_port")]
    return "\n".join([*head, *kept, ""])


def _log_tail(log: Path, lines: int = 10) -> str:
    try:
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def start_haproxy(
    state_dir: Path,
    servers: Sequence[Server],
    *,
    bind: str,
    backend: str = "vllm",
    sentinel_port: int | None = None,
) -> HAProxyRouter:
    """Write ``state_dir/haproxy.cfg``, check it, start HAProxy (or reload the running one: a new process,
    the old one finishes its requests), wait until the new process answers on ``state_dir/haproxy.sock``.

    On a reload, drained and maint servers stay so, unless the new config moves them to another port."""
    state_dir.mkdir(parents=True, exist_ok=True)
    cfg, pid_file, sock, state_file = _paths(state_dir)
    binary = haproxy_binary()
    router = HAProxyRouter(sock, backend)
    old = _pids(pid_file)
    text = haproxy_config(
        servers, bind=bind, socket=sock, backend=backend, state_file=state_file, sentinel_port=sentinel_port
    )
    if old and cfg.is_file() and cfg.read_text(encoding="utf-8") == text:
        with contextlib.suppress(RouterError):
            router.command("show info")
            return router  # running with this very config: no reload (a reload is a new process)
    state_file.write_text(_carried_state(router, servers) if old else "1\n", encoding="utf-8")
    new_cfg = cfg.with_suffix(".cfg.new")
    new_cfg.write_text(text, encoding="utf-8")
    checked = subprocess.run(
        [binary, "-c", "-f", str(new_cfg)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=30,
        check=False,
    )
    if checked.returncode != 0:
        tail = "\n".join((checked.stderr + checked.stdout).strip().splitlines()[-10:])
        raise RouterError(f"haproxy -c rejected {new_cfg}: {tail}")
    new_cfg.replace(cfg)
    log = state_dir / "haproxy.log"
    argv = [binary, "-D", "-f", str(cfg), "-p", str(pid_file), *(["-sf", *map(str, old)] if old else [])]
    # -D: the parent writes the pid file and exits; the daemon's output goes to the log, not to pipes we wait on.
    with log.open("ab") as out:
        started = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=30, check=False)
    if started.returncode != 0:
        raise RouterError(f"haproxy did not start (exit status {started.returncode}): {_log_tail(log)}")
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        new = set(_pids(pid_file)) - set(old)
        with contextlib.suppress(RouterError):
            info = router.command("show info")
            if new and re.search(rf"^Pid: ({'|'.join(map(str, new))})$", info, re.MULTILINE):
                return router
        if time.monotonic() > deadline:
            raise RouterError(f"haproxy did not answer on {sock} in {START_TIMEOUT_S:.0f} s: {_log_tail(log)}")
        time.sleep(0.05)


def stop_haproxy(state_dir: Path) -> None:
    """Stop the HAProxy of ``state_dir`` (SIGTERM, SIGKILL after 10 s); nothing to do when none runs."""
    _, pid_file, sock, state_file = _paths(state_dir)
    pids = _pids(pid_file)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while any(_is_haproxy(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if _is_haproxy(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for path in (pid_file, sock, state_file):
        path.unlink(missing_ok=True)
