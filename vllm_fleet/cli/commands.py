"""The `vllm-fleet` command line: each command a few lines over the library."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

from vllm_fleet.cli import plan_report as report
from vllm_fleet.cli.tune import tune_cmd
from vllm_fleet.fleet.spec import AnalysisSpec
from vllm_fleet.profiles.loader import ProfileError, builtin_profiles, load_profile
from vllm_fleet.profiles.planner import DEFAULT_CONTEXT_TOKENS, plan
from vllm_fleet.profiles.render import config_yaml, env_file, render
from vllm_fleet.profiles.validate import check_file
from vllm_fleet.project.paths import project_root
from vllm_fleet.project.tables import print_table, styled, table
from vllm_fleet.trust.node_reads import DEFAULT_BOUNDS, MiB
from vllm_fleet.trust.node_text import printable

if TYPE_CHECKING:
    from vllm_fleet.probes.smoke import SmokeResult
    from vllm_fleet.rollout.router import HAProxyRouter

_T = TypeVar("_T")

EX_SOFTWARE = 70
"""Exit code of an internal error (sysexits.h): a bug to report, never an answer to the input."""


class _GuardedTyper(typer.Typer):
    """The command line's last resort: an exception no command turned into its one-line error is one line naming
    its type and the way to the traceback (``VLLM_FLEET_DEBUG=1``), exit 70; never a traceback on a user's screen.
    Usage errors stay click's (exit 2); Ctrl-C is typer's quiet exit 130."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import os

        try:
            return super().__call__(*args, **kwargs)
        except Exception as e:
            if os.environ.get("VLLM_FLEET_DEBUG"):
                raise
            why = printable(f"{type(e).__name__}: {e}")[:500]
            sys.stderr.write(
                f"vllm-fleet: internal error: {why} (please report; rerun with VLLM_FLEET_DEBUG=1 for the traceback)\n"
            )
            sys.exit(EX_SOFTWARE)


app = _GuardedTyper(
    help="Infrastructure-as-code for vLLM on sovereign GPU servers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,  # VLLM_FLEET_DEBUG=1: the plain traceback, no locals (they hold API keys)
)
out = Console()
err = Console(stderr=True)

ProfileOpt = Annotated[str, typer.Option("--profile", "-p", help="Built-in profile name or a profile YAML file.")]


class Format(StrEnum):
    argv = "argv"
    yaml = "yaml"
    env = "env"


def _fail(error: ProfileError | ValueError, code: int = 1) -> typer.Exit:
    if isinstance(error, ProfileError):
        for problem in error.problems:
            err.print(printable(f"{error.source}: {problem}", newlines=True), markup=False, highlight=False)
    else:
        err.print(printable(f"error: {error}", newlines=True), markup=False, highlight=False)
    return typer.Exit(code)


# Argument checks, as click parameter callbacks: a bad value is click's usage error (exit 2) naming the option,
# before any work. click's FloatRange lets nan through and inf past a min, hence _finite.
def _finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def _positive(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value} is not a positive finite number")
    return value


def _out_file(value: Path | None) -> Path | None:
    """An output file: not a directory, in an existing folder this user may write."""
    if value is None:
        return None
    shown = printable(str(value))
    if value.is_dir():
        raise typer.BadParameter(f"{shown} is a directory; name a file (e.g. {shown}/report.xml)")
    folder = value.parent
    if not folder.is_dir():
        raise typer.BadParameter(f"folder {printable(str(folder))} does not exist; create it first")
    if not os.access(folder, os.W_OK | os.X_OK) or (value.exists() and not os.access(value, os.W_OK)):
        raise typer.BadParameter(f"{shown} is not writable by this user; name another file")
    return value


