"""What each host of a fleet should run, from the same plan the Pulumi program registers (vllm_fleet.fleet.spec)."""

from __future__ import annotations

from typing import Any

from vllm_fleet.audit.collect import Target
from vllm_fleet.audit.evidence import Desired
from vllm_fleet.fleet.plan import ConvergeInput, FleetPlan, NodeSpec
from vllm_fleet.fleet.role_vars import extravars, role_default
from vllm_fleet.models.staging import served_entry
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.render import config_text


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")


def desired_for(node: NodeSpec, role_vars: dict[str, Any]) -> Desired:
    """The node's desired state with the role variables the converge passes (role_vars.extravars); where the
    stack leaves a path to the role, the role's own default (its argument_specs)."""
    v = extravars(ConvergeInput.of(node, role_vars))
    instance = str(v.get("vllm_service_instance", role_default("vllm_service_instance")))
    config_dir = str(v.get("vllm_service_config_dir", role_default("vllm_service_config_dir")))
    driver = _bool(v.get("vllm_fleet_nvidia_driver", True))
    profile = DecodeProfile.model_validate(node.profile_data)
    models_dir = str(v.get("vllm_models_dir", role_default("vllm_models_dir")))
    staged = served_entry(v.get("vllm_models"), models_dir, profile.model.serve_model)
    cuda = _bool(v.get("vllm_fleet_cuda_toolkit", True))
    return Desired(
        host=node.name,
        address=node.address,
        profile=node.profile,
        profile_data=node.profile_data,
        vllm_version=node.vllm_version,
        config_text=config_text(node.vllm_config, node.profile, node.vllm_version),
        config_path=f"{config_dir}/{instance}.yaml",
        unit=f"vllm-{instance}.service",
        unit_lkg_path=f"{config_dir}/{instance}.service.lkg",
        journal_path=f"/var/lib/vllm-fleet/{instance}.rollout.json",
        cordon_path=f"{config_dir}/{instance}.cordon",
        venv=str(v.get("vllm_service_venv") or v.get("vllm_venv") or role_default("vllm_venv")),
        port=profile.frontend.port,
        driver_version=str(v["nvidia_driver_version"]) if driver and v.get("nvidia_driver_version") else None,
        cuda_version=str(v["cuda_toolkit_version"]) if cuda and v.get("cuda_toolkit_version") else None,
        model_dir=profile.model.serve_model.rstrip("/") if staged is not None else None,
        model_manifest_sha256=str(staged["manifest_sha256"]) if staged and staged.get("manifest_sha256") else None,
    )


def targets(plan: FleetPlan) -> list[Target]:
    return [
        Target(desired_for(n, plan.role_vars), ssh_user=n.ssh_user, ssh_port=n.ssh_port, host_key=n.host_key)
        for n in plan.nodes
    ]


def inventory_targets(sources: list[str], pattern: str = "vllm_nodes") -> list[Target]:
    """The hosts of an Ansible inventory (the playbooks' path), each with its profile and its own variables.

    A host needs ``vllm_fleet_profile`` and ``vllm_fleet_host_key`` (its pinned SSH key: the audit, like every
    vllm-fleet SSH connection, trusts no key it was not given). Raises FleetError naming each problem."""
    from vllm_fleet.fleet.files import ansible_inventory, check_inventory, group_hosts
    from vllm_fleet.fleet.plan import FleetError
    from vllm_fleet.fleet.spec import HostSpec, node_spec, resolve_host
    from vllm_fleet.profiles.loader import Problem, ProfileError, load_profile

    problems = check_inventory(sources, pattern)
    inv = ansible_inventory(sources)
    hostvars: dict[str, dict[str, Any]] = (inv.get("_meta") or {}).get("hostvars") or {}
    out: list[Target] = []
    for i, name in enumerate(group_hosts(inv, pattern) if pattern in inv else [pattern]):
        v = hostvars.get(name) or {}
        for var in ("vllm_fleet_profile", "vllm_fleet_host_key"):
            if not v.get(var):
                problems.append(Problem(f"{name}.{var}", "missing: the audit needs it for every host"))
        if problems:
            continue
        try:
            hardware = load_profile(str(v["vllm_fleet_profile"])).hardware
            host = HostSpec(
                name=name,
                address=str(v.get("ansible_host", name)),
                ssh_user=str(v.get("ansible_user", "root")),
                ssh_port=int(v.get("ansible_port", 22)),
                host_key=str(v["vllm_fleet_host_key"]),
                hardware=hardware,
                profile=str(v["vllm_fleet_profile"]),
            )
        except (ProfileError, ValueError) as err:
            problems.append(Problem(f"{name}", str(err).splitlines()[0]))
            continue
        node, errors = resolve_host(i, host)
        problems += errors
        if node is not None:
            role_vars = {k: val for k, val in v.items() if not k.startswith("ansible_")}
            spec = node_spec(node)
            out.append(Target(desired_for(spec, role_vars), host.ssh_user, host.ssh_port, host.host_key))
    if problems:
        raise FleetError(problems)
    return out
