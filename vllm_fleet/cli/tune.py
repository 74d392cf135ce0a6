"""`vllm-fleet tune HOST`: the command over ``vllm_fleet.tune`` (docs/tuning.md); registered by cli.commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from vllm_fleet.project.paths import project_root
from vllm_fleet.project.tables import print_table
from vllm_fleet.trust.node_text import printable

out = Console()
err = Console(stderr=True)


def _stop(message: str, code: int = 2) -> typer.Exit:
    err.print(f"vllm-fleet tune: {printable(message)}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _secret(path: Path | None, option: str) -> str | None:
    if path is None:
        return None
    from vllm_fleet.cli.commands import _read_secret  # the command line's one bounded secret reader

    return _read_secret(path, option).strip() or None


def target_for(host: str, stack: str, fleet_file: Path | None, ssh_key: Path | None, api_key: Path | None) -> Any:
    """The host's fleet and secrets: a fleet file (a stack config or the fleet itself) with the key files, the
    lab's own, or a stack's config (Pulumi.<stack>.yaml) with its secrets."""
    from vllm_fleet.tune.node import Target

    if fleet_file is not None:
        from vllm_fleet.trust.user_yaml import InputFileError, read_user_yaml

        try:
            data = read_user_yaml(fleet_file)
        except (InputFileError, OSError) as e:
            raise _stop(f"--fleet {fleet_file}: {e}") from None
        fleet = (data.get("config") or {}).get("vllm-fleet:fleet", data) if isinstance(data, dict) else None
        fleet = json.loads(fleet) if isinstance(fleet, str) else fleet
        if not isinstance(fleet, dict):
            raise _stop(f"--fleet {fleet_file}: not a fleet (a mapping with hosts, or a stack config holding one)")
        return Target(host, fleet, _secret(ssh_key, "--ssh-key-file"), _secret(api_key, "--api-key-file"))
    if stack == "lab":
        from vllm_fleet.cli.commands import _lab_audit_source

        fleet, key, api = _lab_audit_source()
        return Target(host, fleet, _secret(ssh_key, "--ssh-key-file") or key, _secret(api_key, "--api-key-file") or api)
    from vllm_fleet.lab.fleet import lab_stack_fleet
    from vllm_fleet.pulumi.stack_secrets import stack_secrets

    fleet = lab_stack_fleet(stack)
    if fleet is None:
        raise _stop(f"--stack {stack}: no Pulumi.{stack}.yaml with a vllm-fleet:fleet in {project_root()}")
    try:
        key, api = stack_secrets(f"vllm-fleet/{stack}")
    except (RuntimeError, ValueError) as e:
        raise _stop(str(e)) from None
    return Target(host, fleet, _secret(ssh_key, "--ssh-key-file") or key, _secret(api_key, "--api-key-file") or api)


def tune_cmd(
    host: Annotated[str, typer.Argument(help="The host to tune (a name in the fleet).")],
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", help="Starting profile (name or file); default: the host's own.")
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(help="ttft_p95=2,itl_p95=200ms[,error_rate=0.01] (client p95s); default: the profile's slo."),
    ] = None,
    workload: Annotated[
        str, typer.Option(help="input=256,output=64 (random token ids) or dataset=FILE[,output=64]; warmup=N.")
    ] = "input=256,output=64",
    concurrency: Annotated[str, typer.Option(help="Concurrency level(s) of the closed-loop clients: 4 or 1,4.")] = "4",
    requests: Annotated[int, typer.Option(help="Requests per level and repeat (0: four per client).", min=0)] = 0,
    repeats: Annotated[int, typer.Option(help="Repeats of each candidate's measurement.", min=1, max=10)] = 2,
    lever: Annotated[
        list[str] | None,
        typer.Option(help="Search only this lever, over these values: max_num_seqs=2,4,8 (repeatable)."),
    ] = None,
    search: Annotated[str, typer.Option(help="descent (the tuner) or grid (every point).")] = "descent",
    max_trials: Annotated[int, typer.Option(help="Most candidates started by the descent.", min=1, max=500)] = 24,
    min_gain: Annotated[
        float, typer.Option(help="Throughput gain a move needs (0.05 = +5 %), with the test at the analysis's alpha.")
    ] = 0.05,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Evidence and journal (resume: the same --out); default out/tune/HOST.")
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Leave the host on the winner (else its previous config).")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Tune the fleet's last serving host anyway.")] = False,
    stack: Annotated[str, typer.Option(help="The stack whose host it is (lab: the local lab).")] = "lab",
    fleet_file: Annotated[
        Path | None, typer.Option("--fleet", help="A fleet spec or stack config file instead of --stack.")
    ] = None,
    ssh_key_file: Annotated[Path | None, typer.Option(help="SSH private key (with --fleet).")] = None,
    api_key_file: Annotated[Path | None, typer.Option(help="The nodes' API key file.")] = None,
) -> None:
    """Search the decode levers on one host, out of the router, against SLOs: candidates pruned by the planner,
    applied as a rollout applies them, measured by a streaming client; writes the winner as a profile, a table of
    every trial, a Pareto plot and the journal. Exit 0: a winner meets the SLOs; 1: none does (the nearest named),
    or the host could not be put back; 2: bad input."""
    from vllm_fleet.profiles.loader import ProfileError, load_profile
    from vllm_fleet.tune.evidence import trials_table
    from vllm_fleet.tune.node import TuneError
    from vllm_fleet.tune.noise import NoiseRule
    from vllm_fleet.tune.session import Options, tune
    from vllm_fleet.tune.space import SpaceError, parse_levers
    from vllm_fleet.tune.workload import WorkloadError, parse_slo, parse_workload

    if search not in ("descent", "grid"):
        raise _stop(f"--search {search[:40]!r}: want descent or grid")
    if not 0 <= min_gain < 1:
        raise _stop(f"--min-gain {min_gain}: want a share from 0 to 1, e.g. 0.05")
    try:
        levels = [int(c) for c in concurrency.split(",") if c.strip()]
        if not levels or not all(1 <= c <= 4096 for c in levels):
            raise ValueError
    except ValueError:
        raise _stop(f"--concurrency {concurrency[:40]!r}: want whole numbers from 1 to 4096, e.g. 4 or 1,4") from None
    try:
        base = load_profile(profile) if profile else None
        shape = parse_workload(workload, sorted(set(levels)), requests, repeats)
        levers = parse_levers(lever or []) or None
    except ProfileError as e:
        raise _stop(f"--profile: {e}") from None
    except (WorkloadError, SpaceError) as e:
        raise _stop(str(e)) from None
    target = target_for(host, stack, fleet_file, ssh_key_file, api_key_file)
    folder = out_dir or project_root() / "out" / "tune" / host
    options = Options(search, max_trials, apply, force, NoiseRule(min_gain=min_gain))

    def slo_of(p: Any) -> Any:
        return parse_slo(slo, p.slo.ttft_p95_s, p.slo.itl_p95_s)

    def log(line: str) -> None:
        out.print(printable(line), markup=False, highlight=False, soft_wrap=True)

    try:
        result = tune(target, base, slo_of, shape, levers, folder, options, log)
    except (TuneError, WorkloadError, SpaceError) as e:
        raise _stop(str(e)) from None
    for step in result.outcome.steps:
        log(f"search: {step}")
    title = f"tuning {host}: {result.outcome.started} trials ({search})"
    print_table(out, trials_table(result.outcome.trials, result.slo, result.winner, title))
    for note in result.space.notes:
        log(f"not searched: {note}")
    winner = result.winner
    if winner is None:
        log("no candidate could be measured")
    elif result.feasible:
        log(f"winner: trial {winner.number} ({winner.key}): {winner.score(result.slo):.1f} tok/s at the SLO")
    else:
        log(
            f"no candidate meets the SLOs; the nearest: trial {winner.number} ({winner.key}), "
            f"{winner.why_infeasible(result.slo)}"
        )
    for name, path in result.files.items():
        log(f"{name}: {path}")
    log(f"{host}: left on {result.left_on}")
    if "winner" in result.files:
        log(f"roll it to the fleet: vllm-fleet up --profile {result.files['winner']}")
    for problem in result.problems:
        err.print(printable(problem), markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(0 if result.feasible and not result.problems else 1)
