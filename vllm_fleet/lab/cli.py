"""``vllm-fleet lab up|status|down`` (also ``python -m vllm_fleet.lab.cli``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vllm_fleet.lab import config
from vllm_fleet.lab.hosts import LabStatus, lab_status, lab_up
from vllm_fleet.lab.site import site_down, site_up
from vllm_fleet.lab.system import LabError, require_root

app = typer.Typer(
    help="A local lab of real systemd hosts (systemd-nspawn containers on a private bridge). Needs root.",
    no_args_is_help=True,
)
console = Console()

StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="where the lab keeps its hosts and state [default: $VLLM_FLEET_LAB_DIR or /var/lib/vllm-fleet/lab]",
    ),
]


def _fail(err: LabError) -> typer.Exit:
    console.print("[red]error:[/red]", escape(str(err)))  # the error may quote a host's output: not markup
    return typer.Exit(code=1)


def _root() -> None:
    try:
        require_root()
    except LabError as err:
        raise _fail(err) from None


@app.command()
def up(
    hosts: Annotated[
        int | None,
        typer.Option(
            "--hosts",
            "-n",
            help=f"number of hosts [default: as many as are up, else {config.DEFAULT_HOSTS}]",
            min=1,
        ),
    ] = None,
    state_dir: StateDirOpt = None,
    inventory: Annotated[
        Path | None, typer.Option(help="inventory directory to write [default: inventories/lab]")
    ] = None,
    mirror: Annotated[bool, typer.Option(help="also build and serve the air-gapped mirror on the bridge")] = True,
) -> None:
    """Start the lab (builds the Debian rootfs once); a no-op when it is already up."""
    _root()
    start = time.monotonic()
    try:
        if mirror:
            state = site_up(hosts, state_dir, log=console.print).state
        else:
            state = lab_up(hosts, state_dir, inventory_dir=inventory, log=console.print)
    except LabError as err:
        raise _fail(err) from None
    console.print(f"lab up: {len(state.hosts)} hosts in {time.monotonic() - start:.1f}s")


@app.command()
def status(
    state_dir: StateDirOpt = None,
    probe: Annotated[bool, typer.Option(help="ask each host's systemd over SSH")] = True,
) -> None:
    """Show the lab's hosts."""
    _root()
    try:
        st = lab_status(state_dir, probe=probe)
    except LabError as err:
        raise _fail(err) from None
    console.print(status_table(st))


def status_table(st: LabStatus) -> Table | str:
    if st.state is None:
        extra = f" (but the {config.lab_net().bridge} bridge exists: run `lab down`)" if st.bridge_up else ""
        return f"lab is down{extra}"
    s = st.state
    table = Table(title=f"vllm-fleet lab ({s.state_dir}), bridge {s.bridge} {s.bridge_ip}")
    for col in ("host", "ip", "state", "system", "supervisor", "nspawn", "boots"):
        table.add_column(col, no_wrap=True)
    table.add_column("failed units")
    for h in st.hosts:
        table.add_row(
            h.name,
            h.ip,
            "[green]running[/green]" if h.running else "[red]stopped[/red]",
            h.system,
            str(h.supervisor_pid or "-"),
            str(h.nspawn_pid or "-"),
            str(h.boots),
            ", ".join(h.failed_units) or "-",
        )
    return table


@app.command()
def down(state_dir: StateDirOpt = None) -> None:
    """Stop every lab host and remove the lab network, mounts and cgroups."""
    _root()
    start = time.monotonic()
    try:
        site_down(state_dir, log=console.print)
    except LabError as err:
        raise _fail(err) from None
    console.print(f"lab down in {time.monotonic() - start:.1f}s")


if __name__ == "__main__":
    app()
