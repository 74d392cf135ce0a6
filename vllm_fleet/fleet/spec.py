"""The fleet spec: hosts, their hardware and profile references, validated before anything runs.

Stack config (Pulumi) and inventories (plain Ansible) both describe a fleet this way. ``resolve_fleet`` turns a
spec into one ``NodePlan`` per host — profile loaded, per-host overrides applied, rendered for the pinned vLLM
version, planned — or raises ``FleetError`` listing every problem as ``hosts[i].field: message``. No host is
touched on the way.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from vllm_fleet.catalog import hardware_catalog
from vllm_fleet.fleet.plan import ConvergeInput, FleetError, FleetPlan, NodeSpec
from vllm_fleet.profiles.loader import Problem, ProfileError, load_profile, parse_profile, problems_from_validation
from vllm_fleet.profiles.model import DecodeProfile, ProfileLayoutWarning, lift_flat_layout
from vllm_fleet.profiles.planner import Plan, plan
from vllm_fleet.profiles.render import Rendered, config_yaml, render
from vllm_fleet.trust.values import host_key, plain_text, posix_user, ssh_address


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class HostSpec(_Strict):
    """One bare-metal node."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Host name (also the Pulumi resource name and the Ansible inventory name)."""
    address: Annotated[str, AfterValidator(ssh_address)]
    """IP address or DNS name the controller reaches over SSH (the port is ``ssh_port``)."""
    ssh_user: Annotated[str, AfterValidator(posix_user)] = "root"
    """SSH user (root, or a user with passwordless sudo): a POSIX user name."""
    ssh_port: int = Field(default=22, ge=1, le=65535)
    """SSH port."""
    host_key: Annotated[str, AfterValidator(host_key)]
    """The host's SSH public key, ``<type> <base64>`` (``ssh-keyscan -t ed25519 <address>``, without the host
    name in front): pinned, with strict checking, by every SSH connection to the host."""
    hardware: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    """Hardware catalog key of the node's GPUs."""
    gpus: int = Field(default=1, ge=1)
    """GPUs in the node."""
    profile: Annotated[str, AfterValidator(plain_text)] = Field(pattern=r"^[^-]")
    """Built-in profile name or profile YAML path."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Per-host profile fields, in the profile's sections (``scheduler: {max_num_seqs: 32}``), validated like the
    profile itself; flat keys of the old layout are moved into their sections, with a notice."""


class AnalysisSpec(_Strict):
    """Canary analysis (docs/rollouts.md#canary-analysis): after its smoke gate the canary serves its share of the
    real traffic for ``window_s``, and is compared with the serving hosts still on the old config over that window.
    A regression needs both a size (the increases below) and evidence (a one-sided test at ``alpha``)."""

    window_s: float = Field(default=60, ge=5, le=3600)
    """Seconds of traffic compared."""
    warmup_s: float = Field(default=30, ge=0, le=3600)
    """Seconds the canary serves its share of the traffic before the window starts: a restarted server's first
    requests meet cold caches (an empty prefix cache, kernels built on first use). Measured on the lab: a neutral
    change's canary, judged from its first second back, showed +1620 % TTFT p95 and was rolled back."""
    windows: int = Field(default=2, ge=1, le=10)
    """Consecutive windows that must each show the regression before the canary is rolled back: a regression lasts,
    a slow spell of one host passes. A window without one promotes at once, so a good canary costs one window and a
    bad one ``windows``. Measured on the lab (same config on every host, one window): 3 rollbacks in 12."""
    max_ttft_increase: float = Field(default=0.5, gt=0, le=100)
    """TTFT p95 increase allowed, a share (0.5 = +50 %)."""
    max_itl_increase: float = Field(default=0.5, gt=0, le=100)
    """Mean inter-token latency increase allowed, a share."""
    max_error_rate_increase: float = Field(default=0.02, ge=0, le=1)
    """Error share increase allowed (0.02 = 2 points)."""
    min_requests: int = Field(default=20, ge=1, le=1_000_000)
    """Finished requests each side needs in the window; fewer is inconclusive (promoted, and said so)."""
    alpha: float = Field(default=0.01, gt=0, le=0.5)
    """Significance of the one-sided tests (Mann-Whitney U on the latency histograms, z-test on errors)."""


