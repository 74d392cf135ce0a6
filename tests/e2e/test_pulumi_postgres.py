"""Team state on PostgreSQL: Pulumi's DIY `postgres://` backend, with Debian's PostgreSQL started by the test.

A host-free stack: a tiny program of `pulumi_command` local commands (as the fleet's GpuNode uses) whose
`create` appends a line to a mark file, so every run of a command is counted, and whose environment holds a
secret, so the test can see that secrets reach the database encrypted. Checked: two `pulumi up` at once (the
second is refused by the stack lock, nothing is lost), a second controller (its own PULUMI_HOME and checkout,
the same backend URL and passphrase) sees the same stack and its no-op `up` changes nothing, and a stack moved
from `file://` to PostgreSQL with `pulumi stack export`/`import` keeps every resource (the next `up` is a no-op).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.e2e

PROGRAM = """import pulumi

from pulumi_command.local import Command as LocalCommand

cfg = pulumi.Config()
mark, hold = cfg.require("mark"), cfg.require("hold")
token = cfg.require_secret("token")
for i in range(cfg.require_int("nodes")):
    # `hold` holds the run (and so the stack's lock) while the file exists: the race is made, not hoped for.
    LocalCommand(
        f"node{i}-converge",
        create=f"while [ -e {hold} ]; do sleep 0.1; done; echo node{i} >> {mark}",
        environment={"TOKEN": token},
    )