def _out_dir(value: Path | None) -> Path | None:
    """An output directory: not a file; created with its parents when missing, under a folder this user may write."""
    if value is None:
        return None
    shown = printable(str(value))
    if value.exists() and not value.is_dir():
        raise typer.BadParameter(f"{shown} is a file, not a directory; name a directory")
    existing = value
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise typer.BadParameter(f"{printable(str(existing))} is a file, so {shown} cannot be a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise typer.BadParameter(f"{printable(str(existing))} is not writable by this user; name another directory")
    return value


MAX_CONCURRENCY = 4096
"""Highest `bench --concurrency` level (clients at once)."""


def _concurrency_levels(value: str) -> list[int]:
    levels = []
    for part in value.split(","):
        level = part.strip()
        if not level:
            continue
        if not (level.isascii() and level.isdigit() and 1 <= int(level) <= MAX_CONCURRENCY):
            shown = printable(level)[:40]
            raise typer.BadParameter(f"{shown!r} is not a whole number from 1 to {MAX_CONCURRENCY}; e.g. 1,2,4,8")
        levels.append(int(level))
    if not levels:
        raise typer.BadParameter("no level; give levels such as 1,2,4,8")
    return levels


def _concurrency(value: str) -> str:
    _concurrency_levels(value)
    return value


@app.command()
def profiles() -> None:
    """List the built-in decode profiles."""
    listing = table("name", "hardware", "model", "vLLM", "description")
    for p in builtin_profiles():
        listing.add_row(p.name, p.hardware, p.model.model, p.vllm_version, p.description)
    print_table(out, listing)


@app.command("plan")
def plan_cmd(
    profile: ProfileOpt,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    context: Annotated[
        int, typer.Option(help="Mean context tokens per sequence for the aggregate roofline.", min=1)
    ] = (DEFAULT_CONTEXT_TOKENS),
) -> None:
    """Memory budget, KV capacity, decode roofline and findings for a profile. Exit 1 on errors."""
    try:
        result = plan(load_profile(profile), context_tokens=context)
    except (ProfileError, ValueError) as e:
        raise _fail(e) from None
    except KeyError as e:
        raise _fail(ValueError(str(e.args[0]))) from None
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        report.print_plan(out, result)
    raise typer.Exit(0 if result.ok else 1)


@app.command("render")
def render_cmd(
    profile: ProfileOpt,
    vllm_version: Annotated[str | None, typer.Option(help="vLLM release to render for (default: the pin).")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="argv (JSON array), yaml (--config) or env.")] = (
        Format.argv
    ),
    check: Annotated[bool, typer.Option(help="Also parse the result with vLLM's own argument parser.")] = False,
) -> None:
    """Render a profile into what one vLLM release accepts."""
    try:
        prof = load_profile(profile)
        rendered = render(prof, vllm_version)
    except (ProfileError, ValueError) as e:
        raise _fail(e) from None
    if fmt is Format.argv:
        sys.stdout.write(json.dumps(rendered.argv) + "\n")
    elif fmt is Format.yaml:
        sys.stdout.write(config_yaml(prof, rendered))
    else:
        sys.stdout.write(env_file(rendered))
    if check:
        from vllm_fleet.vllm.check import check_argv, find_vllm_python

        python = find_vllm_python()
        if python is None:
            err.print("cannot check: no vLLM found (set VLLM_FLEET_VLLM_PYTHON or run tools/vllm_cpu_env.sh)")
            raise typer.Exit(2)
        result = check_argv(rendered.argv, python)
        if not result.accepted:
            why = f"({result.stage}): {result.error}"
            err.print(f"vLLM {result.vllm_version} rejected the arguments {why}", markup=False)
            raise typer.Exit(1)
        err.print(f"vLLM {result.vllm_version} accepts the arguments", markup=False)


@app.command()
def validate(
    files: Annotated[
        list[Path], typer.Argument(help="Profile files, stack configs (Pulumi.<stack>.yaml) or Ansible inventories.")
    ],
    strict: Annotated[bool, typer.Option(help="Fail on warnings too.")] = False,
) -> None:
    """Check profiles, stack configs and inventories without touching a host: schema, values, role variables,
    arithmetic and the pinned vLLM version. One line per problem, `FILE: field: message`."""
    from vllm_fleet.fleet.files import check_fleet_file

    failed = False
    for path in files:
        fleet_file = check_fleet_file(path)
        if fleet_file is not None:
            for problem in fleet_file.problems:
                out.print(f"{path}: {problem}", markup=False, highlight=False, soft_wrap=True)
            notes = fleet_file.notes
            for note in notes:
                line = f"{path}: {note.field}: warning: {note.message}"
                (out if strict else err).print(printable(line), markup=False, highlight=False, soft_wrap=True)
            failed |= bool(fleet_file.problems) or (strict and bool(notes))
            continue
        errors, findings = check_file(path)
        for problem in errors:
            out.print(f"{path}: {problem}", markup=False, highlight=False, soft_wrap=True)
        for f in findings:
            line = f"{path}: {f.field}: {f.severity}: {f.message}"
            (out if strict and f.severity == "warning" else err).print(line, markup=False, highlight=False)
        failed |= bool(errors) or (strict and any(f.severity == "warning" for f in findings))
    raise typer.Exit(1 if failed else 0)


@app.command()
def migrate(
    command: Annotated[str, typer.Argument(help="An old `vllm serve …` command line, quoted.")],
    vllm_version: Annotated[str, typer.Option(help="The vLLM release the profile is pinned to.")],
    hardware: Annotated[str, typer.Option(help="Hardware catalog key the profile is for.")],
    name: Annotated[str | None, typer.Option(help="Profile name (default: hardware-model).")] = None,
) -> None:
    """Rewrite an old `vllm serve` command line into a profile for a given vLLM release."""
    from vllm_fleet.profiles.migrate import migrate as do_migrate

    try:
        migration = do_migrate(command, vllm_version, hardware, name)
    except (ProfileError, ValueError) as e:
        raise _fail(e) from None
    sys.stdout.write(migration.to_yaml())


def _print_checks(result: SmokeResult, as_json: bool, junit: Path | None) -> None:
    if junit is not None:
        junit.write_text(result.junit(), encoding="utf-8")
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return
    checks = table("check", "result", "detail", title=f"smoke: {result.url} ({result.profile})")
    style = {"pass": "green", "fail": "bold red", "skip": "dim", "warn": "yellow"}
    for c in result.checks:
        checks.add_row(c.name, styled(c.status, style[c.status]), c.detail)
    print_table(out, checks)
    if result.reason:
        err.print(f"could not check: {printable(result.reason)}", markup=False)


