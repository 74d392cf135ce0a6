"""A private directory for one Ansible run, and the SSH agent that holds the run's key.

The directory is 0700, on a tmpfs when ``/dev/shm`` is one (else the temp dir), and removed when the run ends
-- also when the process, or its whole process group, is SIGKILLed: a watchdog in its own session holds the
read end of a pipe whose write end only this process has; at EOF (we closed it, or the kernel did because we
died) it stops every process of the run, then removes the directory.

A process belongs to the run when its command line names a path inside the directory or its environment has
``VLLM_FLEET_PRIVATE_DIR=<the directory>`` (``run_playbook`` sets it for ansible-playbook, whose workers and ssh
inherit it; ansible-runner starts ansible-playbook in a session of its own, ignoring SIGHUP, so a killed parent
does not take it along).

The SSH private key never reaches a file: ``ssh-add -`` reads it from a pipe into an ``ssh-agent`` whose
socket is in the directory, and ssh finds it through ``SSH_AUTH_SOCK``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

MARKER_ENV = "VLLM_FLEET_PRIVATE_DIR"
"""Environment variable naming the run's private dir: processes carrying it are stopped with the run."""
PREFIX = "vllm-fleet-"
SHM = Path("/dev/shm")

# The watchdog: stdlib only, run with `python -I -S` (no site, no environment, no cwd on sys.path).
_WATCHDOG = r"""
import os, shutil, signal, sys, time

path = sys.argv[1]
marker = b"\0" + (sys.argv[2] + "=" + path).encode() + b"\0"
inside = (path + "/").encode()
me = os.getpid()


def members():
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open("/proc/" + name + "/cmdline", "rb") as f:
                if inside in f.read():
                    found.append(int(name))
                    continue
            with open("/proc/" + name + "/environ", "rb") as f:
                if marker in b"\0" + f.read():
                    found.append(int(name))
        except OSError:
            pass
    return found


def stop_members():
    for attempt in range(40):
        pids = members()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM if attempt < 5 else signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05 if attempt < 5 else 0.1)


def cleanup(*_):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP, signal.SIGINT})
    stop_members()
    for _ in range(100):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            break
        stop_members()
        time.sleep(0.05)
    os._exit(0)


for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(sig, cleanup)
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass
cleanup()
"""


def _is_tmpfs(path: Path) -> bool:
    try:
        mounts = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    return any(len(f) > 2 and f[1] == str(path) and f[2] == "tmpfs" for f in (line.split() for line in mounts))


def private_base() -> Path:
    """Where private dirs go: /dev/shm when it is a writable tmpfs (memory only), else the temp dir."""
    if SHM.is_dir() and os.access(SHM, os.W_OK | os.X_OK) and _is_tmpfs(SHM):
        return SHM
    return Path(tempfile.gettempdir())


def _accepts(sock: Path) -> bool:
    """Whether a Unix socket accepts a connection now."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(sock))
        except OSError:
            return False
    return True


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of our helpers: a PATH and the locale, none of the caller's secrets."""
    env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL") if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(extra)
    return env


class PrivateDir:
    """``with PrivateDir() as pd:``: ``pd.path`` exists (0700) until the block ends or the process dies."""

    def __init__(self, base: Path | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base or private_base()))
        self.path.chmod(0o700)
        self.agent_socket: Path | None = None
        self._agent: subprocess.Popen[bytes] | None = None
        read_end, self._write_end = os.pipe()  # both non-inheritable: no child of ours keeps the write end open
        try:
            self._watchdog: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG, str(self.path), MARKER_ENV],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                env=_clean_env(),
                start_new_session=True,
            )
        except BaseException:
            os.close(self._write_end)
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        finally:
            os.close(read_end)

    @property
    def marker(self) -> dict[str, str]:
        """The environment entry that makes a process part of this run (stopped with it)."""
        return {MARKER_ENV: str(self.path)}

    def file(self, name: str, content: str) -> Path:
        """Write ``<dir>/<name>`` (0600, new)."""
        path = self.path / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(content)
        return path

    def start_agent(self, private_key: str, timeout: float = 10.0) -> dict[str, str]:
        """An ssh-agent holding ``private_key`` (read from a pipe, never a file); returns ``SSH_AUTH_SOCK``."""
        sock = self.path / "agent.sock"
        # -D: in the foreground, our child; its command line names the socket, so the watchdog stops it too.
        agent = subprocess.Popen(
            ["ssh-agent", "-D", "-a", str(sock)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_clean_env(**self.marker),
        )
        deadline = time.monotonic() + timeout
        # Until the agent accepts a connection: its socket file exists from bind(), a moment before listen() (on a
        # loaded machine ssh-add then meets "Connection refused").
        while not _accepts(sock):
            if agent.poll() is not None or time.monotonic() > deadline:
                agent.kill()
                raise RuntimeError(f"ssh-agent did not start (exit status {agent.wait()})")
            time.sleep(0.01)
        self.agent_socket, self._agent = sock, agent
        env = {"SSH_AUTH_SOCK": str(sock)}
        added = subprocess.run(
            ["ssh-add", "-q", "-"],
            input=(private_key if private_key.endswith("\n") else private_key + "\n").encode(),
            capture_output=True,
            env=_clean_env(**env, SSH_ASKPASS_REQUIRE="never"),
            start_new_session=True,  # no controlling terminal: a passphrase prompt fails instead of hanging
            timeout=timeout,
            check=False,
        )
        if added.returncode != 0:
            # ssh-add names the problem ("invalid format"), never the key's text.
            reason = added.stderr.decode(errors="replace").strip() or f"exit status {added.returncode}"
            raise ValueError(f"the SSH private key could not be loaded into ssh-agent: {reason}")
        return env

    def close(self, timeout: float = 30.0) -> None:
        """Stop the run's processes (the agent, lingering ssh masters) and remove the directory; idempotent."""
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1
        if self._watchdog is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout)
            self._watchdog = None
        if self._agent is not None:  # stopped by the watchdog; reaped here
            if self._agent.poll() is None:
                self._agent.kill()
            self._agent.wait()
            self._agent = None
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> PrivateDir:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