class RolloutSpec(_Strict):
    """How configuration changes roll across the fleet (hosts already serving; new hosts are provisioned apart)."""

    batch_size: int | Annotated[str, Field(pattern=r"^(100|[1-9][0-9]?)%$")] = 1
    """Serving hosts changed at once: a count (``2``) or a share of the serving hosts (``"25%"``, rounded up);
    the next batch starts only when this one passed its smoke gate."""
    canary: bool = True
    """The first batch is a single host (the canary), whatever ``batch_size`` says."""
    pause_s: float = Field(default=0, ge=0, le=3600)
    """Seconds to wait after a batch passed its gate, before the next one starts (to watch the canary)."""
    provision_parallel: int = Field(default=4, ge=1, le=64)
    """New hosts (not serving yet: nothing to protect) converged at once, beside the rollout."""
    analysis: AnalysisSpec | None = None
    """Judge the canary on latency and errors against the hosts not yet rolled, and roll it back when it is worse
    (needs ``canary`` and a router hook: the canary serves real traffic for the window). Absent: no analysis."""

    @field_validator("batch_size")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError('batch_size must be at least 1 (or a share such as "25%")')
        return value


class FleetSpec(_Strict):
    """The whole fleet as stack config describes it."""

    hosts: list[HostSpec] = Field(min_length=1)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    role_vars: dict[str, Any] = Field(default_factory=dict)
    """Extra Ansible variables for every host (mirror URLs, package pins…)."""

    @field_validator("hosts")
    @classmethod
    def _unique(cls, hosts: list[HostSpec]) -> list[HostSpec]:
        clashes: list[str] = []
        for attr in ("name", "address"):
            seen: dict[str, int] = {}
            for i, h in enumerate(hosts):
                value = f"{h.address}:{h.ssh_port}" if attr == "address" else h.name
                if value in seen:
                    clashes.append(f"hosts[{seen[value]}] and hosts[{i}] share the {attr} {value!r}")
                seen.setdefault(value, i)
        if clashes:
            raise ValueError("; ".join(clashes) + ": each host needs its own")
        return hosts


@dataclass(frozen=True)
class NodePlan:
    """Everything the program needs for one host, computed before any resource is registered."""

    host: HostSpec
    profile: DecodeProfile
    rendered: Rendered
    plan: Plan
    config_text: str
    """The exact `vllm serve --config` file the host will get."""

    @property
    def config_hash(self) -> str:
        return hashlib.sha256(self.config_text.encode()).hexdigest()

    @property
    def endpoint(self) -> str:
        return f"http://{self.host.address}:{self.profile.frontend.port}"


def _prefixed(prefix: str, problems: list[Problem]) -> list[Problem]:
    return [Problem(f"{prefix}.{p.field}", p.message) for p in problems]


def _profile_problems(where: str, err: ProfileError) -> list[Problem]:
    """A profile's problems under the host's field (``--profile`` is the command line's name for it)."""
    return [
        Problem(f"{where}.profile" if p.field == "--profile" else f"{where}.profile.{p.field}", p.message)
        for p in err.problems
    ]