@app.command("smoke")
def smoke_cmd(
    url: Annotated[str, typer.Argument(help="Base URL of the node, e.g. http://10.0.0.5:8000")],
    profile: ProfileOpt,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for /health.", min=0, callback=_finite)] = 120,
    requests: Annotated[int, typer.Option(help="Concurrent probe completions.", min=1, max=MAX_CONCURRENCY)] = 4,
    max_tokens: Annotated[int, typer.Option(help="Tokens per probe completion.", min=1)] = 32,
    api_key_file: Annotated[
        Path | None, typer.Option(help="File holding the node's API key.", exists=True, dir_okay=False)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    junit: Annotated[Path | None, typer.Option(help="Also write a JUnit XML report here.", callback=_out_file)] = None,
) -> None:
    """Gate a node: /health, /v1/models, a probe load, then /metrics against the profile.

    Exit 0 pass, 1 fail, 2 could not check."""
    from vllm_fleet.probes.smoke import smoke

    try:
        prof = load_profile(profile)
    except ProfileError as e:
        raise _fail(e, 2) from None
    key = _read_secret(api_key_file, "--api-key-file").strip() if api_key_file else None
    result = smoke(url, prof, timeout_s=timeout, requests=requests, max_tokens=max_tokens, api_key=key)
    _print_checks(result, as_json, junit)
    raise typer.Exit(result.exit_code)


@app.command("up")
def up_cmd(
    hosts: Annotated[
        int | None, typer.Option("--hosts", "-n", help="Lab hosts (default: as many as are up, else 2).", min=1)
    ] = (None),
    stack_name: Annotated[str, typer.Option("--stack", help="Pulumi stack name.")] = "lab",
    profile: Annotated[
        str,
        typer.Option(
            "--profile",
            "-p",
            help="Decode profile of every lab host (name or file): a changed one rolls out host by host, "
            "each drained from the lab's router before its restart (docs/rollouts.md).",
        ),
    ] = "cpu-lab",
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Pulumi's own output on the console too (always in out/pulumi/up-<stack>.log)."
        ),
    ] = False,
) -> None:
    """The main job on the local lab: lab hosts + air-gapped mirror up, then `pulumi up` with the rollout's live
    progress (per host: batch, step, elapsed); ends with the nodes, the rollout's report and the audit."""
    from vllm_fleet.cli.up_report import lab_api_key_file, print_up_report
    from vllm_fleet.fleet.plan import FleetError
    from vllm_fleet.lab.fleet import lab_fleet_up
    from vllm_fleet.rollout.live import RolloutWatch
    from vllm_fleet.rollout.phases import converge_activities

    log_path = project_root() / "out" / "pulumi" / f"up-{stack_name}.log"
    try:
        with (
            converge_activities() as phase_dir,
            RolloutWatch(out, log_path, verbose=verbose, phase_dir=phase_dir) as watch,
        ):
            run = lab_fleet_up(
                hosts,
                stack_name,
                profile=profile,
                log=lambda line: out.print(line, markup=False, highlight=False),
                pulumi_log=watch.on_output,
                on_event=watch.on_event,
            )
            watch.finish(stopped=run.error is not None)
    except FleetError as e:  # a broken --profile file: said before the stack is configured
        raise _fail(ValueError(str(e)), 2) from None
    lab = stack_name == "lab"
    fleet, key, api_key = _lab_audit_source() if lab else (None, None, None)
    print_up_report(
        out,
        run.nodes,
        stack_name,
        profile_refs={h["name"]: h["profile"] for h in (fleet or {}).get("hosts", [])},
        api_key_file=lab_api_key_file() if api_key else None,
        # The lab's Prometheus (LabUp.prometheus_url); None: not started (see monitoring_error).
        prometheus_url=run.prometheus_url,
    )
    if run.error:
        out.print(f"pulumi up failed:\n{run.error}", markup=False, highlight=False)
    if run.monitoring_error:
        err.print(f"the lab's Prometheus did not start: {run.monitoring_error}", markup=False, highlight=False)
    if not lab:
        raise typer.Exit(1 if run.error else 0)
    # The job ends with what the nodes really run: the audit of the lab fleet (reports under out/audit), and
    # what the rollout did to each host (out/rollout), both from the same read of every host.
    from vllm_fleet.audit import audit
    from vllm_fleet.audit.desired import targets
    from vllm_fleet.audit.report import print_table

    reports = project_root() / "out" / "audit"
    reports.mkdir(parents=True, exist_ok=True)
    plan = run.plan  # the plan the lab's Prometheus was generated from: one plan of the fleet per `up`
    from vllm_fleet.lab.fleet import lab_signing_key

    result = audit(targets(plan), reports, private_key=key, api_key=api_key, sign_key=lab_signing_key()[0])
    _print_rollout(plan, run, reports / "evidence")
    print_table(out, result.findings)
    out.print(f"audit reports: {reports}/ (audit.html, audit.json, audit.junit.xml, …; evidence/)", markup=False)
    raise typer.Exit(1 if run.error or run.monitoring_error else result.exit_code)


