"""Where NVIDIA's CUDA toolkit packages install a release: the one place both the cuda_toolkit role (login PATH)
and the vllm_service unit (CUDA_HOME, PATH) take it from (filter nvidia_cuda_home)."""

from __future__ import annotations

import re

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?$")


def cuda_home(version: str) -> str:
    """``13.0.2`` -> ``/usr/local/cuda-13.0`` (cuda-toolkit-13-0's prefix in NVIDIA's .deb packages)."""
    m = _VERSION.match(str(version).strip())
    if m is None:
        raise ValueError(f"cuda_toolkit_version: {version!r} is not a CUDA version such as 12.8.1")
    return f"/usr/local/cuda-{m[1]}.{m[2]}"
