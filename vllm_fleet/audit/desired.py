"""What each host of a fleet should run, from the same plan the Pulumi program registers (vllm_fleet.fleet)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from vllm_fleet.audit.collect import Target
from vllm_fleet.audit.evidence import Desired
from vllm_fleet.fleet_plan import FleetPlan, NodeSpec
from vllm_fleet.vllm.render import config_text


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")


def desired_for(node: NodeSpec, role_vars: dict[str, Any]) -> Desired:
    """The node's desired state with the role variables the converge passes (converge.extravars)."""
    from vllm_fleet.converge import extravars

    v = extravars({**asdict(node), "role_vars": role_vars})
    instance = str(v.get("vllm_service_instance", "main"))
    config_dir = str(v.get("vllm_service_config_dir", "/etc/vllm"))
    driver = _bool(v.get("vllm_fleet_nvidia_driver", True))
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
        venv=str(v.get("vllm_service_venv") or v.get("vllm_venv") or "/opt/vllm"),
        port=int(node.profile_data.get("port", 8000)),
        driver_version=str(v["nvidia_driver_version"]) if driver and v.get("nvidia_driver_version") else None,
        cuda_version=str(v["cuda_toolkit_version"]) if cuda and v.get("cuda_toolkit_version") else None,
    )


def targets(plan: FleetPlan) -> list[Target]:
    return [
        Target(desired_for(n, plan.role_vars), ssh_user=n.ssh_user, ssh_port=n.ssh_port, host_key=n.host_key)
        for n in plan.nodes
    ]