def _print_rollout(plan: Any, run: Any, evidence: Path) -> None:
    """The rollout's final report (table and out/rollout/report.json) from the audit's evidence of each host."""
    from vllm_fleet.audit.evidence import read_bundle
    from vllm_fleet.rollout.report import host_outcome, summary, to_json

    seen = {ev.host: ev for _, ev, _ in read_bundle(evidence)}
    rows = [
        host_outcome(n.name, run.before.get(n.name), n.config_hash, seen.get(n.name), run.started_at)
        for n in plan.nodes
    ]
    report = table("host", "outcome", "before", "target", "on disk", "journal", "detail", title="rollout")
    for r in rows:
        report.add_row(r.host, r.outcome, r.before or "(new)", r.target, r.now or "-", r.phase or "-", r.detail)
    print_table(out, report)
    path = project_root() / "out" / "rollout" / "report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_json(rows, error=run.error), encoding="utf-8")
    counts = ", ".join(f"{n} {o}" for o, n in summary(rows).items())
    out.print(f"rollout: {counts}; report: {path}", markup=False, highlight=False)


def _lab_audit_source() -> tuple[Any, str | None, str | None]:
    """The main job's lab fleet: its stack config, the lab's SSH key and the lab API key."""
    from vllm_fleet.lab import config as lab_config
    from vllm_fleet.lab.fleet import lab_api_key, lab_stack_fleet
    from vllm_fleet.lab.local_vllm import tiny_model_dir
    from vllm_fleet.lab.stack import lab_fleet
    from vllm_fleet.lab.state import load_state

    state = load_state(lab_config.state_dir())
    if state is None or not state.hosts:
        raise _fail(ValueError("no lab is up: run ./scripts/up (or name a stack file)"), 2)
    # What the lab stack was last configured with (its profile may be another than cpu-lab: `up --profile`).
    fleet = lab_stack_fleet()
    if fleet is None or {h.get("host_key") for h in fleet.get("hosts", [])} != {h.host_key for h in state.hosts}:
        fleet = lab_fleet(state, tiny_model_dir())  # no stack yet, or one of an earlier lab
    return fleet, Path(state.ssh_key).read_text(), lab_api_key()


def _audit_targets(sources: list[Path] | None, hosts: str) -> list[Any]:
    """The hosts to audit: the lab fleet, a stack config's fleet, or an inventory's node group."""
    from vllm_fleet.audit.desired import inventory_targets, targets
    from vllm_fleet.fleet.files import file_kind
    from vllm_fleet.fleet.spec import plan_fleet
    from vllm_fleet.trust.user_yaml import read_user_yaml

    if not sources:
        return targets(plan_fleet(_lab_audit_source()[0]))
    first = sources[0]
    data = None if first.is_dir() or first.suffix not in {".yaml", ".yml", ".json"} else read_user_yaml(first)
    if isinstance(data, dict) and file_kind(first, data) == "stack":
        return targets(plan_fleet((data.get("config") or {}).get("vllm-fleet:fleet")))
    return inventory_targets([str(s) for s in sources], hosts)