def merge_overrides(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The profile with a host's overrides: nested sections (speculative, slo, extra_args) merge key by key, so
    ``speculative: {num_speculative_tokens: 3}`` keeps the profile's method and drafter; ``null`` removes."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_overrides(out[key], value)
        else:
            out[key] = value
    return out


def resolve_host(i: int, host: HostSpec) -> tuple[NodePlan | None, list[Problem]]:
    where = f"hosts[{i}]({host.name})"
    try:
        base = load_profile(host.profile)
    except ProfileError as err:
        return None, _profile_problems(where, err)
    overrides, moved = lift_flat_layout(host.overrides)
    if moved:
        warnings.warn(ProfileLayoutWarning(f"{where}.overrides", moved), stacklevel=2)
    data = merge_overrides(base.model_dump(exclude_unset=True), overrides)
    data.setdefault("gpus", host.gpus)
    try:
        profile = parse_profile(data, host.profile)
    except ProfileError as err:
        return None, _prefixed(f"{where}.overrides", err.problems)
    problems: list[Problem] = []
    known = hardware_catalog()
    if host.hardware not in known:
        problems.append(
            Problem(f"{where}.hardware", f"unknown hardware {host.hardware!r}; known: {', '.join(sorted(known))}")
        )
    elif profile.hardware != host.hardware:
        problems.append(
            Problem(
                f"{where}.profile",
                f"{profile.name} is tuned for {profile.hardware}, the host has {host.hardware}; "
                f"pick a {host.hardware} profile or fix the host's hardware",
            )
        )
    try:
        rendered = render(profile)
    except ProfileError as err:
        return None, problems + _profile_problems(where, err)
    try:
        result = plan(profile)
    except KeyError as err:  # a model or hardware the catalog does not know, or an unreadable config.json
        field = "hardware" if "hardware" in str(err.args[0]) else "model.model"
        return None, [*problems, Problem(f"{where}.profile.{field}", str(err.args[0]))]
    problems += [Problem(f"{where}.profile.{f.field}", f.message) for f in result.findings if f.severity == "error"]
    if problems:
        return None, problems
    return NodePlan(host, profile, rendered, result, config_yaml(profile, rendered)), []


_MISSING_HINTS = {
    "host_key": "required: pin the host's SSH key, the last two fields of `ssh-keyscan -t ed25519 <address>`",
}


def _host_field(field: str, data: Any) -> str:
    """``hosts.3.address`` → ``hosts[3](gpu-b).address``, as every other fleet error names a host."""
    m = re.match(r"^hosts\.(\d+)(\.|$)", field)
    if not m:
        return field
    i = int(m.group(1))
    hosts = data.get("hosts") if isinstance(data, dict) else None
    name = hosts[i].get("name") if isinstance(hosts, list) and i < len(hosts) and isinstance(hosts[i], dict) else None
    shown = f"({name})" if isinstance(name, str) and re.match(r"^[a-z0-9][a-z0-9-]*$", name) else ""
    return f"hosts[{i}]{shown}{field[m.end(1) :]}"


def parse_fleet(data: Any) -> FleetSpec:
    try:
        return FleetSpec.model_validate(data)
    except ValidationError as err:
        problems = []
        for p in problems_from_validation(err, FleetSpec):
            leaf = p.field.rsplit(".", 1)[-1]
            message = _MISSING_HINTS.get(leaf, p.message) if p.message.startswith("required field") else p.message
            problems.append(Problem(_host_field(p.field, data), message))
        raise FleetError(problems + _problems_beyond_the_schema(data)) from None


def _problems_beyond_the_schema(data: Any) -> list[Problem]:
    """With a schema error somewhere, the rest is still judged, so that one run names every problem: each host
    that is valid on its own (its profile and overrides), and the role_vars."""
    if not isinstance(data, dict):
        return []
    problems: list[Problem] = []
    hosts = data.get("hosts")
    for i, raw in enumerate(hosts if isinstance(hosts, list) else []):
        try:
            host = HostSpec.model_validate(raw)
        except ValidationError:
            continue
        problems += resolve_host(i, host)[1]
    role_vars = data.get("role_vars")
    if isinstance(role_vars, dict):
        problems += role_vars_problems(role_vars, [])
    return problems


def resolve_fleet(spec: FleetSpec) -> list[NodePlan]:
    """One NodePlan per host, or FleetError with every problem of every host."""
    nodes: list[NodePlan] = []
    problems: list[Problem] = []
    for i, host in enumerate(spec.hosts):
        node, errs = resolve_host(i, host)
        problems += errs
        if node:
            nodes.append(node)
    if problems:
        raise FleetError(problems)
    return nodes


def node_spec(node: NodePlan) -> NodeSpec:
    host = node.host
    return NodeSpec(
        name=host.name,
        address=host.address,
        ssh_port=host.ssh_port,
        ssh_user=host.ssh_user,
        host_key=host.host_key,
        hardware=host.hardware,
        host=host.model_dump(mode="json"),
        profile=node.profile.name,
        profile_data=node.profile.model_dump(mode="json", exclude_none=True),
        vllm_version=node.rendered.vllm_version,
        vllm_config=node.rendered.config,
        config_hash=node.config_hash,
        endpoint=node.endpoint,
    )


def _strings(value: Any, field: str) -> Iterator[tuple[str, str]]:
    """Every string in a role_vars value, with its field (``role_vars.a.b[0]``)."""
    if isinstance(value, str):
        yield field, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{field}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{field}[{i}]")


_TEMPLATE_IN_DATA = (
    "is a Jinja template: stack config is data, passed to Ansible as it is and never evaluated; write the value itself"
)
_URL_CREDENTIALS = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s]*@")
_CREDENTIALS_IN_DATA = (
    "carries credentials in the URL (user[:password]@): role_vars are not secret (in clear in the stack file, the "
    "state and the nodes' variables); use a mirror the nodes reach without them, or put them on the hosts "
    "(pip.conf, /etc/apt/auth.conf.d), never in stack config"
)