"""
SECRET = "team-secret-7f3a"
NODES = 3


def _pg_bin() -> Path | None:
    """Debian's server binaries (/usr/lib/postgresql/<major>/bin, the newest), else initdb on PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    initdb = found[-1] if found else Path(shutil.which("initdb") or "/nonexistent")
    return initdb.parent if all((initdb.parent / n).exists() for n in ("initdb", "pg_ctl", "psql")) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Postgres:
    url: str
    bin: Path
    port: int
    socket_dir: Path

    def sql(self, query: str) -> str:
        psql = self.bin / "psql"
        argv = [str(psql), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "pulumi", "-At"]
        return subprocess.run([*argv, "-c", query], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    """A private PostgreSQL cluster (initdb + pg_ctl in a temp dir, a free port), not the system service."""
    pg_bin = _pg_bin()
    if pg_bin is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql")
    # Under /tmp itself: the server's user must reach its data dir (pytest's tmp dirs are the caller's alone).
    root = Path(tempfile.mkdtemp(prefix="vllm-fleet-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        try:
            import pwd

            pw = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no `postgres` user to run the server as")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data, log, port = root / "data", root / "log", _free_port()

    def pg(*argv: str) -> None:
        subprocess.run([*run_as, *argv], check=True, capture_output=True, text=True, timeout=120)

    pg(str(pg_bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg(str(pg_bin / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts, "-w", "start")
    try:
        pg(str(pg_bin / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "pulumi")
        yield Postgres(f"postgres://postgres@127.0.0.1:{port}/pulumi?sslmode=disable", pg_bin, port, root)
    finally:
        subprocess.run([*run_as, str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def engine() -> Any:
    from vllm_fleet.deploy.engine import ensure_engine

    try:
        return ensure_engine(lambda _m: None)
    except (subprocess.CalledProcessError, OSError) as err:
        pytest.skip(f"the Pulumi engine cannot be built here (tools/build_pulumi_engine.sh): {err}")


class Controller:
    """One operator's machine: its own PULUMI_HOME and checkout of the project, a backend URL, a passphrase."""

    def __init__(self, engine: Any, work: Path, backend: str, passphrase: Path) -> None:
        self.work = work
        home = work.parent / f"{work.name}-home"
        home.mkdir(exist_ok=True)
        self.env = {
            **os.environ,
            **engine.env(),
            "PULUMI_HOME": str(home),
            "PULUMI_BACKEND_URL": backend,
            "PULUMI_CONFIG_PASSPHRASE_FILE": str(passphrase),
        }
        # Resource plugins are looked up in PULUMI_HOME: each operator installs the `command` plugin the
        # pulumi_command SDK asks for (ours, as tools/build_pulumi_engine.sh installed it for the engine).
        (provider,) = Path(engine.home).glob("plugins/resource-command-v*/pulumi-resource-command")
        version = subprocess.run([str(provider), "-version"], check=True, capture_output=True, text=True).stdout
        plugin = ["plugin", "install", "resource", "command", version.strip(), "--file", str(provider)]
        subprocess.run(["pulumi", *plugin], env=self.env, check=True, capture_output=True, text=True)

    def pulumi(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = ["pulumi", *args, "--non-interactive", "--color", "never"]
        done = subprocess.run(argv, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=600)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def popen(self, *args: str) -> subprocess.Popen[str]:
        argv = ["pulumi", *args, "--non-interactive", "--color", "never"]
        return subprocess.Popen(
            argv, cwd=self.work, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def resources(self, stack: str) -> list[str]:
        """The stack's resources (the Stack itself and its provider included), by URN."""
        exported = json.loads(self.pulumi("stack", "export", "--stack", stack).stdout)
        return sorted(r["urn"] for r in exported["deployment"].get("resources") or [])


def project(work: Path, mark: Path, hold: Path) -> Path:
    work.mkdir(parents=True)
    venv = Path(sys.executable).parent.parent
    runtime = {"name": "python", "options": {"toolchain": "pip", "virtualenv": str(venv)}}
    (work / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "vllm-fleet-team", "runtime": runtime}))
    (work / "__main__.py").write_text(PROGRAM)
    (work / "config.json").write_text(json.dumps({"mark": str(mark), "hold": str(hold), "nodes": NODES}))
    return work


def init_stack(c: Controller, stack: str) -> None:
    c.pulumi("stack", "init", stack, "--secrets-provider", "passphrase")
    settings = json.loads((c.work / "config.json").read_text())
    for key, value in settings.items():
        c.pulumi("config", "set", "--stack", stack, key, str(value))
    c.pulumi("config", "set", "--stack", stack, "--secret", "token", SECRET)


def lines(mark: Path) -> list[str]:
    return mark.read_text().split() if mark.exists() else []


def commands(urns: list[str]) -> list[str]:
    return sorted(u.rsplit("::", 1)[-1] for u in urns if "command:local:Command" in u)


NAMES = [f"node{i}-converge" for i in range(NODES)]


def test_two_ups_at_once_second_refused_nothing_lost_and_a_second_controller(
    tmp_path: Path, postgres: Postgres, engine: Any
) -> None:
    passphrase = tmp_path / "passphrase"
    passphrase.write_text("a passphrase the team keeps in its vault\n")
    mark, hold = tmp_path / "mark", tmp_path / "hold"
    first = Controller(engine, project(tmp_path / "alice", mark, hold), postgres.url, passphrase)
    init_stack(first, "fleet")

    hold.touch()
    running = first.popen("up", "--yes", "--stack", "fleet")
    try:
        deadline = time.monotonic() + 120
        # The first run holds the stack's lock (a row of the state table) and is inside its commands.
        while "locks" not in postgres.sql("SELECT key FROM pulumi_state") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert running.poll() is None, running.communicate()[0]
        second = first.pulumi("up", "--yes", "--stack", "fleet", check=False)
        refused = second.stdout + second.stderr
        assert second.returncode != 0
        assert "the stack is currently locked by 1 lock(s)" in refused, refused
        assert "pulumi cancel" in refused and "pid " in refused  # who holds it, and the way out
        assert lines(mark) == []  # the refused run ran nothing
    finally:
        hold.unlink(missing_ok=True)
        out, _ = running.communicate(timeout=300)
    assert running.returncode == 0, out
    assert sorted(lines(mark)) == [f"node{i}" for i in range(NODES)]  # each command once
    kept = first.resources("fleet")
    assert commands(kept) == NAMES  # nothing lost
    assert postgres.sql("SELECT count(*) FROM pulumi_state WHERE key LIKE '%locks%'").strip() == "0"
    # Each row holds one blob of the DIY layout (base64 in JSON): the checkpoint has ciphertext, never the secret.
    rows = postgres.sql("SELECT data::text FROM pulumi_state").split()
    stored = "".join(base64.b64decode(json.loads(r)["data"]).decode(errors="replace") for r in rows)
    assert "ciphertext" in stored
    assert SECRET not in stored  # stays encrypted with the passphrase

    # A second operator: own PULUMI_HOME and checkout (the stack file, with its encryption salt, is committed).
    bob_work = tmp_path / "bob"
    shutil.copytree(first.work, bob_work)
    bob = Controller(engine, bob_work, postgres.url, passphrase)
    assert "fleet" in bob.pulumi("stack", "ls").stdout
    assert bob.resources("fleet") == kept
    assert bob.pulumi("config", "get", "--stack", "fleet", "token").stdout.strip() == SECRET
    bob.pulumi("up", "--yes", "--stack", "fleet", "--expect-no-changes")
    assert sorted(lines(mark)) == [f"node{i}" for i in range(NODES)]  # no command ran again


def test_file_stack_moves_to_postgres_untouched(tmp_path: Path, postgres: Postgres, engine: Any) -> None:
    passphrase = tmp_path / "passphrase"
    passphrase.write_text("lab passphrase\n")
    mark, hold = tmp_path / "mark", tmp_path / "hold"
    state = tmp_path / "file-state"
    state.mkdir()
    work = project(tmp_path / "lab", mark, hold)
    lab = Controller(engine, work, f"file://{state}", passphrase)
    init_stack(lab, "lab")
    lab.pulumi("up", "--yes", "--stack", "lab")
    before = lab.resources("lab")
    assert commands(before) == NAMES and len(lines(mark)) == NODES
    exported = tmp_path / "lab.json"
    lab.pulumi("stack", "export", "--stack", "lab", "--file", str(exported))
    assert SECRET not in exported.read_text()  # the export keeps secrets encrypted

    team = Controller(engine, work, postgres.url, passphrase)
    # Pulumi.lab.yaml keeps its encryption salt: the same passphrase decrypts the imported secrets.
    team.pulumi("stack", "init", "lab", "--secrets-provider", "passphrase")
    team.pulumi("stack", "import", "--stack", "lab", "--file", str(exported))
    assert team.resources("lab") == before
    team.pulumi("up", "--yes", "--stack", "lab", "--expect-no-changes")
    assert len(lines(mark)) == NODES  # no node touched
    assert team.pulumi("config", "get", "--stack", "lab", "token").stdout.strip() == SECRET