@app.command("audit")
def audit_cmd(
    sources: Annotated[
        list[Path] | None,
        typer.Argument(help="A stack config (Pulumi.<stack>.yaml) or Ansible inventories; default: the lab fleet."),
    ] = None,
    hosts: Annotated[str, typer.Option("--hosts", help="Inventory only: the group or host to audit.")] = "vllm_nodes",
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where the reports and the evidence bundle go.", callback=_out_dir)
    ] = Path("out/audit"),
    evidence: Annotated[
        Path | None, typer.Option(help="Judge a saved evidence bundle offline instead of collecting.")
    ] = None,
    waivers: Annotated[
        Path | None, typer.Option(help="Waivers (check, hosts, reason, expires), copied into the evidence.")
    ] = None,
    controls: Annotated[
        Path | None, typer.Option(help="Your own check → control ids mapping (a national baseline) for OSCAL.")
    ] = None,
    ssh_key: Annotated[Path | None, typer.Option(help="SSH private key (default: the controller's agent).")] = None,
    api_key_file: Annotated[Path | None, typer.Option(help="File holding the nodes' API key.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json on stdout.")] = "table",
    all_checks: Annotated[bool, typer.Option("--all", help="Show passed checks in the table too.")] = False,
    sign_key: Annotated[
        Path | None,
        typer.Option(
            help="SSH private key that signs the evidence bundle (ssh-keygen -Y; default for the lab: its own)."
        ),
    ] = None,
    allowed_signers: Annotated[
        Path | None,
        typer.Option(help="With --evidence: OpenSSH allowed-signers file of the keys you trust to sign bundles."),
    ] = None,
    unsigned: Annotated[
        bool,
        typer.Option("--unsigned", help="With --evidence: judge a bundle whose signature is absent or unverified."),
    ] = False,
    host_timeout: Annotated[
        float,
        typer.Option(help="Seconds one host's read (SSH script and endpoints) may take.", min=1, callback=_finite),
    ] = DEFAULT_BOUNDS.ssh_s,
    request_timeout: Annotated[
        float,
        typer.Option(help="Seconds one HTTP request to a node may take, body included.", min=1, callback=_finite),
    ] = DEFAULT_BOUNDS.request_s,
    max_metrics_mib: Annotated[
        int, typer.Option(help="Largest /metrics answer read from a node, MiB.", min=1)
    ] = DEFAULT_BOUNDS.metrics_bytes // MiB,
) -> None:
    """Audit what every node really runs (process argv, config on disk, live /metrics and /version, packages,
    unit hardening) against its profile, read-only. Reports under --out: audit.json, audit.junit.xml, audit.hdf.json,
    audit.oscal.json, audit.html and the evidence bundle (every collected file + sha256 manifest, signed with
    --sign-key). Every read from a node is bounded (docs/security.md): a host that drips or floods is that host's
    error, the others are audited. `--evidence DIR` re-judges a saved bundle offline, its signature verified
    against --allowed-signers (refused unsigned or unverified unless --unsigned).

    Exit codes: 0 compliant, 1 drift found, 2 some host could not be audited (the others are still reported), or
    the bundle or an input file cannot be used."""
    from vllm_fleet.audit import audit, rejudge, write_reports
    from vllm_fleet.audit.evidence import BundleError
    from vllm_fleet.audit.oscal import ControlsError
    from vllm_fleet.audit.report import exit_code, print_table, to_json
    from vllm_fleet.audit.signature import SignatureError
    from vllm_fleet.audit.waivers import WaiverError
    from vllm_fleet.fleet.plan import FleetError
    from vllm_fleet.trust.node_reads import ReadBounds
    from vllm_fleet.trust.user_yaml import InputFileError

    if fmt not in ("table", "json"):
        raise _fail(ValueError(f"--format {fmt!r}: use table or json"), 2)
    if evidence is None and (allowed_signers is not None or unsigned):
        raise _fail(ValueError("--allowed-signers and --unsigned judge a saved bundle: add --evidence DIR"), 2)
    bounds = ReadBounds(request_s=request_timeout, ssh_s=host_timeout, metrics_bytes=max_metrics_mib * MiB)
    provenance: dict[str, object] | None = None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if evidence is not None:
            judged = rejudge(evidence, waivers=waivers, allowed_signers=allowed_signers, unsigned=unsigned)
            findings, provenance = judged.findings, judged.provenance()
            write_reports(judged, out_dir, evidence, controls)
        else:
            private_key = _read_secret(ssh_key, "--ssh-key") if ssh_key else None
            api_key = _read_secret(api_key_file, "--api-key-file").strip() if api_key_file else None
            if not sources:
                _, private_key, api_key = _lab_audit_source()
                if sign_key is None:
                    from vllm_fleet.lab.fleet import lab_signing_key

                    sign_key = lab_signing_key()[0]
            todo = _audit_targets(sources, hosts)
            findings = audit(
                todo,
                out_dir,
                private_key=private_key,
                api_key=api_key,
                waivers=waivers,
                controls=controls,
                sign_key=sign_key,
                bounds=bounds,
            ).findings
    except (FleetError, InputFileError, WaiverError, BundleError, ControlsError, SignatureError) as e:
        raise _fail(ValueError(str(e)), 2) from None
    except OSError as e:
        raise _fail(ValueError(f"{e.filename or out_dir}: {e.strerror or e}"), 2) from None
    if fmt == "json":
        sys.stdout.write(to_json(findings, provenance=provenance))
    else:
        print_table(out, findings, all_checks)
        if provenance is not None:
            signature = provenance["signature"]
            detail = signature.get("detail") if isinstance(signature, dict) else "not checked"
            out.print(f"evidence: {detail}; waivers: {provenance['waivers']}", markup=False, highlight=False)
        out.print(
            f"reports: {out_dir}/ (audit.html, audit.json, audit.junit.xml, audit.oscal.json, hdf/), "
            f"evidence: {out_dir}/evidence" + (f" (signed with {sign_key})" if sign_key and evidence is None else ""),
            markup=False,
            highlight=False,
        )
    raise typer.Exit(exit_code(findings))


MAX_SECRET_BYTES = 64 * 1024
"""Largest key file read (an SSH private key is a few KiB)."""


def _read_secret(path: Path, option: str) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SECRET_BYTES + 1)
        if len(raw) > MAX_SECRET_BYTES:
            raise ValueError(f"larger than {MAX_SECRET_BYTES // 1024} KiB, not a key")
        return raw.decode("utf-8")
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) else "not UTF-8 text" if isinstance(e, UnicodeError) else str(e)
        shown = printable(str(path))
        raise _fail(ValueError(f"{option} {shown}: cannot read: {why}; give a readable file"), 2) from None


@app.command("monitoring")
def monitoring_cmd(
    sources: Annotated[
        list[Path] | None,
        typer.Argument(help="A stack config (Pulumi.<stack>.yaml) or Ansible inventories; default: the lab fleet."),
    ] = None,
    profiles: Annotated[
        list[str] | None,
        typer.Option(
            "--profile", "-p", help="Instead of a fleet: rules and dashboards for these profiles, no targets."
        ),
    ] = None,
    hosts: Annotated[str, typer.Option("--hosts", help="Inventory only: the group or host to monitor.")] = "vllm_nodes",
    out_dir: Annotated[Path, typer.Option("--out", help="The directory to write.", callback=_out_dir)] = Path(
        "out/monitoring"
    ),
    runbook: Annotated[
        str, typer.Option(help="Where docs/monitoring.md is served: each alert's runbook_url is this + #alert.")
    ] = "docs/monitoring.md",
) -> None:
    """Prometheus targets (file_sd), recording and alerting rules and Grafana dashboards for a fleet, from the
    metric table of each vLLM release it runs: DIR/prometheus.yml, targets/, rules/, dashboards/, NOTES.md."""
    from vllm_fleet.fleet.plan import FleetError
    from vllm_fleet.monitoring import MonitoredNode, profile_scopes, scopes_of, sentinel_port, write_monitoring
    from vllm_fleet.trust.user_yaml import InputFileError

    try:
        if profiles:
            nodes = None
            scopes = profile_scopes([load_profile(p) for p in profiles])
        else:
            port = sentinel_port({})  # the role's default port: a fleet that moves it sets it in its stack config
            nodes = [MonitoredNode.from_desired(t.desired, port) for t in _audit_targets(sources, hosts)]
            scopes = scopes_of(nodes)
        written = write_monitoring(out_dir, scopes, nodes, runbook)
    except ProfileError as e:
        raise _fail(e, 2) from None
    except (FleetError, InputFileError, ValueError) as e:
        raise _fail(ValueError(str(e)), 2) from None
    for path in written.files:
        out.print(str(path), markup=False, highlight=False)
    for note in written.notes:
        err.print(f"note: {note.scope}: {note.message}", markup=False, highlight=False, soft_wrap=True)