def _data_problems(role_vars: dict[str, Any]) -> list[Problem]:
    """Templates (never evaluated) and URLs with credentials (role_vars are not secret), by field."""
    problems = []
    for field, text in _strings(role_vars, "role_vars"):
        if "{{" in text or "{%" in text:
            problems.append(Problem(field, _TEMPLATE_IN_DATA))
        if _URL_CREDENTIALS.match(text.strip()):
            problems.append(Problem(field, _CREDENTIALS_IN_DATA))
    return problems


def role_vars_problems(role_vars: dict[str, Any], nodes: list[NodeSpec]) -> list[Problem]:
    """The fleet's role_vars against the roles' own argument specs, the unit's value syntax, and what preflight
    will require of each host once vllm-fleet's own variables (hardware, profile) are added."""
    from vllm_fleet.fleet.role_vars import extravars, required_problems, role_var_problems
    from vllm_fleet.trust.systemd_values import role_input_problems

    problems = _data_problems(role_vars) + role_var_problems(role_vars)
    for line in role_input_problems(role_vars):
        field, _, message = line.partition(": ")
        problems.append(Problem(f"role_vars.{field}", message))
    if problems:
        return problems
    for i, node in enumerate(nodes):
        effective = extravars(ConvergeInput.of(node, role_vars))
        problems += [
            Problem(f"hosts[{i}]({node.name}).role_vars.{p.field}", p.message)
            for p in required_problems(effective, prefix="")
        ]
    return problems


def plan_fleet(data: Any) -> FleetPlan:
    """Stack config's fleet → the plain-data plan the Pulumi program registers, or FleetError."""
    spec = parse_fleet(data)
    nodes = [node_spec(n) for n in resolve_fleet(spec)]
    problems = role_vars_problems(spec.role_vars, nodes)
    if problems:
        raise FleetError(problems)
    # A JSON round trip: the plan is exactly what a memoised copy would give back.
    r = spec.rollout
    analysis = r.analysis.model_dump() if r.analysis is not None else None
    plan = FleetPlan(nodes, r.batch_size, spec.role_vars, r.canary, r.pause_s, r.provision_parallel, analysis)
    return FleetPlan.from_json(plan.to_json())