@app.command("bench")
def bench_cmd(
    url: Annotated[str, typer.Argument(help="Base URL of the node.")],
    profile: ProfileOpt,
    concurrency: Annotated[
        str, typer.Option(help="Comma-separated concurrency levels (1 to 4096).", callback=_concurrency)
    ] = "1,2,4,8",
    max_tokens: Annotated[int, typer.Option(help="Tokens per completion (ignore_eos).", min=1)] = 64,
    requests_per_client: Annotated[int, typer.Option(help="Sequential completions per client per level.", min=1)] = 2,
    as_json: Annotated[bool, typer.Option("--json", help="Print the sweep as JSON.")] = False,
    plot_file: Annotated[
        Path | None, typer.Option("--plot", help="Write a PNG of throughput vs concurrency.", callback=_out_file)
    ] = None,
    api_key_file: Annotated[
        Path | None, typer.Option(help="File holding the node's API key.", exists=True, dir_okay=False)
    ] = None,
) -> None:
    """Decode tokens/s per user and aggregate, TTFT and ITL at each concurrency, beside the planner's roofline."""
    from vllm_fleet.cli.bench import BenchError, plot, sweep, tables

    try:
        prof = load_profile(profile)
        levels = _concurrency_levels(concurrency)
    except (ProfileError, ValueError) as e:
        raise _fail(e, 2) from None
    key = _read_secret(api_key_file, "--api-key-file").strip() if api_key_file else None
    try:
        result = sweep(url, prof, levels, max_tokens=max_tokens, requests_per_client=requests_per_client, api_key=key)
    except BenchError as e:
        raise _fail(e, 2) from None
    if plot_file:
        plot(result, plot_file)
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return
    for tbl in tables(result):
        print_table(out, tbl)
    for x in result.levels:
        for note in x.notes:
            out.print(f"note (C={x.concurrency}): {note}", markup=False, highlight=False, soft_wrap=True)
    first, last = result.levels[0].concurrency, result.levels[-1].concurrency
    out.print(f"batching gain (aggregate at C={last} / C={first}): {result.batching_gain:.2f}×", markup=False)


def _lab_app() -> typer.Typer:
    from vllm_fleet.lab.cli import app as lab

    return lab


app.add_typer(_lab_app(), name="lab", help="The local lab: N systemd-nspawn hosts with an air-gapped mirror.")

metrics_app = typer.Typer(help="Checks on saved /metrics scrapes.", no_args_is_help=True)
app.add_typer(metrics_app, name="metrics")


@metrics_app.command("check")
def metrics_check(
    file: Annotated[Path, typer.Argument(help="A /metrics scrape (Prometheus text format).")],
    profile: ProfileOpt,
    before: Annotated[Path | None, typer.Option(help="An earlier scrape, for counter and histogram deltas.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    junit: Annotated[Path | None, typer.Option(help="Also write a JUnit XML report here.", callback=_out_file)] = None,
) -> None:
    """The smoke test's /metrics checks on saved scrapes. Exit 0 pass, 1 fail, 2 could not check."""
    from vllm_fleet.probes.smoke import SmokeResult
    from vllm_fleet.probes.smoke_checks import check_metrics, read_scrape

    try:
        prof = load_profile(profile)
        after = read_scrape(file)
        earlier = read_scrape(before) if before else None
    except ProfileError as e:
        raise _fail(e, 2) from None
    except (OSError, ValueError) as e:
        raise _fail(ValueError(f"cannot read scrape: {e}"), 2) from None
    result = SmokeResult(url=str(file), profile=prof.name)
    result.checks = check_metrics(prof, after, earlier, plan=plan(prof))
    _print_checks(result, as_json, junit)
    raise typer.Exit(result.exit_code)


router_app = typer.Typer(
    help="The rollout's router hook: take a node out of HAProxy before it restarts, put it back after. "
    "The Ansible role runs `vllm-fleet router --haproxy-socket S drain|ready SERVER`. Exit 2 on errors.",
    no_args_is_help=True,
)
app.add_typer(router_app, name="router")


@router_app.callback()
def router_main(
    ctx: typer.Context,
    haproxy_socket: Annotated[
        Path | None, typer.Option(help="HAProxy's stats socket (`stats socket PATH level admin`). Required.")
    ] = None,
    backend: Annotated[str, typer.Option(help="The HAProxy backend of the vLLM nodes.")] = "vllm",
) -> None:
    """HAProxy's runtime API on its stats socket."""
    ctx.obj = (haproxy_socket, backend)


def _router_call(ctx: typer.Context, call: Callable[[HAProxyRouter], _T]) -> _T:
    from vllm_fleet.rollout.router import HAProxyRouter, RouterError

    socket, backend = ctx.obj
    if socket is None:  # not a required option, so that `router drain --help` works without it
        raise _fail(ValueError("vllm-fleet router: --haproxy-socket PATH is required"), 2)
    try:
        return call(HAProxyRouter(socket, backend))
    except RouterError as e:
        raise _fail(ValueError(str(e)), 2) from None


ServerArg = Annotated[str, typer.Argument(help="The server's name in the backend (the host's name).")]


WaitOpt = Annotated[
    float,
    typer.Option("--wait", help="Seconds to wait for the state to take effect (0: none).", min=0, callback=_finite),
]


@router_app.command("drain")
def router_drain(ctx: typer.Context, server: ServerArg, wait: WaitOpt = 60.0) -> None:
    """No new requests to SERVER; those in flight finish (waits until no session through the router is left;
    still busy after --wait is a warning, not an error: the server's own shutdown-timeout drains the rest)."""
    from vllm_fleet.rollout.router import RouterError

    def drain(r: HAProxyRouter) -> str:
        r.drain(server)
        try:
            return "" if not wait else f" (idle: {r.wait_idle(server, wait).scur} sessions)"
        except RouterError as e:
            return f" (warning: {e})"

    note = _router_call(ctx, drain)
    out.print(f"{ctx.obj[1]}/{server}: drain{note}", markup=False, highlight=False)


@router_app.command("ready")
def router_ready(ctx: typer.Context, server: ServerArg, wait: WaitOpt = 60.0) -> None:
    """SERVER takes requests again (waits until its health check passed and the router sends it requests)."""

    def ready(r: HAProxyRouter) -> None:
        r.ready(server)
        if wait:
            r.wait_serving(server, wait)

    _router_call(ctx, ready)
    out.print(f"{ctx.obj[1]}/{server}: ready", markup=False, highlight=False)


@router_app.command("status")
def router_status(
    ctx: typer.Context, server: Annotated[str | None, typer.Argument(help="One server (default: all).")] = None
) -> None:
    """Each server's admin state (ready, drain, maint), health and current sessions."""
    states = _router_call(ctx, lambda r: [r.state(server)] if server else r.states())
    servers = table("server", "admin", "operational", "status", "sessions", title=f"HAProxy backend {ctx.obj[1]}")
    for s in states:
        servers.add_row(s.name, s.admin, s.operational, s.status, str(s.scur))
    print_table(out, servers)


_ANALYSIS = AnalysisSpec()
"""The canary analysis's defaults: the stack's ``rollout.analysis`` (fleet.spec), one source for both."""


@app.command("canary")
def canary_cmd(
    canary: Annotated[
        str, typer.Argument(help="The canary's base URL (on its new config), e.g. http://10.0.0.11:8000.")
    ],
    baseline: Annotated[list[str], typer.Argument(help="Base URLs of the hosts still on the old config.")],
    vllm_version: Annotated[str, typer.Option(help="The canary's vLLM release (its metric names).")] = "0.32.0",
    baseline_vllm_version: Annotated[
        str | None, typer.Option(help="The baseline's release, when it differs (an upgrade rollout).")
    ] = None,
    window: Annotated[
        float, typer.Option(help="Seconds of traffic compared.", min=1, callback=_finite)
    ] = _ANALYSIS.window_s,
    max_ttft_increase: Annotated[
        float, typer.Option(help="TTFT p95 increase allowed, a share (0.5 = +50 %).", min=0, callback=_finite)
    ] = _ANALYSIS.max_ttft_increase,
    max_itl_increase: Annotated[
        float, typer.Option(help="Mean ITL increase allowed, a share.", min=0, callback=_finite)
    ] = _ANALYSIS.max_itl_increase,
    max_error_rate_increase: Annotated[
        float, typer.Option(help="Error share increase allowed (0.02 = 2 points).", min=0, callback=_finite)
    ] = _ANALYSIS.max_error_rate_increase,
    min_requests: Annotated[
        int, typer.Option(help="Finished requests each side needs in the window.", min=1)
    ] = _ANALYSIS.min_requests,
    alpha: Annotated[
        float, typer.Option(help="Significance of the one-sided tests.", min=0, max=0.5)
    ] = _ANALYSIS.alpha,
    warmup: Annotated[
        float, typer.Option(help="Seconds the canary serves before the first window.", min=0, callback=_finite)
    ] = _ANALYSIS.warmup_s,
    windows: Annotated[
        int, typer.Option(help="Consecutive windows that must each show a regression to roll back.", min=1, max=10)
    ] = _ANALYSIS.windows,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Canary analysis: the canary against the baseline hosts over the same window of real traffic (its TTFT p95,
    mean ITL and error share; the noise rule of docs/rollouts.md#canary-analysis). Exit 0: promote (or
    inconclusive: too few requests), 3: roll back, 2: bad input. The role runs it as vllm_service_canary_command."""
    import json as jsonlib

    from vllm_fleet.rollout.canary import Thresholds, analyse
    from vllm_fleet.trust.node_reads import check_url

    try:
        for url in (canary, *baseline):
            check_url(url)
    except ValueError as e:
        raise _fail(ValueError(f"vllm-fleet canary: {e}"), 2) from None
    t = Thresholds(
        window, max_ttft_increase, max_itl_increase, max_error_rate_increase, min_requests, alpha, warmup, windows
    )
    try:
        verdict = analyse(canary, baseline, vllm_version, t, baseline_vllm_version)
    except (ValueError, KeyError) as e:
        raise _fail(ValueError(f"vllm-fleet canary: {e}"), 2) from None
    if as_json:
        out.print(jsonlib.dumps(verdict.as_dict()), markup=False, highlight=False, soft_wrap=True)
    else:
        rows = table("", "requests", "TTFT p95", "ITL mean", "errors", title=f"canary analysis: {verdict.decision}")
        for side in ("canary", "baseline"):
            f = verdict.figures.get(canary if side == "canary" else "baseline", {})
            rows.add_row(
                side,
                f"{f.get('requests') or 0:g}",
                "-" if f.get("ttft_p95_s") is None else f"{f['ttft_p95_s']:.3g} s",
                "-" if f.get("itl_mean_s") is None else f"{(f['itl_mean_s'] or 0) * 1000:.3g} ms",
                "-" if f.get("error_rate") is None else f"{f['error_rate']:.1%}",
            )
        print_table(out, rows)
        for reason in verdict.reasons:
            out.print(f"- {reason}", markup=False, highlight=False)
    raise typer.Exit(3 if verdict.decision == "rollback" else 0)


app.command("tune")(tune_cmd)

hardware_app = typer.Typer(help="Hardware catalogue entries from real servers.", no_args_is_help=True)
app.add_typer(hardware_app, name="hardware")


@hardware_app.command("import")
def hardware_import(
    query: Annotated[
        str,
        typer.Argument(
            help="Saved output of `nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version "
            "--format=csv` on the server ('-': stdin)."
        ),
    ],
    topo: Annotated[str | None, typer.Option(help="Saved output of `nvidia-smi topo -m` (NVLink, NVSwitch).")] = None,
    key: Annotated[
        str | None, typer.Option(help="Catalogue key (default: the same GPU's, else from the name).")
    ] = None,
    bandwidth_gb_s: Annotated[
        float | None, typer.Option(help="Datasheet DRAM bandwidth, GB/s.", callback=_positive)
    ] = None,
    bf16_tflops: Annotated[
        float | None, typer.Option(help="Datasheet dense BF16 tensor TFLOPS.", callback=_positive)
    ] = None,
    fp8_tflops: Annotated[
        float | None, typer.Option(help="Datasheet dense FP8 tensor TFLOPS.", callback=_positive)
    ] = None,
    nvswitch: Annotated[bool | None, typer.Option("--nvswitch/--no-nvswitch", help="Default: from topo.")] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write the entry here (default: stdout).", callback=_out_file)
    ] = None,
) -> None:
    """A real server's nvidia-smi output as a hardware catalogue entry (hardware.yaml's schema)."""
    from vllm_fleet.catalog import hardware_import as hi

    try:
        imported = hi.import_hardware(
            hi.read_output(query),
            hi.read_output(topo) if topo else None,
            key=key,
            bandwidth_gb_s=bandwidth_gb_s,
            bf16_tflops=bf16_tflops,
            fp8_tflops=fp8_tflops,
            nvswitch=nvswitch,
            query_source=query,
            topology_source=topo or "topo",
        )
    except (hi.HardwareImportError, OSError) as e:
        raise _fail(ValueError(str(e))) from None
    if out_file is None:
        sys.stdout.write(imported.to_yaml())
    else:
        out_file.write_text(imported.to_yaml(), encoding="utf-8")


def main() -> None:
    app()


if __name__ == "__main__":
    main()


model_app = typer.Typer(help="Model weights as they enter a site: manifests of their files.", no_args_is_help=True)
app.add_typer(model_app, name="model")


@model_app.command("manifest")
def model_manifest(
    directory: Annotated[Path, typer.Argument(help="The model's directory (config.json, *.safetensors, tokenizer).")],
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Write the manifest here (default: DIRECTORY.manifest.json beside it).", callback=_out_file
        ),
    ] = None,
) -> None:
    """Write the manifest of a model directory (every file: path, size, sha256) and print its digest, the value of
    ``vllm_models[].manifest_sha256`` (docs/mirror.md, "Model manifests")."""
    from vllm_fleet.models.manifest import ManifestError, make_manifest

    try:
        manifest = make_manifest(directory)
    except (ManifestError, OSError) as e:
        raise _fail(ValueError(str(e))) from None
    whole = directory.resolve()
    target = out_file or whole.parent / f"{whole.name or 'model'}.manifest.json"
    target.write_bytes(manifest.to_bytes())
    typer.echo(printable(f"{target}: {len(manifest.files)} files, {manifest.total_bytes} bytes"))
    typer.echo(f"manifest_sha256: {manifest.digest}")
